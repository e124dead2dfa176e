#pragma once
// read_image_file: an image file (PNG, JPEG, BMP, GIF's first frame, ...: what stb_image decodes)
// as an 8-bit RGB image for io::clip_pixel_values, for programs that take `--image FILE`.
//
//   sg::io::rgb8_image image = read_image_file("cat.png");
//   sg::host_tensor pixels = sg::io::clip_pixel_values({image}, processor);   // (1, 3, 336, 336)
//
// As PIL's Image.convert("RGB") that HF's processors apply: gray is repeated in R, G and B, an
// alpha channel is dropped (not blended), a palette is looked up; 16-bit channels keep their
// high byte. A JPEG's EXIF orientation is not applied (transformers' load_image applies it; a
// PIL image handed to the processor as it was opened is not turned). Decoding is Debian's libstb
// (libstb-dev, tools/install_deps.sh), linked through the CMake target shardgraph_examples_image.
#include <cstdint>
#include <memory>
#include <string>

#include <stb_image.h>

#include <shardgraph/core/error.hpp>
#include <shardgraph/io/image_resize.hpp>

inline shardgraph::io::rgb8_image read_image_file(const std::string& path) {
  int width = 0, height = 0, channels_in_file = 0;
  const std::unique_ptr<stbi_uc, void (*)(void*)> pixels(
      stbi_load(path.c_str(), &width, &height, &channels_in_file, 3), stbi_image_free);
  if (pixels == nullptr)
    shardgraph::fail("read_image_file: " + path, std::string("cannot decode it: ") + stbi_failure_reason(),
                     "give a PNG, JPEG, BMP or GIF file that exists and is readable");
  shardgraph::io::rgb8_image image{.width = width, .height = height, .values = {}};
  image.values.assign(pixels.get(), pixels.get() + static_cast<std::size_t>(width) * height * 3);
  return image;
}
