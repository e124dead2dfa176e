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
// cells holding a pixel brighter than 0.5 in some channel, and the channels bright anywhere.
struct seen {
  int cells = 0;
  std::set<int> channels;
};
seen look_at(const host_tensor& pixels, std::int64_t image, std::int64_t side, std::int64_t cell) {
  seen s;
  std::set<std::int64_t> lit;
  for (int c = 0; c < 3; ++c)
    for (std::int64_t y = 0; y < side; ++y)
      for (std::int64_t x = 0; x < side; ++x)
        if (pixels.at(((image * 3 + c) * side + y) * side + x) > 0.5) {
          lit.insert(y / cell * (side / cell) + x / cell);
          s.channels.insert(c);
        }
  s.cells = static_cast<int>(lit.size());
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
  for (const auto& sh : s.shapes) k.insert(k.end(), {sh.cell, sh.kind, sh.row, sh.column});
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
    const seen s = look_at(batch.at("pixel_values"), r, 12, 4);
    if (question == shapes_task::count_token) {
      CHECK(answer == shapes_task::first_count_token + s.cells - 1);
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

TEST_CASE("shapes_task refuses sizes that make no grid of cells", "[examples]") {
  CHECK_THAT(error_of([] { (void)shapes_task{.image_size = 16, .patch_size = 5}.batch(0, 1, false, dtype::f32); }),
             ContainsSubstring("shardgraph: shapes_task: image_size 16 and patch_size 5"));
  CHECK_THAT(error_of([] { (void)shapes_task{.image_size = 4, .patch_size = 4}.example_at(0, false); }),
             ContainsSubstring("holds fewer than 3 shapes"));
  CHECK_THAT(error_of([] { (void)shapes_task{.held_out_percent = 0}.example_at(0, false); }),
             ContainsSubstring("held_out_percent is 0"));
  CHECK_THAT(error_of([] { (void)shapes_task{}.batch(-1, 1, false, dtype::f32); }),
             ContainsSubstring("first -1 and rows 1"));
}
