// The cuda backend's host pieces: error checks, device queries and device_buffer (allocation, copies
// both ways, moves, views, and the errors for bad sizes, null pointers and failed allocations).
// A GPU test: main() comes from tests/gpu_main.cpp, which skips it (exit code 77) without a GPU.
#include <shardgraph/cuda.hpp>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "catch.hpp"

namespace sg = shardgraph;
using sg::cuda::device_buffer;

namespace {

#if defined(SHARDGRAPH_CATCH3)
using Catch::Matchers::ContainsSubstring;
#else
auto ContainsSubstring(const std::string& s) { return Catch::Matchers::Contains(s); }
#endif

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const sg::error& e) {
    return e.what();
  }
  return "";
}

static_assert(!std::is_copy_constructible_v<device_buffer> && !std::is_copy_assignable_v<device_buffer>);
static_assert(std::is_nothrow_move_constructible_v<device_buffer> &&
              std::is_nothrow_move_assignable_v<device_buffer>);

}  // namespace

TEST_CASE("a device is visible to the GPU tests", "[cuda][gpu]") {
  CHECK(sg::cuda::device_count() >= 1);
  CHECK(sg::cuda::has_device());
}

TEST_CASE("check_cuda passes success and names the call, the CUDA error and a fix", "[cuda][gpu]") {
  CHECK_NOTHROW(sg::cuda::check_cuda(cudaSuccess, "nothing"));
  const auto message = error_of([] { sg::cuda::check_cuda(cudaErrorInvalidValue, "probe (cudaMemcpy)"); });
  CHECK_THAT(message, ContainsSubstring("shardgraph: cuda: probe (cudaMemcpy): "));
  CHECK_THAT(message, ContainsSubstring(cudaGetErrorString(cudaErrorInvalidValue)));
  CHECK_THAT(message, ContainsSubstring("(cudaErrorInvalidValue). Check the arguments"));
}

TEST_CASE("device_buffer copies bytes to the device and back", "[cuda][gpu]") {
  std::vector<float> host(1000);
  std::iota(host.begin(), host.end(), -3.5f);
  device_buffer buffer(host.size() * sizeof(float));
  CHECK(buffer.size_bytes() == 4000);
  CHECK(!buffer.empty());
  CHECK(buffer.data() != nullptr);
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(buffer.device() == current);

  SECTION("typed ranges") {
    buffer.upload(host);
    std::vector<float> back(host.size(), 0.0f);
    buffer.download(back);
    CHECK(back == host);
  }
  SECTION("raw pointers") {
    buffer.upload(static_cast<const void*>(host.data()));
    std::vector<float> back(host.size(), 0.0f);
    buffer.download(static_cast<void*>(back.data()));
    CHECK(back == host);
  }
  SECTION("a device-to-device copy through the views") {
    buffer.upload(host);
    device_buffer copy(buffer.size_bytes());
    REQUIRE(cudaMemcpy(copy.view<float>().data(), buffer.view<float>().data(), buffer.size_bytes(),
                       cudaMemcpyDeviceToDevice) == cudaSuccess);
    std::vector<float> back(host.size());
    copy.download(back);
    CHECK(back == host);
  }
}

TEST_CASE("device_buffer keeps bf16 bit patterns exactly", "[cuda][gpu]") {
  std::vector<std::uint16_t> bits(65536);
  std::iota(bits.begin(), bits.end(), std::uint16_t{0});  // every pattern, NaNs included
  device_buffer buffer(bits.size() * sizeof(std::uint16_t));
  buffer.upload(bits);
  std::vector<std::uint16_t> back(bits.size(), 1);
  buffer.download(back);
  CHECK(back == bits);
}

TEST_CASE("an empty device_buffer holds nothing and copies nothing", "[cuda][gpu]") {
  device_buffer none;
  CHECK(none.empty());
  CHECK(none.size_bytes() == 0);
  CHECK(none.data() == nullptr);
  CHECK_NOTHROW(none.upload(static_cast<const void*>(nullptr)));
  CHECK_NOTHROW(none.download(static_cast<void*>(nullptr)));
  CHECK(none.view<double>().empty());

  device_buffer zero(0);
  CHECK(zero.empty());
  CHECK(zero.data() == nullptr);
}

TEST_CASE("device_buffer moves its memory and leaves the source empty", "[cuda][gpu]") {
  const std::vector<std::int32_t> host{1, 2, 3, 4};
  device_buffer first(host.size() * sizeof(std::int32_t));
  first.upload(host);
  const void* memory = first.data();

  device_buffer second(std::move(first));
  CHECK(second.data() == memory);
  CHECK(second.size_bytes() == 16);
  CHECK(first.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  CHECK(first.data() == nullptr);

  device_buffer third(8);
  third = std::move(second);  // frees third's own 8 bytes
  CHECK(third.data() == memory);
  CHECK(second.empty());  // NOLINT(bugprone-use-after-move)
  std::vector<std::int32_t> back(4);
  third.download(back);
  CHECK(back == host);

  third = device_buffer();
  CHECK(third.empty());
}

TEST_CASE("device_buffer views its bytes as elements", "[cuda][gpu]") {
  device_buffer buffer(24);
  CHECK(buffer.view<double>().size() == 3);
  CHECK(buffer.view<float>().size() == 6);
  CHECK(buffer.view<std::uint16_t>().size() == 12);
  CHECK(static_cast<const void*>(buffer.view<float>().data()) == buffer.data());
  const device_buffer& read_only = buffer;
  CHECK(read_only.view<float>().size() == 6);
  static_assert(std::is_same_v<decltype(read_only.view<float>()), std::span<const float>>);

  device_buffer odd(10);
  const auto message = error_of([&] { static_cast<void>(odd.view<float>()); });
  CHECK_THAT(message, ContainsSubstring("shardgraph: cuda: device_buffer::view: the buffer holds 10 bytes, "
                                        "not a whole number of 4-byte elements"));
}

TEST_CASE("device_buffer rejects host ranges of another size and null pointers", "[cuda][gpu]") {
  device_buffer buffer(16);
  const std::vector<float> three(3);
  CHECK_THAT(
      error_of([&] { buffer.upload(three); }),
      ContainsSubstring("shardgraph: cuda: device_buffer::upload: the host range holds 12 bytes but the "
                        "buffer holds 16. Pass a host range of the buffer's size"));
  std::vector<double> one(1);
  CHECK_THAT(
      error_of([&] { buffer.download(one); }),
      ContainsSubstring("device_buffer::download: the host range holds 8 bytes but the buffer holds 16"));
  CHECK_THAT(error_of([&] { buffer.upload(static_cast<const void*>(nullptr)); }),
             ContainsSubstring("device_buffer::upload: the host pointer is null"));
  CHECK_THAT(error_of([&] { buffer.download(static_cast<void*>(nullptr)); }),
             ContainsSubstring("device_buffer::download: the host pointer is null"));
}

TEST_CASE("a failed allocation names the size and the device's free memory", "[cuda][gpu]") {
  const std::size_t too_much = std::size_t{1} << 60;  // 1 EiB: more than any GPU has
  const auto message = error_of([&] { device_buffer huge(too_much); });
  CHECK_THAT(message, ContainsSubstring(
                          "shardgraph: cuda: device_buffer: cannot allocate 1152921504606846976 bytes ("));
  CHECK_THAT(message, ContainsSubstring("GiB) on device "));
  CHECK_THAT(message, ContainsSubstring("(cudaErrorMemoryAllocation)"));
  CHECK_THAT(message, ContainsSubstring(" free of "));
  CHECK_THAT(message, ContainsSubstring(". Free device memory"));

  // The failure leaves the device usable.
  device_buffer after(64);
  std::vector<std::uint8_t> host(64, 7), back(64, 0);
  after.upload(host);
  after.download(back);
  CHECK(back == host);
}

TEST_CASE("device_guard sets the device for a scope and restores the previous one", "[cuda][gpu]") {
  int before = -1;
  REQUIRE(cudaGetDevice(&before) == cudaSuccess);
  const int other = sg::cuda::device_count() - 1;
  {
    const sg::cuda::device_guard on(other);
    int inside = -1;
    REQUIRE(cudaGetDevice(&inside) == cudaSuccess);
    CHECK(inside == other);
  }
  int after = -1;
  REQUIRE(cudaGetDevice(&after) == cudaSuccess);
  CHECK(after == before);
  CHECK_THAT(error_of([] { const sg::cuda::device_guard on(sg::cuda::device_count()); }),
             ContainsSubstring("shardgraph: cuda: device_guard (cudaSetDevice): "));
}
