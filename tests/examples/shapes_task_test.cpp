#include "shapes_task.hpp"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "catch.hpp"

using shardgraph::dtype;
using shardgraph::host_tensor;
using shardgraph::examples::shapes_task;
using shardgraph::testing::ContainsSubstring;
using shardgraph::testing::error_of;

namespace {

// What the pixels of one image (3, side, side) show, read independently of the task's scene: the
// groups of touching pixels (8 neighbours) brighter than 0.5 in some channel, and the channels
// bright anywhere.
struct seen {
  int shapes = 0;
  std::set<int> channels;
};
seen look_at(const host_tensor& pixels, std::int64_t image, std::int64_t side) {
  seen s;
  std::vector<int> lit(static_cast<std::size_t>(side * side), 0);  // 1 lit, 2 lit and reached
  for (int c = 0; c < 3; ++c)
    for (std::int64_t p = 0; p < side * side; ++p)
      if (pixels.at((image * 3 + c) * side * side + p) > 0.5) {
        lit[static_cast<std::size_t>(p)] = 1;
        s.channels.insert(c);
      }
  for (std::int64_t p = 0; p < side * side; ++p) {
    if (lit[static_cast<std::size_t>(p)] != 1) continue;
    ++s.shapes;
    std::vector<std::int64_t> todo{p};
    lit[static_cast<std::size_t>(p)] = 2;
    while (!todo.empty()) {
      const std::int64_t at = todo.back();
      todo.pop_back();
      for (std::int64_t dy = -1; dy <= 1; ++dy)
        for (std::int64_t dx = -1; dx <= 1; ++dx) {
          const std::int64_t y = at / side + dy, x = at % side + dx;
          if (y < 0 || x < 0 || y >= side || x >= side || lit[static_cast<std::size_t>(y * side + x)] != 1) continue;
          lit[static_cast<std::size_t>(y * side + x)] = 2;
          todo.push_back(y * side + x);
        }
    }
  }
  return s;
}

// The colour whose RGB lights these channels (red, green, blue, yellow), or -1.
int colour_of(const std::set<int>& channels) {
  if (channels == std::set<int>{0}) return 0;
  if (channels == std::set<int>{1}) return 1;
  if (channels == std::set<int>{2}) return 2;
  if (channels == std::set<int>{0, 1}) return 3;
  return -1;
}

using scene_key = std::vector<int>;
scene_key key_of(const shapes_task::scene& s) {
  scene_key k{s.colour};
  for (const auto& sh : s.shapes) k.insert(k.end(), {sh.kind, sh.row, sh.column});
  return k;
}

}  // namespace

TEST_CASE("shapes_task's batches hold image placeholders, a question and only the answer as target",
          "[examples]") {
  const shapes_task task{.image_size = 12, .patch_size = 4, .seed = 3};
  CHECK((task.patches() == 9 && task.seq() == 10 && task.answer_position() == 9));
  const auto batch = task.batch(5, 64, false, dtype::f64);
  REQUIRE(batch.size() == 3);
  CHECK(batch.at("pixel_values").shape() == std::vector<std::int64_t>{64, 3, 12, 12});
  CHECK(batch.at("input_ids").shape() == std::vector<std::int64_t>{64, 10});
  CHECK(batch.at("targets").shape() == std::vector<std::int64_t>{64, 10});
  const auto ids = batch.at("input_ids").values<std::int64_t>();
  const auto targets = batch.at("targets").values<std::int64_t>();
  std::map<std::string, int> answers;
  for (std::int64_t r = 0; r < 64; ++r) {
    for (std::int64_t t = 0; t < 9; ++t) {
      REQUIRE(ids[static_cast<std::size_t>(r * 10 + t)] == shapes_task::image_token);
      REQUIRE(targets[static_cast<std::size_t>(r * 10 + t)] == -100);
    }
    const std::int64_t question = ids[static_cast<std::size_t>(r * 10 + 9)];
    const std::int64_t answer = targets[static_cast<std::size_t>(r * 10 + 9)];
    ++answers[std::string(shapes_task::word(question)) + " " + std::string(shapes_task::word(answer))];
    // the answer is what the picture shows, read from its pixels
    const seen s = look_at(batch.at("pixel_values"), r, 12);
    if (question == shapes_task::count_token) {
      CHECK(answer == shapes_task::first_count_token + s.shapes - 1);
    } else {
      REQUIRE(question == shapes_task::colour_token);
      CHECK(answer == shapes_task::first_colour_token + colour_of(s.channels));
    }
  }
  // both questions, and every answer of each, occur in 64 rows
  for (const char* a : {"count one", "count two", "count three", "colour red", "colour green", "colour blue",
                        "colour yellow"})
    CHECK(answers[a] > 0);
  CHECK(answers.size() == 7);
  CHECK(shapes_task::word(12) == "?");
  // in the smallest image too, the shapes stay apart: as many groups of pixels as the count says
  const shapes_task small{.image_size = 8, .patch_size = 4, .seed = 4};
  for (std::int64_t i = 0; i < 200; ++i) {
    const shapes_task::example e = small.example_at(i, false);
    const host_tensor pixels = host_tensor::from<double>({1, 3, 8, 8}, small.render(e));
    CHECK(look_at(pixels, 0, 8).shapes == static_cast<int>(e.picture.shapes.size()));
  }
}

TEST_CASE("shapes_task is deterministic in its seed and keeps held-out scenes out of training",
          "[examples]") {
  const shapes_task task{.seed = 9, .held_out_percent = 20};
  const auto a = task.batch(0, 8, false, dtype::f32), b = task.batch(0, 8, false, dtype::f32);
  CHECK(std::equal(a.at("pixel_values").bytes().begin(), a.at("pixel_values").bytes().end(),
                   b.at("pixel_values").bytes().begin()));
  // example i of a batch from `first` is example first + i
  const auto later = task.batch(3, 2, false, dtype::f32);
  CHECK(later.at("targets").values<std::int64_t>()[16] == a.at("targets").values<std::int64_t>()[3 * 17 + 16]);
  const shapes_task other{.seed = 10, .held_out_percent = 20};
  CHECK(other.batch(0, 8, false, dtype::f32).at("pixel_values").values<float>()[0] !=
        a.at("pixel_values").values<float>()[0]);

  std::set<scene_key> trained, held_out;
  for (std::int64_t i = 0; i < 3000; ++i) {
    trained.insert(key_of(task.example_at(i, false).picture));
    trained.insert(key_of(other.example_at(i, false).picture));
  }
  for (std::int64_t i = 0; i < 300; ++i) {
    const shapes_task::scene s = task.example_at(i, true).picture;
    CHECK(task.is_held_out(s));
    held_out.insert(key_of(s));
  }
  for (const scene_key& k : held_out) CHECK(!trained.contains(k));
  CHECK(held_out.size() > 250);  // many distinct scenes, not a few repeated
}

TEST_CASE("shapes_task refuses sizes that leave no room or make no patches", "[examples]") {
  CHECK_THAT(error_of([] { (void)shapes_task{.image_size = 16, .patch_size = 5}.batch(0, 1, false, dtype::f32); }),
             ContainsSubstring("shardgraph: shapes_task: patch_size 5 does not divide image_size 16"));
  CHECK_THAT(error_of([] { (void)shapes_task{.image_size = 4, .patch_size = 4}.example_at(0, false); }),
             ContainsSubstring("image_size 4 leaves no room for 3 shapes apart"));
  CHECK_THAT(error_of([] { (void)shapes_task{.held_out_percent = 0}.example_at(0, false); }),
             ContainsSubstring("held_out_percent is 0"));
  CHECK_THAT(error_of([] { (void)shapes_task{}.batch(-1, 1, false, dtype::f32); }),
             ContainsSubstring("first -1 and rows 1"));
}
