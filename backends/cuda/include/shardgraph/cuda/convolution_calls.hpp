#pragma once
// cuda::backend's calls of the convolutions' layouts (kernels/unfold.cuh):
//   patchify, unpatchify  {batch, channels, height, width, patch}
//   unfold1d, fold1d      {batch, channels, length, kernel, stride, padding}
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/unfold.cuh>
#include <shardgraph/cuda/text.hpp>
#include <shardgraph/ir/op.hpp>

#include <cstdint>

namespace shardgraph::cuda::detail {

template <class C, class I>
void patch_layout(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  if (d[4] <= 0 || d[2] % d[4] != 0 || d[3] % d[4] != 0)
    fail(text("cuda::backend: ", op_name(c.kind)),
         text("patch = ", d[4], " does not divide height = ", d[2], " and width = ", d[3]),
         "pass a patch that divides both (bind checks this for a graph's patchify)");
  const kernels::patch_args a{d[0], d[1], d[2], d[3], d[4], d[0] * d[1] * d[2] * d[3]};
  const unsigned blocks = kernels::blocks_for(a.numel, 256);
  if (c.kind == op::patchify)
    kernels::patch_kernel<C, false, I><<<blocks, 256, 0, s.stream>>>(in(c, 0), out(*c.out), a);
  else
    kernels::patch_kernel<C, true, I><<<blocks, 256, 0, s.stream>>>(in(c, 0), out(*c.out), a);
}

template <class C, class I>
void window_layout(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  if (d[3] <= 0 || d[4] <= 0 || d[5] < 0 || d[2] + 2 * d[5] < d[3])
    fail(text("cuda::backend: ", op_name(c.kind)),
         text("length = ", d[2], ", kernel = ", d[3], ", stride = ", d[4], ", padding = ", d[5],
              " give no window"),
         "pass a positive kernel and stride, and a padded length of at least the kernel");
  const std::int64_t windows = (d[2] + 2 * d[5] - d[3]) / d[4] + 1;
  const bool unfold = c.kind == op::unfold1d;
  const kernels::window_args a{
      d[0], d[1], d[2],    d[3],
      d[4], d[5], windows, unfold ? d[0] * windows * d[1] * d[3] : d[0] * d[1] * d[2]};
  const unsigned blocks = kernels::blocks_for(a.numel, 256);
  if (unfold)
    kernels::unfold1d_kernel<C, I><<<blocks, 256, 0, s.stream>>>(in(c, 0), out(*c.out), a);
  else
    kernels::fold1d_kernel<C, I><<<blocks, 256, 0, s.stream>>>(in(c, 0), out(*c.out), a);
}

}  // namespace shardgraph::cuda::detail
