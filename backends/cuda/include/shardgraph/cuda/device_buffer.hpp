#pragma once
// device_buffer: one allocation of device memory (cudaMalloc), freed when the buffer goes.
// Movable, not copyable; the moved-from buffer is empty.
//
//   shardgraph::cuda::device_buffer x(1024 * sizeof(float));   // on the current device
//   x.upload(host.data());                                       // host.size() * 4 == 1024 * 4 bytes
//   comm.all_reduce(x.view<float>());                            // (1024) floats in device memory
//   x.download(host.data());
//
// The buffer remembers the device that was current when it was made and frees its memory there,
// whichever device is current at the time. upload and download copy size_bytes() bytes and return
// when the copy is complete. An empty buffer (0 bytes) holds no memory and copies nothing.
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/text.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <ios>
#include <ranges>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace shardgraph::cuda {

class device_buffer {
 public:
  device_buffer() = default;

  // Allocates size_bytes bytes on the current device, uninitialized.
  explicit device_buffer(std::size_t size_bytes) {
    if (size_bytes == 0) return;
    check_cuda(cudaGetDevice(&device_), "device_buffer (cudaGetDevice)");
    void* data = nullptr;
    const cudaError_t status = cudaMalloc(&data, size_bytes);
    if (status != cudaSuccess) allocation_failed(status, size_bytes);
    data_ = data;
    size_bytes_ = size_bytes;
  }

  ~device_buffer() { release(); }

  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_bytes_(std::exchange(other.size_bytes_, 0)),
        device_(other.device_) {}

  device_buffer& operator=(device_buffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_bytes_ = std::exchange(other.size_bytes_, 0);
      device_ = other.device_;
    }
    return *this;
  }

  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  // Device memory: pass it to CUDA and NCCL calls, never dereference it on the host.
  void* data() { return data_; }
  const void* data() const { return data_; }
  std::size_t size_bytes() const { return size_bytes_; }
  bool empty() const { return size_bytes_ == 0; }
  int device() const { return device_; }

  // The buffer as (size_bytes() / sizeof(T)) elements of T, for device-memory APIs such as
  // nccl::communicator. size_bytes() must be a multiple of sizeof(T).
  template <class T>
  std::span<T> view() {
    check_view<T>();
    return {static_cast<T*>(data_), size_bytes_ / sizeof(T)};
  }
  template <class T>
  std::span<const T> view() const {
    check_view<T>();
    return {static_cast<const T*>(data_), size_bytes_ / sizeof(T)};
  }

  // Copies size_bytes() bytes from host memory into the buffer.
  void upload(const void* host) {
    if (empty()) return;
    check_host_pointer(host, "upload");
    check_cuda(cudaMemcpy(data_, host, size_bytes_, cudaMemcpyHostToDevice),
               "device_buffer::upload (cudaMemcpy)");
  }

  // Copies the buffer's size_bytes() bytes into host memory.
  void download(void* host) const {
    if (empty()) return;
    check_host_pointer(host, "download");
    check_cuda(cudaMemcpy(host, data_, size_bytes_, cudaMemcpyDeviceToHost),
               "device_buffer::download (cudaMemcpy)");
  }

  // Typed forms, for any contiguous host range (std::vector, std::array, std::span): it must hold
  // exactly size_bytes() bytes.
  template <std::ranges::contiguous_range Host>
  requires std::ranges::sized_range<Host>
  void upload(const Host& host) {
    using element = std::ranges::range_value_t<Host>;
    static_assert(
        std::is_trivially_copyable_v<element>,
        "shardgraph: cuda: device_buffer::upload: the elements are not trivially copyable. Copy plain data");
    check_host_size(std::ranges::size(host) * sizeof(element), "upload");
    upload(static_cast<const void*>(std::ranges::data(host)));
  }
  template <std::ranges::contiguous_range Host>
  requires std::ranges::sized_range<Host>
  void download(Host&& host) const {
    using element = std::remove_reference_t<std::ranges::range_reference_t<Host>>;
    static_assert(
        !std::is_const_v<element>,
        "shardgraph: cuda: device_buffer::download: the host range is read-only. Pass a writable one");
    static_assert(std::is_trivially_copyable_v<element>,
                  "shardgraph: cuda: device_buffer::download: the elements are not trivially copyable. Copy "
                  "plain data");
    check_host_size(std::ranges::size(host) * sizeof(element), "download");
    download(static_cast<void*>(std::ranges::data(host)));
  }

 private:
  void release() noexcept {
    if (data_ == nullptr) return;
    int current = -1;
    const bool switch_device =
        cudaGetDevice(&current) == cudaSuccess && current != device_ && cudaSetDevice(device_) == cudaSuccess;
    static_cast<void>(cudaFree(data_));  // a destructor cannot report; a broken context is reported elsewhere
    if (switch_device) static_cast<void>(cudaSetDevice(current));
    static_cast<void>(cudaGetLastError());
    data_ = nullptr;
    size_bytes_ = 0;
  }

  [[noreturn]] void allocation_failed(cudaError_t status, std::size_t size_bytes) const {
    static_cast<void>(cudaGetLastError());
    std::size_t free_bytes = 0, total_bytes = 0;
    std::string memory;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
      memory = detail::text("; device ", device_, " has ", readable_bytes(free_bytes), " free of ",
                            readable_bytes(total_bytes));
    else
      static_cast<void>(cudaGetLastError());
    fail("cuda: device_buffer",
         detail::text("cannot allocate ", readable_bytes(size_bytes), " on device ", device_, ": ",
                      cudaGetErrorString(status), " (", cudaGetErrorName(status), ")", memory),
         how_to_fix(status));
  }

  // "1610612736 bytes (1.50 GiB)"
  static std::string readable_bytes(std::size_t bytes) {
    const double gib = static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
    const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
    std::ostringstream out;
    out.setf(std::ios::fixed);
    out.precision(2);
    out << bytes << " bytes (";
    if (gib >= 1.0)
      out << gib << " GiB)";
    else
      out << mib << " MiB)";
    return out.str();
  }

  template <class T>
  void check_view() const {
    static_assert(
        std::is_trivially_copyable_v<T>,
        "shardgraph: cuda: device_buffer::view: the elements are not trivially copyable. View plain data");
    if (size_bytes_ % sizeof(T) != 0)
      fail("cuda: device_buffer::view",
           detail::text("the buffer holds ", size_bytes_, " bytes, not a whole number of ", sizeof(T),
                        "-byte elements"),
           "Allocate a multiple of sizeof(T) bytes, or view it as another element type");
  }

  static void check_host_pointer(const void* host, const char* op) {
    if (host == nullptr)
      fail(detail::text("cuda: device_buffer::", op), "the host pointer is null",
           "Pass host memory of size_bytes() bytes");
  }

  void check_host_size(std::size_t host_bytes, const char* op) const {
    if (host_bytes != size_bytes_)
      fail(detail::text("cuda: device_buffer::", op),
           detail::text("the host range holds ", host_bytes, " bytes but the buffer holds ", size_bytes_),
           "Pass a host range of the buffer's size, or make a buffer of the host range's size");
  }

  void* data_ = nullptr;
  std::size_t size_bytes_ = 0;
  int device_ = 0;
};

}  // namespace shardgraph::cuda
