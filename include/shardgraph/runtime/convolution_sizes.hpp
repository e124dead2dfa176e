#pragma once
// bind's checks of the convolutions' layouts (dsl/convolution.hpp): the dimensions the caller
// named for the result must have the sizes the window gives. Global sizes, so every rank throws
// the same error before any kernel runs.
//
//   patchify   height % patch == 0, width % patch == 0,
//              patches == (height / patch) * (width / patch), features == channels * patch * patch
//   unfold1d   length + 2 padding >= kernel, length_out == (length + 2 padding - kernel) / stride + 1
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/ir/node.hpp"

namespace shardgraph {

namespace detail {

// "patches = 5 is not (height / patch) * (width / patch) = (32 / 8) * (32 / 8) = 16"; and the fix
// "sizes.set(\"patches\", 16)" where the dimension is sized by name.
[[noreturn]] inline void fail_named_size(const std::string& where, extent e, std::int64_t size,
                                         const std::string& wanted, std::int64_t value) {
  const std::string name = extent_text(e);
  const bool named = !e.is_product() && e.first->builtin == size_symbol::none && e.first->fixed == 0;
  fail(where, name + " = " + std::to_string(size) + " is not " + wanted + " = " + std::to_string(value),
       named ? "size it so: sizes.set(\"" + name + "\", " + std::to_string(value) + ")"
             : "give " + name + " the size " + std::to_string(value) + ", or change the window");
}

inline void check_patchify_sizes(const node& n, const std::vector<std::int64_t>& images,
                                 const std::vector<std::int64_t>& result, const model_sizes& sizes,
                                 const std::string& where) {
  const std::int64_t p = sizes.get(n.window), h = images[2], w = images[3];
  const std::string patch = " patch = " + std::to_string(p);
  if (h % p != 0 || w % p != 0)
    fail(where,
         "the image's height = " + std::to_string(h) + " and width = " + std::to_string(w) +
             " are not multiples of" + patch,
         "resize the images, or choose a patch that divides both");
  const std::string sides = "(" + std::to_string(h) + " / " + std::to_string(p) + ") * (" +
                            std::to_string(w) + " / " + std::to_string(p) + ")";
  if (result[1] != (h / p) * (w / p))
    fail_named_size(where, n.shape[1], result[1], "(height / patch) * (width / patch) = " + sides,
                    (h / p) * (w / p));
  const std::int64_t features = checked_multiply(checked_multiply(images[1], p, where), p, where);
  if (result[2] != features)
    fail_named_size(where, n.shape[2], result[2],
                    "channels * patch * patch = " + std::to_string(images[1]) + " * " + std::to_string(p) +
                        " * " + std::to_string(p),
                    features);
}

inline void check_unfold1d_sizes(const node& n, const std::vector<std::int64_t>& x,
                                 const std::vector<std::int64_t>& result, const model_sizes& sizes,
                                 const std::string& where) {
  const std::int64_t kernel = sizes.get(n.window), padded = x[2] + 2 * std::int64_t{n.padding};
  if (padded < kernel)
    fail(
        where,
        "the padded length " + std::to_string(padded) + " is shorter than kernel = " + std::to_string(kernel),
        "give a longer input, more padding or a shorter kernel");
  const std::int64_t length_out = (padded - kernel) / n.stride + 1;
  if (result[1] != length_out)
    fail_named_size(where, n.shape[1], result[1],
                    "(length + 2 padding - kernel) / stride + 1 = (" + std::to_string(x[2]) + " + 2 * " +
                        std::to_string(int{n.padding}) + " - " + std::to_string(kernel) + ") / " +
                        std::to_string(int{n.stride}) + " + 1",
                    length_out);
}

}  // namespace detail

// Node n's sizes, for patchify and unfold1d (their gradients share their sizes): `input` and
// `result` are the global dims of its input and its own.
inline void check_convolution_sizes(const node& n, const std::vector<std::int64_t>& input,
                                    const std::vector<std::int64_t>& result, const model_sizes& sizes,
                                    const std::string& where) {
  if (n.kind == op::patchify) detail::check_patchify_sizes(n, input, result, sizes, where);
  if (n.kind == op::unfold1d) detail::check_unfold1d_sizes(n, input, result, sizes, where);
}

}  // namespace shardgraph
