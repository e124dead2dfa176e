#pragma once
// shapes_task: the vision-language examples' training task, generated here so that training shows
// real learning with no download. Each example is a small image of 1 to 3 shapes of one colour and a
// one-word question about it; the model answers with one word:
//
//   image (3, 16, 16), seen as 4 x 4 patches:    . . . . . . . .    question "count"  -> answer "two"
//   two blue shapes anywhere, apart; a shape     . # # . . . . .    question "colour" -> answer "blue"
//   may lie across patches                       . # # . . . # .
//                                                . . . . . # # #
//                                                . . . . . . # .   (16 x 16 drawn at half scale)
//
// The tokens of an example, seq = patches + 1 (patches = (image_size / patch_size)^2):
//   input_ids  [image x patches, question]     the image placeholders, then "count" or "colour"
//   targets    [-100 x patches, answer]        the loss counts the answer position only
// A model of the LLaVA family replaces the placeholders' embeddings by the image's projected patch
// features, so the answer is predicted at the question's position, from the image through attention.
//
// Vocabulary (vocab_size = 11): 0 pad (never in an example), 1 image, 2 "count", 3 "colour",
// 4-6 "one" "two" "three", 7-10 "red" "green" "blue" "yellow".
//
// A scene: a colour, a count in [1, 3], and that many shapes (a 2 x 2 square, a 3 x 3 plus or a
// 1 x 3 bar) at uniform positions, each shape's box at least one pixel from the others' (drawn
// again until so), so that the shapes never touch. Pixels are the colour's RGB (each channel 0 or 1)
// on the shapes and 0 elsewhere, plus uniform noise in [-noise, noise] on every pixel. The colour,
// the count and the question are uniform.
//
// Held out: a scene is held out when mix64 of its description (colour, then each shape's kind and
// position, in the order drawn) % 100 < held_out_percent (mix64: shardgraph/data/splitmix64.hpp).
// The split depends on the scene alone, not on the seed, the noise or the question, so a held-out
// scene is never trained on, under either question or any seed.
//
//   shapes_task task{.seed = 1};
//   tensor_map batch = task.batch(step * 32, 32, false, dtype::f32);   // examples step*32 ... +31
//   trainer.step(batch);                    // pixel_values, input_ids, targets
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/data/splitmix64.hpp"

namespace shardgraph::examples {

struct shapes_task {
  std::int64_t image_size = 16;  // pixels of a side: 8 or more, a multiple of patch_size
  std::int64_t patch_size = 4;   // the model's patches: they set seq
  std::uint64_t seed = 0;        // chooses the examples of a split, not the split
  int held_out_percent = 10;     // share of scenes kept for evaluation: 1 to 99
  double noise = 0.1;            // amplitude of the pixels' uniform noise

  static constexpr std::int64_t pad_token = 0, image_token = 1, count_token = 2, colour_token = 3;
  static constexpr std::int64_t first_count_token = 4;   // "one", "two", "three"
  static constexpr std::int64_t first_colour_token = 7;  // "red", "green", "blue", "yellow"
  static constexpr int vocab_size = 11;
  static constexpr int channels = 3, colours = 4, max_shapes = 3, shape_kinds = 3;
  static constexpr std::int64_t ignored = -100;  // the targets' ignore_index

  enum class question { count, colour };
  struct shape {
    int kind = 0;             // 0 square 2 x 2, 1 plus 3 x 3, 2 bar 1 x 3
    int row = 0, column = 0;  // the top-left corner of its box in the image
  };
  struct scene {
    int colour = 0;             // 0 red, 1 green, 2 blue, 3 yellow
    std::vector<shape> shapes;  // 1 to 3, apart
  };
  struct example {
    scene picture;
    question asked = question::count;
    std::uint64_t noise_seed = 0;  // the pixels' noise
    std::int64_t answer() const {
      return asked == question::count ? first_count_token + static_cast<std::int64_t>(picture.shapes.size()) - 1
                                      : first_colour_token + picture.colour;
    }
    std::int64_t question_token() const { return asked == question::count ? count_token : colour_token; }
  };

  std::int64_t patches() const { return (image_size / patch_size) * (image_size / patch_size); }
  // input_ids and targets are (batch, seq): the image placeholders and the question.
  std::int64_t seq() const { return patches() + 1; }
  std::int64_t answer_position() const { return patches(); }

  bool is_held_out(const scene& s) const {
    return describe_hash(s) % 100 < static_cast<std::uint64_t>(held_out_percent);
  }

  // Example `index` of the training (held_out false) or held-out split: deterministic in (seed,
  // held_out, index, sizes, held_out_percent); the generator is splitmix64(mix64(seed ^ mix64(held_out
  // ? 2 : 1)) ^ mix64(index)); a scene of the other split is drawn again.
  example example_at(std::int64_t index, bool held_out) const {
    check();
    data::splitmix64 rng(data::mix64(seed ^ data::mix64(held_out ? 2 : 1)) ^
                         data::mix64(static_cast<std::uint64_t>(index)));
    constexpr int attempts = 1 << 16;
    for (int attempt = 0; attempt < attempts; ++attempt) {
      example e{.picture = draw_scene(rng)};
      e.asked = rng.below(2) == 0 ? question::count : question::colour;
      e.noise_seed = rng.next();
      if (is_held_out(e.picture) == held_out) return e;
    }
    fail("shapes_task::example_at", "no " + std::string(held_out ? "held-out" : "training") +
                                        " scene found in " + std::to_string(attempts) + " draws",
         "Move held_out_percent away from 0 and 100");
  }

  // The pixels of an example, (channels, image_size, image_size) row-major.
  std::vector<double> render(const example& e) const {
    check();
    const std::int64_t side = image_size;
    std::vector<double> pixels(static_cast<std::size_t>(channels * side * side));
    data::splitmix64 rng(e.noise_seed);
    for (double& p : pixels) p = noise * (2.0 * static_cast<double>(rng.next() >> 11) * 0x1.0p-53 - 1.0);
    constexpr std::array<std::array<double, channels>, colours> rgb{
        {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 1, 0}}};
    for (const shape& s : e.picture.shapes)
      for (const auto& [dr, dc] : pixels_of(s.kind))
        for (int c = 0; c < channels; ++c)
          pixels[static_cast<std::size_t>((c * side + s.row + dr) * side + s.column + dc)] +=
              rgb[static_cast<std::size_t>(e.picture.colour)][static_cast<std::size_t>(c)];
    return pixels;
  }

  // Examples first ... first + rows - 1 of a split as one batch: pixel_values (rows, 3, image_size,
  // image_size) of dtype `pixels`, input_ids and targets (rows, seq) i64.
  std::map<std::string, host_tensor> batch(std::int64_t first, std::int64_t rows, bool held_out,
                                           dtype pixels) const {
    check();
    if (first < 0 || rows < 1)
      fail("shapes_task::batch", "first " + std::to_string(first) + " and rows " + std::to_string(rows),
           "Ask for one or more rows from a first index of 0 or more");
    const std::int64_t side = image_size, t = seq(), image_numel = channels * side * side;
    host_tensor values(pixels, {rows, channels, side, side});
    std::vector<std::int64_t> ids(static_cast<std::size_t>(rows * t), image_token),
        targets(static_cast<std::size_t>(rows * t), ignored);
    for (std::int64_t r = 0; r < rows; ++r) {
      const example e = example_at(first + r, held_out);
      const std::vector<double> p = render(e);
      for (std::int64_t i = 0; i < image_numel; ++i) values.set(r * image_numel + i, p[static_cast<std::size_t>(i)]);
      ids[static_cast<std::size_t>(r * t + answer_position())] = e.question_token();
      targets[static_cast<std::size_t>(r * t + answer_position())] = e.answer();
    }
    std::map<std::string, host_tensor> out;
    out.emplace("pixel_values", std::move(values));
    out.emplace("input_ids", host_tensor::from<std::int64_t>({rows, t}, ids));
    out.emplace("targets", host_tensor::from<std::int64_t>({rows, t}, targets));
    return out;
  }

  // "pad", "image", "count", "colour", "one" ... "yellow"; "?" outside the vocabulary.
  static std::string_view word(std::int64_t token) {
    constexpr std::array<std::string_view, vocab_size> words{
        "pad", "image", "count", "colour", "one", "two", "three", "red", "green", "blue", "yellow"};
    return token >= 0 && token < vocab_size ? words[static_cast<std::size_t>(token)] : "?";
  }

  // The (row, column) offsets of a kind's pixels from its top-left corner.
  static std::vector<std::array<int, 2>> pixels_of(int kind) {
    if (kind == 0) return {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
    if (kind == 1) return {{0, 1}, {1, 0}, {1, 1}, {1, 2}, {2, 1}};
    return {{0, 0}, {0, 1}, {0, 2}};
  }
  // A kind's (height, width).
  static std::array<int, 2> extent_of(int kind) {
    if (kind == 0) return {2, 2};
    if (kind == 1) return {3, 3};
    return {1, 3};
  }

 private:
  void check() const {
    if (patch_size < 1 || image_size % patch_size != 0)
      fail("shapes_task",
           "patch_size " + std::to_string(patch_size) + " does not divide image_size " + std::to_string(image_size),
           "Use a positive patch_size that divides image_size");
    if (image_size < 8)
      fail("shapes_task", "image_size " + std::to_string(image_size) + " leaves no room for 3 shapes apart",
           "Use an image_size of 8 or more");
    if (held_out_percent < 1 || held_out_percent > 99)
      fail("shapes_task", "held_out_percent is " + std::to_string(held_out_percent) + ", outside [1, 99]",
           "Keep some scenes for training and some for evaluation");
  }

  scene draw_scene(data::splitmix64& rng) const {
    scene s{.colour = static_cast<int>(rng.below(colours)), .shapes = {}};
    const int count = 1 + static_cast<int>(rng.below(max_shapes));
    for (int tries = 1; static_cast<int>(s.shapes.size()) < count; ++tries) {
      if (tries % 64 == 0) s.shapes.clear();  // the first ones left no room: place them all again
      shape sh{.kind = static_cast<int>(rng.below(shape_kinds))};
      const auto [height, width] = extent_of(sh.kind);
      sh.row = static_cast<int>(rng.below(static_cast<std::uint64_t>(image_size - height + 1)));
      sh.column = static_cast<int>(rng.below(static_cast<std::uint64_t>(image_size - width + 1)));
      if (std::none_of(s.shapes.begin(), s.shapes.end(), [&](const shape& other) { return near(sh, other); }))
        s.shapes.push_back(sh);
    }
    return s;
  }

  // Whether the boxes of a and b, each grown by one pixel, overlap: the shapes would touch.
  static bool near(const shape& a, const shape& b) {
    const auto [ha, wa] = extent_of(a.kind);
    const auto [hb, wb] = extent_of(b.kind);
    return a.row <= b.row + hb && b.row <= a.row + ha && a.column <= b.column + wb && b.column <= a.column + wa;
  }

  static std::uint64_t describe_hash(const scene& s) {
    std::uint64_t h = data::mix64(static_cast<std::uint64_t>(s.colour) + 1);
    for (const shape& sh : s.shapes)
      for (const int v : {sh.kind, sh.row, sh.column})
        h = data::mix64(h ^ data::mix64(static_cast<std::uint64_t>(v) + 1));
    return h;
  }
};

}  // namespace shardgraph::examples
