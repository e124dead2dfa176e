// examples/common/image_file.hpp: stb_image's decoding of the committed PNG equals Pillow's
// (tests/golden/clip_image: `rgb`, the pixels the PNG was written from), and a file it cannot
// decode is refused by name. Built where libstb is installed (shardgraph_examples_image).
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <shardgraph/io/safetensors.hpp>

#include "catch.hpp"
#include "image_file.hpp"

namespace sg = shardgraph;

TEST_CASE("read_image_file decodes a PNG to Pillow's pixels", "[io][golden]") {
  const std::string dir = std::string(SHARDGRAPH_GOLDEN_DIR) + "/clip_image";
  const sg::io::safetensors_file golden(dir + "/golden.safetensors");
  const sg::io::rgb8_image image = read_image_file(dir + "/image.png");
  CHECK((image.width == 45 && image.height == 30));
  std::vector<std::int64_t> values(image.values.begin(), image.values.end());
  CHECK(values == golden.read_as<std::int64_t>("rgb"));

  const std::string not_an_image =
      std::string(SHARDGRAPH_SOURCE_DIR) + "/tests/golden/clip_image/preprocessor_config.json";
  CHECK_THROWS_WITH(read_image_file(not_an_image),
                    sg::testing::ContainsSubstring("preprocessor_config.json: cannot decode it: "));
  CHECK_THROWS_WITH(read_image_file(dir + "/missing.png"),
                    sg::testing::ContainsSubstring("give a PNG, JPEG, BMP or GIF file that exists"));
}
