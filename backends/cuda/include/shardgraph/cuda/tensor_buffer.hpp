#pragma once
// tensor_buffer: one value of a program in GPU memory, its dtype and element count; the buffer type
// of cuda::backend. Movable, not copyable. Its bytes are counted in a memory_ledger shared with the
// backend that made it, so the backend reports what its values hold now and at most.
//
// Device memory (cudaMalloc) by default; managed memory (cudaMallocManaged) when the backend is
// host-visible, so that a host-side communicator (threads, several ranks on one GPU) can read and
// write it once the backend has synchronised. A view (view_of) owns nothing: it names part of
// another buffer's memory (the executor's arena), is not counted in the ledger and is valid while
// that buffer lives.
#include <shardgraph/core/checked_math.hpp>
#include <shardgraph/core/dtype.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/text.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace shardgraph::cuda {

struct memory_ledger {
  std::size_t in_use = 0, peak = 0;
  void add(std::size_t bytes) {
    in_use += bytes;
    peak = std::max(peak, in_use);
  }
  void remove(std::size_t bytes) { in_use -= bytes; }
};

class tensor_buffer {
 public:
  tensor_buffer() = default;
  tensor_buffer(dtype type, std::int64_t numel, bool managed, std::shared_ptr<memory_ledger> ledger)
      : type_(type), numel_(numel), ledger_(std::move(ledger)) {
    const std::size_t bytes = checked_bytes(numel, dtype_size(type), "cuda::backend: allocate");
    if (bytes == 0) return;
    const cudaError_t status = managed ? cudaMallocManaged(&data_, bytes) : cudaMalloc(&data_, bytes);
    if (status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      std::size_t free = 0, total = 0;
      static_cast<void>(cudaMemGetInfo(&free, &total));
      fail("cuda::backend: allocate",
           detail::text("a ", dtype_name(type), " buffer of ", numel, " elements (", bytes >> 20,
                        " MiB) does not fit: ", free >> 20, " MiB of ", total >> 20, " MiB are free, ",
                        (ledger_ ? ledger_->in_use : 0) >> 20, " MiB held by this rank's values (",
                        cudaGetErrorName(status), ")"),
           "use more ranks (tp, pp, ZeRO-3), a smaller batch, recomputation, or fewer ranks per GPU");
    }
    if (ledger_) ledger_->add(bytes);
  }
  // numel elements of `type` in arena's memory from byte `offset` on.
  static tensor_buffer view_of(const tensor_buffer& arena, std::size_t offset, dtype type,
                               std::int64_t numel) {
    const std::size_t bytes = static_cast<std::size_t>(numel) * dtype_size(type);
    if (offset + bytes > arena.size_bytes())
      fail("cuda::tensor_buffer::view_of",
           detail::text("bytes [", offset, ", ", offset + bytes, ") leave a buffer of ", arena.size_bytes()),
           "this is a bug in the executor's memory plan; please report it");
    tensor_buffer v;
    v.type_ = type;
    v.numel_ = numel;
    v.data_ = static_cast<char*>(arena.data_) + offset;
    v.owned_ = false;
    return v;
  }
  // The same dtype and size `offset` bytes past this buffer's start, not owned: memory the caller
  // knows lies there (a batched call's products, which bind placed at equal strides).
  tensor_buffer at_offset(std::size_t offset) const {
    tensor_buffer v;
    v.type_ = type_;
    v.numel_ = numel_;
    v.data_ = static_cast<char*>(data_) + offset;
    v.owned_ = false;
    return v;
  }
  ~tensor_buffer() { release(); }
  tensor_buffer(tensor_buffer&& o) noexcept
      : type_(o.type_),
        numel_(std::exchange(o.numel_, 0)),
        data_(std::exchange(o.data_, nullptr)),
        owned_(std::exchange(o.owned_, true)),
        ledger_(std::move(o.ledger_)) {}
  tensor_buffer& operator=(tensor_buffer&& o) noexcept {
    if (this != &o) {
      release();
      type_ = o.type_;
      numel_ = std::exchange(o.numel_, 0);
      data_ = std::exchange(o.data_, nullptr);
      owned_ = std::exchange(o.owned_, true);
      ledger_ = std::move(o.ledger_);
    }
    return *this;
  }
  tensor_buffer(const tensor_buffer&) = delete;
  tensor_buffer& operator=(const tensor_buffer&) = delete;

  dtype type() const { return type_; }
  std::int64_t numel() const { return numel_; }
  std::size_t size_bytes() const { return static_cast<std::size_t>(numel_) * dtype_size(type_); }
  void* data() const { return data_; }
  bool is_view() const { return !owned_; }

 private:
  void release() {
    if (data_ == nullptr || !owned_) {
      data_ = nullptr;
      return;
    }
    static_cast<void>(cudaFree(data_));  // a destructor cannot report; the memory is gone either way
    if (ledger_) ledger_->remove(size_bytes());
    data_ = nullptr;
  }

  dtype type_ = dtype::f32;
  std::int64_t numel_ = 0;
  void* data_ = nullptr;
  bool owned_ = true;
  std::shared_ptr<memory_ledger> ledger_;
};

}  // namespace shardgraph::cuda
