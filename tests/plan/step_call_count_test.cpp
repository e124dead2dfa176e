// The backend calls of a training step, read from the bound plan's call list without running it
// (plan/call_count.hpp): GPT-2 124M's figure, the one bench/step_calls prints, and on tiny GPT-2s
// (with and without recomputation, with and without a loss scale) the count a counting cpu backend
// receives when forward() runs, so the plan's count cannot drift from what runs.
#include <cstdint>
#include <string_view>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_fused_calls.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
// GPT-2 on one rank (no dp or tp annotation), trained with recomputation R.
template <sg::dtype T>
constexpr sg::graph single_rank_gpt2() {
  return sg::models::gpt2<Mesh>({.type = T, .data_axis = "", .tensor_axis = ""});
}
template <sg::dtype T, sg::recompute R = sg::recompute::none>
constexpr sg::program trained = sg::compile<single_rank_gpt2<T>, sg::training{.recompute = R}>();

// The cpu backend receiving every fused call as the plan made it, counting every call it receives.
struct counting_backend : sg::testing::cpu_fused_calls {
  std::int64_t* calls = nullptr;
  void run(const sg::compute::kernel_call<buffer>& c) { ++*calls, sg::testing::cpu_fused_calls::run(c); }
  void copy(const buffer& from, buffer& to) { ++*calls, sg::cpu::backend::copy(from, to); }
  void add_scaled(const buffer& from, buffer& to, double f) { ++*calls, sg::cpu::backend::add_scaled(from, to, f); }
  void scale(buffer& b, double f) { ++*calls, sg::cpu::backend::scale(b, f); }
  void fill_zero(buffer& b) { ++*calls, sg::cpu::backend::fill_zero(b); }
  void convert(const buffer& from, buffer& to) { ++*calls, sg::cpu::backend::convert(from, to); }
  void copy_range(const buffer& from, std::int64_t a, buffer& to, std::int64_t b, std::int64_t n) {
    ++*calls, sg::cpu::backend::copy_range(from, a, to, b, n);
  }
  void slice(const buffer& from, buffer& to, sg::compute::block_layout b, std::int64_t index) {
    ++*calls, sg::cpu::backend::slice(from, to, b, index);
  }
};

sg::tensor_map token_batch(std::int64_t batch, std::int64_t seq, std::int64_t vocab) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(batch * seq));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 2654435761u) % vocab);
  sg::tensor_map inputs;
  inputs.emplace("input_ids", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  inputs.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  return inputs;
}

// The plan's count of one forward() of `p` on a tiny GPT-2, and what the backend received running it.
struct counts {
  std::int64_t planned = 0, received = 0;
};
counts planned_and_received(const sg::program& p, double loss_scale) {
  const sg::models::gpt2_config tiny{.vocab = 64, .positions = 16, .model = 16, .heads = 2, .layers = 3};
  counts c;
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    std::int64_t received = 0;
    counting_backend backend;
    backend.calls = &received;
    auto rank = sg::bind(p, tiny.sizes(2, 8), comm, backend, sg::mesh_shape{{"dp", 1}, {"tp", 1}},
                         sg::random_weights(1, 0.02), {}, {.outputs = {"loss"}});
    rank.set_loss_scale(loss_scale);
    c.planned = rank.planned_backend_calls();
    received = 0;
    rank.forward(token_batch(2, 8, tiny.vocab));
    c.received = received;
  });
  return c;
}

// Leaves every weight zero: the count reads no weight.
void zero_weights(std::string_view, const sg::tensor_slice&, sg::host_tensor&) {}

}  // namespace

TEST_CASE("step calls: a GPT-2 124M training step makes 253 backend calls, read from its plan",
          "[plan][calls]") {
  std::int64_t planned = 0;
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    std::int64_t received = 0;
    counting_backend backend;
    backend.calls = &received;
    auto rank = sg::bind(trained<sg::dtype::bf16>, sg::models::gpt2_config::small().sizes(1, 64), comm, backend,
                         sg::mesh_shape{{"dp", 1}, {"tp", 1}}, zero_weights, {}, {.outputs = {"loss"}});
    planned = rank.planned_backend_calls();
  });
  // forward() and backward of the bound plan, and the trainer's one fused AdamW over every
  // parameter (adamw_many; the gradient norm's clipping factor rides in it): bench/step_calls.
  constexpr std::int64_t optimizer_calls = 1;
  CHECK(planned + optimizer_calls == 253);
}

TEST_CASE("step calls: the plan's count is what the backend receives", "[plan][calls]") {
  for (const double scale : {1.0, 1024.0}) {
    CAPTURE(scale);
    const counts plain = planned_and_received(trained<sg::dtype::f32>, scale);
    CHECK(plain.planned > 0);
    CHECK(plain.planned == plain.received);
    const counts recomputed = planned_and_received(trained<sg::dtype::f32, sg::recompute::full>, scale);
    CHECK(recomputed.planned > plain.planned);  // the block's forward again, in each backward layer
    CHECK(recomputed.planned == recomputed.received);
  }
}
