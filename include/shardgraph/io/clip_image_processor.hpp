#pragma once
// clip_image_processor: an HF preprocessor_config.json of a CLIP image processor (LLaVA's), and
// clip_pixel_values: images in, the vision tower's pixel_values out, as transformers'
// CLIPImageProcessorPil computes them:
//
//   rgb8_image (height, width, 3)
//     resize: the shortest edge to size.shortest_edge, the other to int(shortest_edge * long / short)
//             (or to size.height x size.width), Pillow's bicubic (io/image_resize.hpp)
//     center crop to crop_size: top = (height - crop_height) / 2, left = (width - crop_width) / 2
//     rescale: x * rescale_factor (1/255); normalize: (x - image_mean[c]) / image_std[c]
//   -> pixel_values (batch, 3, crop_height, crop_width), channels first
//
//   auto processor = sg::io::read_clip_image_processor(dir + "/preprocessor_config.json");
//   sg::host_tensor pixels = sg::io::clip_pixel_values({image}, processor, sg::dtype::f32);
//
// Refused by name: a resample other than bicubic (3), a size with neither shortest_edge nor
// height and width, and an image whose resized side is shorter than the crop (HF pads it).
// transformers 5's CLIPImageProcessor resizes with torchvision instead of Pillow: its pixels
// differ from these by the two libraries' bicubic rounding.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/io/hf_config.hpp"
#include "shardgraph/io/image_resize.hpp"
#include "shardgraph/io/json.hpp"

namespace shardgraph::io {

// The fields of preprocessor_config.json that CLIPImageProcessor reads (defaults: CLIP's, 224).
struct clip_image_processor {
  bool do_resize = true;
  std::int64_t shortest_edge = 224;  // 0: resize to height x width instead
  std::int64_t height = 0, width = 0;
  bool do_center_crop = true;
  std::int64_t crop_height = 224, crop_width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> image_mean{0.48145466, 0.4578275, 0.40821073};
  std::array<double, 3> image_std{0.26862954, 0.26130258, 0.27577711};
};

namespace detail {

inline std::array<double, 3> three_numbers(const std::string& path, const json::value& c, const char* key,
                                           std::array<double, 3> otherwise) {
  const json::value* v = c.find(key);
  if (v == nullptr) return otherwise;
  if (v->type() != json::kind::array || v->as_array().size() != 3)
    fail(path + ": " + key, "is not a list of 3 numbers", "give one number per channel (R, G, B)");
  return {v->at(std::size_t{0}).as_double(), v->at(std::size_t{1}).as_double(),
          v->at(std::size_t{2}).as_double()};
}

inline std::int64_t positive_field(const std::string& path, const json::value& c, const char* key) {
  const std::int64_t n = c.at(key).as_int();
  if (n < 1)
    fail(path + ": " + key, std::to_string(n) + " is not positive", "give a size of at least 1 pixel");
  return n;
}

}  // namespace detail

inline clip_image_processor read_clip_image_processor(const std::string& path, const json::value& c) {
  clip_image_processor p;
  p.do_resize = detail::flag_or(c, "do_resize", true);
  if (const json::value* resample = c.find("resample"); resample != nullptr && resample->as_int() != 3)
    fail(path + ": resample", std::to_string(resample->as_int()) + " is not bicubic (3)",
         "give a CLIP image processor's resample 3 (PIL's BICUBIC), the only one implemented");
  if (const json::value* size = c.find("size"); size != nullptr) {
    if (size->find("shortest_edge") != nullptr) {
      p.shortest_edge = detail::positive_field(path + ": size", *size, "shortest_edge");
    } else if (size->find("height") != nullptr && size->find("width") != nullptr) {
      p.shortest_edge = 0;
      p.height = detail::positive_field(path + ": size", *size, "height");
      p.width = detail::positive_field(path + ": size", *size, "width");
    } else {
      fail(path + ": size", "has neither shortest_edge nor height and width",
           "give {\"shortest_edge\": 336} or {\"height\": 336, \"width\": 336}");
    }
  }
  p.do_center_crop = detail::flag_or(c, "do_center_crop", true);
  if (const json::value* crop = c.find("crop_size"); crop != nullptr) {
    p.crop_height = detail::positive_field(path + ": crop_size", *crop, "height");
    p.crop_width = detail::positive_field(path + ": crop_size", *crop, "width");
  }
  p.do_rescale = detail::flag_or(c, "do_rescale", true);
  if (const json::value* factor = c.find("rescale_factor")) p.rescale_factor = factor->as_double();
  p.do_normalize = detail::flag_or(c, "do_normalize", true);
  p.image_mean = detail::three_numbers(path, c, "image_mean", p.image_mean);
  p.image_std = detail::three_numbers(path, c, "image_std", p.image_std);
  for (double s : p.image_std)
    if (!(s > 0)) fail(path + ": image_std", "holds " + std::to_string(s), "give positive deviations");
  return p;
}
inline clip_image_processor read_clip_image_processor(const std::string& path) {
  return read_clip_image_processor(path, read_json_file(path));
}

namespace detail {

// The size HF's get_resize_output_image_size gives: (width, height).
inline std::array<std::int64_t, 2> clip_resized_size(const rgb8_image& image, const clip_image_processor& p) {
  if (p.shortest_edge == 0) return {p.width, p.height};
  const bool wide = image.width > image.height;  // a square keeps width as its short side, as HF
  const std::int64_t shorter = wide ? image.height : image.width, longer = wide ? image.width : image.height;
  const auto other = static_cast<std::int64_t>(static_cast<double>(p.shortest_edge) *
                                               static_cast<double>(longer) / static_cast<double>(shorter));
  return wide ? std::array<std::int64_t, 2>{other, p.shortest_edge}
              : std::array<std::int64_t, 2>{p.shortest_edge, other};
}

}  // namespace detail

// The images through `p`, as one pixel_values (batch, 3, height, width) of `type` (f32 or f64):
// every image must come out at the same size (a center crop makes it so).
inline host_tensor clip_pixel_values(const std::vector<rgb8_image>& images, const clip_image_processor& p,
                                     dtype type = dtype::f32) {
  if (images.empty()) fail("clip_pixel_values", "no images", "give at least one image");
  if (type != dtype::f32 && type != dtype::f64)
    fail("clip_pixel_values", "pixel_values in " + std::string(dtype_name(type)) + " are not made",
         "ask for f32 or f64 (convert after)");
  std::vector<double> values;
  std::int64_t height = 0, width = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    rgb8_image image = images[i];
    if (p.do_resize) {
      const auto [w, h] = detail::clip_resized_size(image, p);
      image = resize_bicubic(image, w, h);
    }
    std::int64_t top = 0, left = 0, rows = image.height, columns = image.width;
    if (p.do_center_crop) {
      if (image.height < p.crop_height || image.width < p.crop_width)
        fail("clip_pixel_values",
             "image " + std::to_string(i) + " is " + std::to_string(image.width) + " x " +
                 std::to_string(image.height) + " after resizing, smaller than the crop " +
                 std::to_string(p.crop_width) + " x " + std::to_string(p.crop_height),
             "give a size.shortest_edge of at least the crop size (HF pads such an image with zeros)");
      top = (image.height - p.crop_height) / 2, left = (image.width - p.crop_width) / 2;
      rows = p.crop_height, columns = p.crop_width;
    }
    if (i > 0 && (rows != height || columns != width))
      fail("clip_pixel_values", "image " + std::to_string(i) + " comes out in another size than image 0",
           "center-crop the images (do_center_crop) or give images of one size");
    height = rows, width = columns;
    for (int c = 0; c < 3; ++c)
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t col = 0; col < columns; ++col) {
          double x = image.at(top + r, left + col, c);
          if (p.do_rescale) x *= p.rescale_factor;
          if (p.do_normalize) x = (x - p.image_mean[std::size_t(c)]) / p.image_std[std::size_t(c)];
          values.push_back(x);
        }
  }
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(images.size()), 3, height, width};
  if (type == dtype::f64) return host_tensor::from<double>(shape, values);
  return host_tensor::from<float>(shape, std::vector<float>(values.begin(), values.end()));
}

}  // namespace shardgraph::io
