// Sizes that overflow, that are zero or negative, that do not divide, and that do not fit the
// device: each is a shardgraph::error naming the size, before any kernel runs (never a wrapped-around
// element count, a std::bad_alloc, an abort or an out-of-memory kill).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include <shardgraph/core/checked_math.hpp>
#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr std::int64_t two_to(int n) { return std::int64_t{1} << n; }

const sg::program& gpt2_inference() {
  static const sg::program p =
      sg::compile_graph(sg::models::gpt2<Mesh>({.data_axis = "", .tensor_axis = ""}), sg::inference{});
  return p;
}

const sg::program& gpt2_training_dp() {
  static const sg::program p = sg::compile_graph(sg::models::gpt2<Mesh>({.tensor_axis = ""}), sg::training{});
  return p;
}

// bind on `dp` thread ranks with the cpu backend; rank 0's error, or "" when it binds.
std::string bind_error(const sg::program& p, const sg::model_sizes& sizes, int dp,
                       const sg::memory_options& memory = {}) {
  std::string message;
  std::mutex m;
  sg::threads::world(dp).run([&](sg::threads::communicator& comm) {
    try {
      const sg::mesh_shape mesh = dp > 1 ? sg::mesh_shape{{"dp", dp}} : sg::mesh_shape{};
      auto rank = sg::bind(p, sizes, comm, sg::cpu::backend{}, mesh, sg::random_weights(), {}, memory);
    } catch (const sg::error& e) {
      std::lock_guard lock(m);
      if (comm.rank() == 0) message = e.what();
    }
  });
  return message;
}
std::string bind_error(const sg::model_sizes& sizes, const sg::memory_options& memory = {}) {
  return bind_error(gpt2_inference(), sizes, 1, memory);
}

// The bytes in "needs at least N bytes".
std::size_t bytes_needed(const std::string& error) {
  const std::string before = "needs at least ";
  const std::size_t at = error.find(before);
  REQUIRE(at != std::string::npos);
  return std::stoull(error.substr(at + before.size()));
}

const sg::models::gpt2_config tiny{.vocab = 64, .positions = 16, .model = 16, .heads = 2, .layers = 1};

}  // namespace

TEST_CASE("checked_math: products and sums of sizes past 64 bits are errors", "[core][sizes]") {
  CHECK(sg::checked_multiply(two_to(31), two_to(31), "here") == two_to(62));
  CHECK(sg::checked_multiply(0, std::numeric_limits<std::int64_t>::max(), "here") == 0);
  CHECK_THROWS_WITH(sg::checked_multiply(two_to(40), two_to(40), "embedding 'wte'"),
                    sg::testing::ContainsSubstring("shardgraph: embedding 'wte': the product 1099511627776 * 1099511627776 "
                                    "does not fit in 64 bits"));
  CHECK_THROWS_WITH(sg::checked_multiply(-3, 4, "here"), sg::testing::ContainsSubstring("a size is -3, negative"));
  CHECK_THROWS_WITH(sg::checked_add(std::numeric_limits<std::int64_t>::max(), 1, "here"),
                    sg::testing::ContainsSubstring("the sum"));
  const std::vector<std::int64_t> shape = {two_to(20), two_to(20), two_to(20), two_to(4)};
  CHECK_THROWS_WITH(sg::checked_product(shape, "a shape"), sg::testing::ContainsSubstring("does not fit in 64 bits"));
  CHECK_THROWS_WITH(sg::checked_bytes(two_to(62), 8, "bytes"), sg::testing::ContainsSubstring("does not fit in 64 bits"));
  CHECK(sg::checked_bytes(two_to(40), 8, "bytes") == std::size_t{1} << 43);
}

TEST_CASE("bind: a vocabulary of 2^62 is an overflow naming the table, not a zero-element table",
          "[runtime][sizes]") {
  sg::models::gpt2_config c = tiny;
  c.vocab = two_to(62);
  const std::string e = bind_error(c.sizes(1, 4));
  CHECK_THAT(e, sg::testing::ContainsSubstring("wte"));
  CHECK_THAT(e, sg::testing::ContainsSubstring("vocab = 4611686018427387904"));
  CHECK_THAT(e, sg::testing::ContainsSubstring("does not fit in 64 bits"));
}

TEST_CASE("bind: 2^40 x 2^40 sizes are an overflow naming the sizes", "[runtime][sizes]") {
  sg::model_sizes s;
  s.set(sg::size_symbol::heads, two_to(40)).set(sg::size_symbol::head_dim, two_to(40));
  CHECK_THROWS_WITH(
      s.get(sg::dim::heads * sg::dim::head_dim),
      sg::testing::ContainsSubstring("bind: size 'heads*head_dim'") && sg::testing::ContainsSubstring("does not fit in 64 bits"));

  sg::models::gpt2_config c = tiny;
  c.vocab = two_to(40);
  c.model = two_to(40);
  c.heads = 1;
  const std::string e = bind_error(c.sizes(1, 4));
  CHECK_THAT(e, sg::testing::ContainsSubstring("the product 1099511627776 * 1099511627776 does not fit in 64 bits"));
}

TEST_CASE("bind: zero and negative sizes name the size", "[runtime][sizes]") {
  sg::models::gpt2_config c = tiny;
  c.vocab = 0;
  CHECK_THAT(bind_error(c.sizes(1, 4)), sg::testing::ContainsSubstring("size 'vocab' is 0"));
  c = tiny;
  c.layers = -2;
  CHECK_THAT(bind_error(c.sizes(1, 4)), sg::testing::ContainsSubstring("size 'layers' is -2"));
  CHECK_THAT(bind_error(tiny.sizes(-1, 4)), sg::testing::ContainsSubstring("size 'batch' is -1"));
}

TEST_CASE("model configs: heads that do not divide the model width are refused", "[runtime][sizes]") {
  const sg::models::gpt2_config gpt2{.vocab = 64, .positions = 16, .model = 10, .heads = 3, .layers = 1};
  CHECK_THROWS_WITH(gpt2.sizes(1, 4),
                    sg::testing::ContainsSubstring("gpt2_config: model = 10 is not divisible by heads = 3"));
  const sg::models::llama_config llama{
      .vocab = 64, .model = 10, .ffn = 16, .heads = 4, .kv_heads = 4, .layers = 1};
  CHECK_THROWS_WITH(llama.sizes(1, 4),
                    sg::testing::ContainsSubstring("llama_config: model = 10 is not divisible by heads = 4"));
  sg::models::gpt2_config huge = tiny;
  huge.model = two_to(62);
  huge.heads = 1;
  CHECK_THROWS_WITH(huge.sizes(1, 4), sg::testing::ContainsSubstring("gpt2_config: ffn = 4 * model"));
}

TEST_CASE("bind: a batch too big for the device's memory says how much is needed and available",
          "[runtime][sizes][memory]") {
  // Given a limit: the tiny model binds in 1 MiB at batch 1, not at batch 4096.
  const sg::memory_options one_mib{.available_bytes = std::size_t{1} << 20};
  CHECK(bind_error(tiny.sizes(1, 4), one_mib).empty());
  const std::string e = bind_error(tiny.sizes(4096, 16), one_mib);
  CHECK_THAT(e, sg::testing::ContainsSubstring("bind: memory (rank 0): this rank's program needs at least"));
  CHECK_THAT(e, sg::testing::ContainsSubstring("but the device has 1048576 bytes (1.00 MiB) available "
                                "(memory_options::available_bytes)"));
  CHECK_THAT(e, sg::testing::ContainsSubstring("is the first value that does not fit"));
  CHECK_THAT(e, sg::testing::ContainsSubstring("smaller batch"));

  // The cpu backend's own limit, the host's available memory: 2^44 token ids (128 TiB) and their
  // logits are counted, not allocated.
  CHECK(sg::cpu::backend{}.free_bytes() > 0);
  sg::models::gpt2_config c = tiny;
  const std::string host = bind_error(c.sizes(two_to(40), 16));
  CHECK_THAT(host, sg::testing::ContainsSubstring("this rank's program needs at least"));
  CHECK_THAT(host, sg::testing::ContainsSubstring("(what the backend reports free)"));
  CHECK_THAT(host, sg::testing::ContainsSubstring("input_ids"));
}

TEST_CASE("bind: the bytes a plan needs are the bytes bind allocates", "[runtime][sizes][memory]") {
  // Data parallel training: parameters, gradients, the arena, a gradient bucket's staging buffer.
  const sg::model_sizes sizes = tiny.sizes(4, 8);
  const std::size_t needed = bytes_needed(bind_error(gpt2_training_dp(), sizes, 2, {.available_bytes = 1}));
  CHECK(needed > 0);
  CHECK(bind_error(gpt2_training_dp(), sizes, 2, {.available_bytes = needed}).empty());
  CHECK_THAT(bind_error(gpt2_training_dp(), sizes, 2, {.available_bytes = needed - 1}),
             sg::testing::ContainsSubstring("needs at least " + std::to_string(needed) + " bytes"));
}

TEST_CASE("allocation failures are shardgraph errors naming the bytes, never std::bad_alloc",
          "[runtime][sizes][memory]") {
  // Sizes within 64 bits whose bytes (2^62, beyond any address space) no allocator can give.
  CHECK_THROWS_WITH(sg::cpu::backend{}.allocate(sg::dtype::f32, two_to(60)),
                    sg::testing::ContainsSubstring("cpu::backend: allocate: cannot allocate 4611686018427387904 bytes"));
  CHECK_THROWS_WITH(
      sg::host_tensor(sg::dtype::f32, {two_to(30), two_to(30)}),
      sg::testing::ContainsSubstring("host_tensor (1073741824, 1073741824): cannot allocate 4611686018427387904 bytes"));
  CHECK_THROWS_WITH(sg::host_tensor(sg::dtype::f32, {two_to(40), two_to(40)}),
                    sg::testing::ContainsSubstring("host_tensor (1099511627776, 1099511627776)") &&
                        sg::testing::ContainsSubstring("does not fit in 64 bits"));
  // In bind, with the memory check off: the backend's failure names the value.
  const sg::memory_options unchecked{.available_bytes = std::numeric_limits<std::size_t>::max()};
  const std::string e = bind_error(tiny.sizes(two_to(47), 16), unchecked);
  CHECK_THAT(e, sg::testing::ContainsSubstring("bind: value 'input_ids'") && sg::testing::ContainsSubstring("cannot allocate"));
}

TEST_CASE("memory_plan: byte counts past 64 bits are errors, not wrapped offsets",
          "[runtime][sizes][memory]") {
  namespace mp = sg::memory_plan;
  const std::size_t most = std::numeric_limits<std::size_t>::max();
  CHECK_THROWS_WITH(mp::place({{.bytes = most - 8, .live = {{0, 1}}}}),
                    sg::testing::ContainsSubstring("does not fit in 64 bits"));
  const std::size_t half = std::size_t{1} << 62;
  CHECK_THROWS_WITH(mp::place({{.bytes = half, .live = {{0, 1}}}, {.bytes = half, .live = {{0, 1}}}}),
                    sg::testing::ContainsSubstring("memory_plan::place: the arena"));
  CHECK_THROWS_WITH(mp::lower_bound({{.bytes = half, .live = {{0, 1}}}, {.bytes = half, .live = {{0, 1}}}}),
                    sg::testing::ContainsSubstring("memory_plan::lower_bound"));
}
