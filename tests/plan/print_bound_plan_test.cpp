// print(bound_plan): the bound plan of a tiny GPT-2 training program as text, on one rank and on
// thread ranks: the lines that matter (a collective with its axis and bytes, an arena offset, the
// arena's size as memory() reports it, a gradient bucket), not the whole output.
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>

#include <shardgraph/plan/print_bound_plan.hpp>

#include "../runtime/tiny_gpt2_training.hpp"
#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace {

using namespace tiny_gpt2;

constexpr sg::graph gpt2_f64() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::program gpt2_training = sg::compile<gpt2_f64, sg::training{}>();

// What one rank of a dp x tp mesh sees after bind: its printed plan and figures read from the rank.
struct printed_rank {
  std::string text;
  std::int64_t arena = 0, parameters = 0, bucket_bytes = 0, backend_calls = 0;
  std::string arena_value;  // a value the plan puts in the arena
  std::size_t arena_offset = 0;
};

printed_rank print_rank(int dp, int tp, int wanted) {
  printed_rank result;
  std::mutex m;
  sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(gpt2_training, config.sizes(batch, seq), comm, sg::cpu::backend{},
                         sg::mesh_shape{{"dp", dp}, {"tp", tp}}, sg::random_weights(3, 0.3));
    if (comm.rank() != wanted) return;
    const sg::plan::bound_plan plan = rank.plan();
    std::ostringstream out;
    print(plan, out);
    std::lock_guard lock(m);
    result.text = out.str();
    result.arena = rank.memory().arena;
    result.parameters = rank.memory().parameters;
    result.backend_calls = rank.planned_backend_calls();
    for (const auto& b : rank.gradient_buckets()) result.bucket_bytes += b.bytes;
    const sg::graph& g = gpt2_training.nodes;
    for (int i = g.size() - 1; i >= 0; --i)  // the last value in the arena other than at offset 0
      if (plan.memory.values[static_cast<std::size_t>(i)].kind == sg::plan::storage::arena &&
          plan.memory.values[static_cast<std::size_t>(i)].offset > 0) {
        result.arena_value = std::string(g[i].name.view());
        result.arena_offset = plan.memory.values[static_cast<std::size_t>(i)].offset;
        break;
      }
  });
  return result;
}

// The printed plan of rank 1 of two pipeline stages of the tiny GPT-2 (compiled at run time).
std::string print_last_stage() {
  using Mesh3 = sg::mesh<"dp", "tp", "pp">;
  const sg::program p = sg::compile_graph(
      sg::models::gpt2<Mesh3>({.type = sg::dtype::f64, .data_axis = "", .tensor_axis = ""}), sg::training{});
  REQUIRE(p.ok());
  std::string text;
  sg::threads::world(2).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, config.sizes(batch / 2, seq), comm, sg::cpu::backend{},
                         sg::mesh_shape{{"dp", 1}, {"tp", 1}, {"pp", 2}}, sg::random_weights(3, 0.3),
                         sg::pipeline_options{.micro_batches = 2});
    if (comm.rank() != 1) return;
    std::ostringstream out;
    print(rank.plan(), out);
    text = out.str();  // rank 1 alone writes it
  });
  return text;
}

// The first line of `text` holding `what` and `also` (empty: none).
std::string line_with(const std::string& text, const std::string& what, const std::string& also = {}) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(what) != std::string::npos && line.find(also) != std::string::npos) return line;
  return {};
}

}  // namespace

TEST_CASE("print(bound_plan): one rank shows its calls, arena offsets and the arena's size", "[plan][threads]") {
  const printed_rank r = print_rank(1, 1, 0);
  INFO(r.text);
  CHECK(r.text.starts_with("rank 0: dp=0 tp=0 of mesh dp=1 tp=1; batch 8, seq 8, 2 layers; training, ZeRO-0"));
  CHECK(r.text.find("pipeline  none") != std::string::npos);
  // The repeat block once, marked with its layers; its product with the bias it adds.
  CHECK(r.text.find("loop h x 2 layers\n") != std::string::npos);
  CHECK(r.text.find("loop d.h x 2 layers (backward: last layer first)") != std::string::npos);
  CHECK(!line_with(r.text, "linear+add_bias+gelu ", " h.mlp.c_fc ").empty());
  // One rank: no collective does more than a copy, and no gradient is bucketed.
  CHECK(line_with(r.text, " ranks) <- ").empty());
  CHECK(r.text.find("gradient buckets: none") != std::string::npos);
  // A value in the arena, at its byte offset, and the arena's size as memory() reports it.
  REQUIRE(r.arena > 0);
  REQUIRE(!r.arena_value.empty());
  INFO("the arena value: " << r.arena_value << " at " << r.arena_offset);
  // (on the line of the step that writes it, which a fused step may name after another node)
  CHECK(r.text.find(" [arena+" + std::to_string(r.arena_offset) + ", ") != std::string::npos);
  CHECK(r.text.find(" " + r.arena_value + " ") != std::string::npos);
  const std::string arena = line_with(r.text, "  arena  ");
  CHECK(arena.find(" " + std::to_string(r.arena) + "  (") != std::string::npos);
  CHECK(line_with(r.text, "  parameters  ").find(" " + std::to_string(r.parameters) + "  (") != std::string::npos);
  // The step's count of backend calls, as the call list gives it.
  REQUIRE(r.backend_calls > 0);
  CHECK(!line_with(r.text, " calls listed; ", " " + std::to_string(r.backend_calls) + " compute-backend calls").empty());
}

TEST_CASE("print(bound_plan): a tp=2 rank shows its all_reduces on tp with their bytes", "[plan][threads]") {
  const printed_rank r = print_rank(1, 2, 1);
  INFO(r.text);
  CHECK(r.text.starts_with("rank 1: dp=0 tp=1 of mesh dp=1 tp=2"));
  // The attention's output projection is row parallel: its (batch, seq, model) result is a partial
  // sum, all-reduced on tp: 8 * 8 * 32 f64 = 16384 bytes.
  const std::string reduce = line_with(r.text, "all_reduce @tp");
  CHECK(reduce.find("(8, 8, 32)") != std::string::npos);
  CHECK(reduce.find("16.0 KiB over tp (2 ranks)") != std::string::npos);
  // The column-parallel product holds half the hidden units: (8, 8, 4 * 32 / 2).
  CHECK(!line_with(r.text, " h.mlp.c_fc ", "(8, 8, 64)").empty());
}

TEST_CASE("print(bound_plan): a dp=2 rank shows its gradient bucket", "[plan][threads]") {
  const printed_rank r = print_rank(2, 1, 1);
  INFO(r.text);
  // Every weight is replicated on dp: all gradients are all-reduced there, in one bucket of 25 MiB,
  // whose bytes are the parameters'.
  REQUIRE(r.bucket_bytes == r.parameters);
  const std::string bucket = line_with(r.text, "     0 all_reduce");
  CHECK(bucket.find(" dp ") != std::string::npos);
  CHECK(bucket.find(sg::plan::bytes_text(r.parameters)) != std::string::npos);
  CHECK(bucket.find("grad.ln_f.bias, grad.ln_f.weight, grad.h.mlp.c_proj.bias@1") != std::string::npos);
  CHECK(!line_with(r.text, "all_reduce @dp", " d.h.mlp.c_proj.weight ").empty());
  CHECK(line_with(r.text, "all_reduce @dp", " d.h.mlp.c_proj.weight ").find("packs into bucket 0") !=
        std::string::npos);
}

TEST_CASE("print(bound_plan): a pipeline's last stage shows its layers and only its calls", "[plan][threads]") {
  const std::string text = print_last_stage();
  INFO(text);
  // 2 layers over 2 stages, the embedding and the head counted as one layer each: the last stage
  // runs layer 1, the head and the loss.
  CHECK(!line_with(text, "pipeline  stage 1 of 2 on pp (1f1b, 2 micro-batches): layers [1, 2)",
                   "; the head and the loss").empty());
  CHECK(text.find("loop h x 1 layer\n") != std::string::npos);
  CHECK(!line_with(text, " cross_entropy ").empty());
  CHECK(line_with(text, " embedding ").empty());  // the first stage's
}
