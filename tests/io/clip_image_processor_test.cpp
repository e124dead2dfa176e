// CLIP's image preprocessing (io/clip_image_processor.hpp, io/image_resize.hpp) against
// transformers' CLIPImageProcessorPil on a committed image (tests/golden/clip_image, made by
// multimodal_golden.py): Pillow's bicubic resize is followed step for step, so the resized pixels
// are Pillow's; HF rescales and normalizes in float32, so pixel_values agree to float32 rounding
// (compared to 1e-5, absolute; one pixel level off would be 1/255/std, about 0.015). A 30 x 45 image is
// reduced (shortest edge 12, antialiased) and enlarged (40), each center-cropped.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <shardgraph/io/clip_image_processor.hpp>
#include <shardgraph/io/safetensors.hpp>

#include "catch.hpp"

namespace sg = shardgraph;

namespace {

const std::string clip_dir = std::string(SHARDGRAPH_GOLDEN_DIR) + "/clip_image";

sg::io::rgb8_image golden_image(const sg::io::safetensors_file& golden) {
  const std::vector<std::int64_t> shape = golden.info("rgb").shape;  // (height, width, 3)
  sg::io::rgb8_image image{.width = shape.at(1), .height = shape.at(0), .values = {}};
  for (std::int64_t v : golden.read_as<std::int64_t>("rgb"))
    image.values.push_back(static_cast<std::uint8_t>(v));
  return image;
}

double largest_difference(const sg::host_tensor& got, const std::vector<double>& expected) {
  REQUIRE(got.numel() == static_cast<std::int64_t>(expected.size()));
  double worst = 0;
  for (std::size_t i = 0; i < expected.size(); ++i)
    worst = std::max(worst, std::abs(got.at(static_cast<std::int64_t>(i)) - expected[i]));
  return worst;
}

}  // namespace

TEST_CASE("CLIP preprocessing equals CLIPImageProcessorPil's pixel_values", "[io][golden]") {
  const sg::io::safetensors_file golden(clip_dir + "/golden.safetensors");
  const sg::io::rgb8_image image = golden_image(golden);
  REQUIRE((image.width == 45 && image.height == 30));

  sg::io::clip_image_processor p = sg::io::read_clip_image_processor(clip_dir + "/preprocessor_config.json");
  CHECK((p.shortest_edge == 12 && p.crop_height == 10 && p.crop_width == 10));
  CHECK((p.do_resize && p.do_center_crop && p.do_rescale && p.do_normalize));
  CHECK(p.image_mean[2] == 0.40821073);
  CHECK(p.image_std[0] == 0.26862954);

  const sg::host_tensor down = sg::io::clip_pixel_values({image}, p, sg::dtype::f64);
  CHECK(down.shape() == std::vector<std::int64_t>{1, 3, 10, 10});
  CHECK(largest_difference(down, golden.read_as<double>("pixel_values.down")) < 1e-5);

  p.shortest_edge = 40;
  p.crop_height = p.crop_width = 36;
  const sg::host_tensor up = sg::io::clip_pixel_values({image, image}, p);  // f32, a batch of two
  CHECK(up.type() == sg::dtype::f32);
  CHECK(up.shape() == std::vector<std::int64_t>{2, 3, 36, 36});
  std::vector<double> twice = golden.read_as<double>("pixel_values.up");
  twice.insert(twice.end(), twice.begin(), twice.end());
  CHECK(largest_difference(up, twice) < 1e-5);

  // The same size is no resampling; a resized copy is not the image.
  CHECK(sg::io::resize_bicubic(image, 45, 30).values == image.values);
  CHECK(sg::io::resize_bicubic(image, 44, 30).values.size() == std::size_t(44 * 30 * 3));
}

TEST_CASE("preprocessor_config.json: what CLIP preprocessing does not do is refused by name", "[io]") {
  const auto refused = [](const std::string& text, const std::string& why) {
    CAPTURE(text);
    try {
      sg::io::read_clip_image_processor("preprocessor_config.json",
                                        sg::io::json::parse(text, "preprocessor_config.json"));
      FAIL("no error");
    } catch (const sg::error& e) {
      CHECK(std::string(e.what()).find(why) != std::string::npos);
    }
  };
  refused(R"({"resample": 2})", "preprocessor_config.json: resample: 2 is not bicubic (3)");
  refused(R"({"size": {"longest_edge": 336}})", "size: has neither shortest_edge nor height and width");
  refused(R"({"crop_size": {"height": 0, "width": 3}})", "crop_size: height: 0 is not positive");
  refused(R"({"image_mean": [0.5, 0.5]})", "image_mean: is not a list of 3 numbers");

  const sg::io::clip_image_processor square =
      sg::io::read_clip_image_processor("p.json", sg::io::json::parse(R"({"size": {"height": 6, "width": 8},
        "do_center_crop": false, "do_normalize": false})",
                                                                      "p.json"));
  const sg::io::rgb8_image gray{.width = 4, .height = 2, .values = std::vector<std::uint8_t>(24, 51)};
  const sg::host_tensor pixels = sg::io::clip_pixel_values({gray}, square, sg::dtype::f64);
  CHECK(pixels.shape() == std::vector<std::int64_t>{1, 3, 6, 8});
  CHECK(std::abs(pixels.at(0) - 0.2) < 1e-12);  // 51 / 255: a flat image stays flat

  sg::io::clip_image_processor crop_too_large;
  crop_too_large.shortest_edge = 8;
  crop_too_large.crop_height = crop_too_large.crop_width = 10;
  CHECK_THROWS_WITH(
      sg::io::clip_pixel_values({gray}, crop_too_large),
      sg::testing::ContainsSubstring("image 0 is 16 x 8 after resizing, smaller than the crop 10 x 10"));
}
