#pragma once
// shardgraph::cpu::buffer: one value of a program in host memory, its dtype and element count.
// Either it owns its bytes (zero-filled at allocation) or it is a view of another buffer's bytes
// (view_of: the executor's memory arena), valid while that buffer lives. Copying an owning buffer
// copies its bytes; copying a view makes another view of the same bytes. A size whose bytes exceed
// 64 bits, or memory the host cannot give, is a shardgraph::error naming the bytes.
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/error.hpp"

namespace shardgraph::cpu {

class buffer {
 public:
  buffer() = default;
  buffer(dtype type, std::int64_t numel)
      : type_(type), numel_(numel), storage_(owned_storage(type, numel)), data_(storage_.data()) {}
  // numel elements of `type` in arena's bytes [offset, offset + numel * size of type).
  static buffer view_of(buffer& arena, std::size_t offset, dtype type, std::int64_t numel) {
    const std::size_t bytes = checked_bytes(numel, dtype_size(type), "cpu::buffer::view_of");
    if (checked_add_bytes(offset, bytes, "cpu::buffer::view_of") > arena.size_bytes())
      fail("cpu::buffer::view_of",
           "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) +
               ") leave a buffer of " + std::to_string(arena.size_bytes()),
           "this is a bug in the executor's memory plan; please report it");
    buffer v;
    v.type_ = type;
    v.numel_ = numel;
    v.data_ = arena.bytes() + offset;
    v.view_ = true;
    return v;
  }
  // The same dtype and size `offset` bytes past this buffer's start, not owned: memory the caller
  // knows lies there (a batched call's products, which bind placed at equal strides).
  buffer at_offset(std::size_t offset) const {
    buffer v;
    v.type_ = type_;
    v.numel_ = numel_;
    v.data_ = data_ + offset;
    v.view_ = true;
    return v;
  }
  buffer(const buffer& o)
      : type_(o.type_),
        numel_(o.numel_),
        storage_(o.storage_),
        data_(o.view_ ? o.data_ : storage_.data()),
        view_(o.view_) {}
  buffer& operator=(const buffer& o) {
    if (this != &o) *this = buffer(o);
    return *this;
  }
  // A vector's move keeps its storage, so data_ stays valid; the moved-from buffer is empty.
  buffer(buffer&& o) noexcept
      : type_(o.type_),
        numel_(std::exchange(o.numel_, 0)),
        storage_(std::move(o.storage_)),
        data_(std::exchange(o.data_, nullptr)),
        view_(std::exchange(o.view_, false)) {}
  buffer& operator=(buffer&& o) noexcept {
    if (this == &o) return *this;
    type_ = o.type_;
    numel_ = std::exchange(o.numel_, 0);
    storage_ = std::move(o.storage_);
    data_ = std::exchange(o.data_, nullptr);
    view_ = std::exchange(o.view_, false);
    return *this;
  }

  dtype type() const { return type_; }
  std::int64_t numel() const { return numel_; }
  std::size_t size_bytes() const { return static_cast<std::size_t>(numel_) * dtype_size(type_); }
  bool is_view() const { return view_; }
  std::byte* bytes() { return data_; }
  const std::byte* bytes() const { return data_; }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(data_);
  }
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(data_);
  }

 private:
  dtype type_ = dtype::f32;
  std::int64_t numel_ = 0;
  std::vector<std::byte> storage_;
  std::byte* data_ = nullptr;
  bool view_ = false;

  static std::vector<std::byte> owned_storage(dtype type, std::int64_t numel) {
    const std::size_t bytes = checked_bytes(numel, dtype_size(type), "cpu::backend: allocate");
    try {
      return std::vector<std::byte>(bytes);
    } catch (const std::bad_alloc&) {
      fail("cpu::backend: allocate",
           "cannot allocate " + std::to_string(bytes) + " bytes (" + std::to_string(numel) + " " +
               std::string(dtype_name(type)) + " elements) of host memory",
           "use more ranks (tp, pp, ZeRO-3), a smaller batch, or recomputation");
    }
  }
};

}  // namespace shardgraph::cpu
