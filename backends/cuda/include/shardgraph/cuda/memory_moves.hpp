#pragma once
// The moves of device memory that cuda::backend queues on its stream: copies (whole buffers and
// element ranges), zero fills, and the block moves of the collectives (compute::block_layout:
// (outer, parts*mid, inner) <-> [parts][outer][mid][inner], or one block of it) as 2D copies. Every
// move writes memory that the attention gradients kept for the next call may have read, so each
// marks them stale.
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/core/dtype.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/tensor_buffer.hpp>
#include <shardgraph/cuda/text.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace shardgraph::cuda::detail {

inline void fill_zero(backend_state& s, tensor_buffer& b) {
  if (b.numel() == 0) return;
  check_cuda(cudaMemsetAsync(b.data(), 0, b.size_bytes(), s.stream), "backend::fill_zero (cudaMemsetAsync)");
}

inline void copy(backend_state& s, const tensor_buffer& from, tensor_buffer& to) {
  if (from.size_bytes() != to.size_bytes())
    fail("cuda::backend::copy", text(from.size_bytes(), " bytes into ", to.size_bytes()),
         "this is a bug in the executor; please report it");
  if (from.numel() == 0 || from.data() == to.data()) return;
  const op_timer timer(s, "copy", to.type());
  check_cuda(cudaMemcpyAsync(to.data(), from.data(), from.size_bytes(), cudaMemcpyDeviceToDevice, s.stream),
             "backend::copy (cudaMemcpyAsync)");
}

// count elements of `from` from from_offset on into `to` from to_offset on (same dtype).
inline void copy_range(backend_state& s, const tensor_buffer& from, std::int64_t from_offset,
                       tensor_buffer& to, std::int64_t to_offset, std::int64_t count) {
  if (from.type() != to.type() || from_offset < 0 || to_offset < 0 || count < 0 ||
      from_offset + count > from.numel() || to_offset + count > to.numel())
    fail("cuda::backend::copy_range", "the range leaves a buffer or the dtypes differ",
         "this is a bug in the trainer; please report it");
  if (count == 0) return;
  const std::size_t e = dtype_size(from.type());
  check_cuda(cudaMemcpyAsync(static_cast<char*>(to.data()) + to_offset * e,
                             static_cast<const char*>(from.data()) + from_offset * e, count * e,
                             cudaMemcpyDeviceToDevice, s.stream),
             "backend::copy_range (cudaMemcpyAsync)");
}

// Block `index` (outer, mid, inner) of (outer, parts*mid, inner).
inline void slice(backend_state& s, const tensor_buffer& from, tensor_buffer& to, compute::block_layout l,
                  std::int64_t index) {
  const std::size_t row = static_cast<std::size_t>(l.mid * l.inner * l.element_bytes);
  if (row == 0 || l.outer == 0) return;
  check_cuda(
      cudaMemcpy2DAsync(to.data(), row, static_cast<const char*>(from.data()) + index * row, l.parts * row,
                        row, static_cast<std::size_t>(l.outer), cudaMemcpyDeviceToDevice, s.stream),
      "backend::slice (cudaMemcpy2DAsync)");
}

// [parts][outer][mid][inner] -> (outer, parts*mid, inner) when to_interleaved, else the reverse.
inline void move_blocks(backend_state& s, const tensor_buffer& from, tensor_buffer& to,
                        compute::block_layout l, bool to_interleaved) {
  const std::size_t row = static_cast<std::size_t>(l.mid * l.inner * l.element_bytes);
  if (row == 0 || l.outer == 0) return;
  for (std::int64_t p = 0; p < l.parts; ++p) {
    const char* source = static_cast<const char*>(from.data());
    char* target = static_cast<char*>(to.data());
    const std::size_t blocked = static_cast<std::size_t>(p * l.outer) * row,
                      interleaved = static_cast<std::size_t>(p) * row;
    const std::size_t pitch = static_cast<std::size_t>(l.parts) * row;
    const cudaError_t status =
        to_interleaved
            ? cudaMemcpy2DAsync(target + interleaved, pitch, source + blocked, row, row,
                                static_cast<std::size_t>(l.outer), cudaMemcpyDeviceToDevice, s.stream)
            : cudaMemcpy2DAsync(target + blocked, row, source + interleaved, pitch, row,
                                static_cast<std::size_t>(l.outer), cudaMemcpyDeviceToDevice, s.stream);
    check_cuda(status, "backend: block move (cudaMemcpy2DAsync)");
  }
}

}  // namespace shardgraph::cuda::detail
