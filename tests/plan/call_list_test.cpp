// plan::plan_calls on small training programs written here, planned as bind plans them (step index,
// fusion for a backend's declared calls, buckets, memory): which steps make no call, the operands of
// a linear whose product adds its bias, the seed's dependence (a loss's call writing the logits'
// gradient), a bucketed gradient, a collective's axis and block moves, a pipeline's gradient sum,
// and the kernel dims of a product, each against a value worked out by hand below.
#include <cstddef>
#include <string_view>
#include <vector>

#include <shardgraph/plan/call_list.hpp>
#include <shardgraph/plan/plan_step_fusion.hpp>

#include "plan_test_models.hpp"

namespace sg = shardgraph;
using namespace plan_test_models;
using sg::plan::bound_call;
using sg::plan::call_kind;

namespace {

// x -> gelu(linear(x, w, b)) -> linear(w_out) -> cross_entropy: a biased product before a gelu.
constexpr sg::graph biased_mlp() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i32);
  auto h = sg::gelu(sg::linear(x, g.param("w", {model, ffn}), g.param("b", {ffn})));
  sg::output(sg::cross_entropy(sg::linear(h, g.param("w_out", {ffn, vocab})), targets), "loss");
  return g.finish();
}

constexpr sg::program biased = sg::compile<biased_mlp, sg::training{}>();
constexpr sg::program data_parallel = sg::compile<mlp_blocks, sg::training{}>();

struct no_fused_calls {
  using buffer = int;
};
struct bias_epilogue {
  using buffer = int;
  struct traits {
    static constexpr sg::compute::fused_set runs{sg::compute::fused::linear_bias};
  };
};
struct loss_with_gradient {
  using buffer = int;
  struct traits {
    static constexpr sg::compute::fused_set runs{sg::compute::fused::loss_with_gradient};
  };
};

// One rank's plan at plan_test_models' sizes (batch 4, seq 2, model 5, ffn 6, vocab 7, 2 layers)
// on a dp x tp mesh, the rank at coordinates (dp 1, tp 0).
template <class Backend = no_fused_calls>
struct rank_plan {
  const sg::program& p;
  std::vector<int> axis_sizes;
  sg::model_sizes sizes = model_sizes();
  sg::local_layout layout{p, sizes, sg::mesh_shape{{"dp", axis_sizes[0]}, {"tp", axis_sizes[1]}}, {1 % axis_sizes[0], 0}};
  sg::plan::step_index steps = sg::plan::index_steps(p, layers);
  sg::plan::step_fusion fused = plan_fusion();
  sg::plan::gradient_bucket_plan buckets = plan_buckets();
  sg::plan::memory_layout memory = plan_memory();
  std::vector<int> divisor_entry = std::vector<int>(static_cast<std::size_t>(p.nodes.size()), -1);

  rank_plan(const sg::program& program, std::vector<int> axes = {1, 1}) : p(program), axis_sizes(std::move(axes)) {}
  rank_plan(const rank_plan&) = delete;

  static sg::model_sizes model_sizes() {
    sg::model_sizes s;
    s.set(sg::size_symbol::batch, 4).set(sg::size_symbol::seq, 2).set(sg::size_symbol::model, 5);
    s.set(sg::size_symbol::ffn, 6).set(sg::size_symbol::vocab, 7).set(sg::size_symbol::layers, layers);
    return s;
  }
  sg::plan::step_fusion plan_fusion() {
    const std::size_t n = static_cast<std::size_t>(p.nodes.size());
    const std::vector<bool> scattered;
    std::vector<bool> again(n, false), kept(n, false);
    for (int i = 0; i < p.nodes.size(); ++i) {
      const sg::op kind = p.nodes[i].kind;
      kept[static_cast<std::size_t>(i)] =
          kind != sg::op::parameter && kind != sg::op::param_grad && sg::plan::per_layer(p, steps, scattered, i);
    }
    sg::plan::step_fusion f = sg::plan::plan_step_fusion(
        {.program = p, .steps = steps, .layout = layout, .recomputed = again, .kept_per_layer = kept},
        sg::plan::traits_of<Backend>(sg::compute::fused_kinds_run_by<Backend>()));
    sg::plan::apply_producer_moves(f, steps);
    return f;
  }
  sg::plan::gradient_bucket_plan plan_buckets() const {
    std::vector<std::int64_t> elements;
    for (int i = 0; i < p.nodes.size(); ++i) elements.push_back(layout.of(i).numel());
    return sg::plan::plan_gradient_buckets({.compiled = p,
                                            .steps = steps,
                                            .elements = elements,
                                            .axis_sizes = axis_sizes,
                                            .bucket_bytes = p.bucket_bytes,
                                            .zero_stage = p.zero_stage,
                                            .zero_axis = p.zero_axis,
                                            .zero_coordinate = 1 % axis_sizes[0],
                                            .packs = true,
                                            .pipelined = false,
                                            .overlapped = false});
  }
  sg::plan::memory_layout plan_memory() const {
    return sg::plan::plan_memory({.program = p,
                                  .steps = steps,
                                  .layout = layout,
                                  .fused = fused,
                                  .options = {},
                                  .scattered_grad = buckets.scattered_grad,
                                  .pipelined = false,
                                  .views = true});
  }
  sg::plan::call_list calls(bool seed_is_one = true, bool pipelined = false) const {
    return sg::plan::plan_calls({.program = p,
                                 .layout = layout,
                                 .sizes = sizes,
                                 .fused = fused,
                                 .memory = memory,
                                 .buckets = buckets,
                                 .axis_sizes = axis_sizes,
                                 .divisor_entry = divisor_entry,
                                 .pipelined = pipelined,
                                 .seed_is_one = seed_is_one});
  }
};

// The step that produces node i.
std::size_t step_of(const sg::program& p, int i) {
  for (std::size_t s = 0; s < p.steps.size(); ++s)
    if (p.steps[s].node == i) return s;
  FAIL("no step of node " << i);
  return 0;
}
int first_of(const sg::graph& g, sg::op kind) {
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == kind) return i;
  FAIL("no node " << sg::op_name(kind));
  return -1;
}

}  // namespace

TEST_CASE("plan_calls: loop markers make no call; every other step of a plain backend makes one",
          "[plan][calls]") {
  const rank_plan<> r(data_parallel);
  const sg::plan::call_list calls = r.calls();
  REQUIRE(calls.steps.size() == data_parallel.steps.size());
  for (std::size_t s = 0; s < data_parallel.steps.size(); ++s) {
    const sg::step& st = data_parallel.steps[s];
    CAPTURE(s, sg::op_name(data_parallel.nodes[st.node].kind));
    const bool marker = st.kind == sg::step_kind::loop_begin || st.kind == sg::step_kind::loop_end;
    CHECK(calls.of_step(s).size() == (marker ? 0u : 1u));
    for (const bound_call& c : calls.of_step(s)) CHECK(c.node == st.node);
  }
  // One rank on dp and tp: each all_reduce is a copy, the loss's output an output copy.
  const sg::graph& g = data_parallel.nodes;
  const int reduction = g[gradient_of(g, "w_head")].inputs[0];
  const bound_call& copy = calls.of_step(step_of(data_parallel, reduction))[0];
  CHECK(copy.kind == call_kind::copy);
  CHECK(copy.in[0] == g[reduction].inputs[0]);
  CHECK(copy.out == reduction);
  const int loss = first_of(g, sg::op::output);
  CHECK(calls.of_step(step_of(data_parallel, loss))[0].kind == call_kind::output);
}

TEST_CASE("plan_calls: a linear whose product adds the bias writes the add_bias, which makes no call",
          "[plan][calls]") {
  const sg::graph& g = biased.nodes;
  const int add_bias = first_of(g, sg::op::add_bias);
  const int linear = g[add_bias].inputs[0];
  REQUIRE(g[linear].kind == sg::op::linear);
  {
    const rank_plan<> plain(biased);
    const sg::plan::call_list calls = plain.calls();
    const bound_call& c = calls.of_step(step_of(biased, linear))[0];
    CHECK(c.kind == call_kind::kernel);
    CHECK(c.out == linear);
    CHECK(c.bias == bound_call::none);
  }
  const rank_plan<bias_epilogue> r(biased);
  const sg::plan::call_list calls = r.calls();
  REQUIRE(calls.of_step(step_of(biased, linear)).size() == 1);
  const bound_call& c = calls.of_step(step_of(biased, linear))[0];
  CHECK(c.kind == call_kind::kernel);
  CHECK(c.kernel == sg::op::linear);
  CHECK(c.out == add_bias);            // the product's call writes x w + b into the add_bias's value
  CHECK(c.bias == g[add_bias].inputs[1]);
  CHECK(c.in[0] == g[linear].inputs[0]);
  CHECK(c.in[1] == g[linear].inputs[1]);
  CHECK(c.input_count == 2);
  // x (4, 2, 5) by w (5, 6): {m, k, n} = {8, 5, 6}.
  CHECK(c.dims == sg::plan::kernel_dim_array{8, 5, 6, 0, 0, 0});
  // The finite check reads the add_bias (named as the product), then the product's own value.
  CHECK(c.checked == std::vector<sg::plan::checked_value>{{add_bias, linear}, {linear, linear}});
  // The gelu after it starts its chain from the add_bias's value, which the product wrote.
  const int gelu = first_of(g, sg::op::gelu);
  const std::size_t gelu_step = step_of(biased, gelu);
  REQUIRE(calls.of_step(gelu_step).size() == 1);
  const bound_call& chain = calls.of_step(gelu_step)[0];
  CHECK(chain.kind == call_kind::elementwise);
  CHECK(chain.operands[0] == add_bias);
  CHECK(chain.chain_length == 1);
  CHECK(chain.chain[0].kind == sg::op::gelu);
  CHECK(chain.dims[0] == 4 * 2 * 6);
  // The add_bias's own step (if the program gives it one) makes no call.
  for (std::size_t s = 0; s < biased.steps.size(); ++s)
    if (biased.steps[s].node == add_bias) CHECK(calls.of_step(s).empty());
}

TEST_CASE("plan_calls: the loss's call writes the logits' gradient for a seed of 1 only", "[plan][calls]") {
  const sg::graph& g = biased.nodes;
  const int loss = first_of(g, sg::op::cross_entropy), loss_grad = first_of(g, sg::op::cross_entropy_grad);
  const int ones = first_of(g, sg::op::ones);
  rank_plan<loss_with_gradient> r(biased);
  r.divisor_entry[static_cast<std::size_t>(loss)] = 0;
  const sg::plan::call_list one = r.calls(true);
  CHECK(one.seed_is_one);
  CHECK(one.of_step(step_of(biased, loss))[0].logits_grad == loss_grad);
  CHECK(one.of_step(step_of(biased, loss_grad)).empty());
  // A mean over the targets counted in the run (entry 0), else every row: 4 x 2.
  const bound_call& c = one.of_step(step_of(biased, loss))[0];
  CHECK(c.divisor_entry == 0);
  CHECK(c.dims == sg::plan::kernel_dim_array{8, 7, 7, 8, -100, 0});
  CHECK(one.of_step(step_of(biased, ones))[0].scalar_is_loss_scale);

  const sg::plan::call_list scaled = r.calls(false);
  CHECK_FALSE(scaled.seed_is_one);
  CHECK(scaled.of_step(step_of(biased, loss))[0].logits_grad == bound_call::none);
  REQUIRE(scaled.of_step(step_of(biased, loss_grad)).size() == 1);
  CHECK(scaled.of_step(step_of(biased, loss_grad))[0].kernel == sg::op::cross_entropy_grad);
  CHECK(scaled.of_step(step_of(biased, loss_grad))[0].divisor_entry == -1);  // no entry given for it
}

TEST_CASE("plan_calls: a dp gradient goes to its bucket; a tp all_reduce is a collective on tp",
          "[plan][calls]") {
  const rank_plan<> r(data_parallel, {2, 2});
  const sg::plan::call_list calls = r.calls();
  const sg::graph& g = data_parallel.nodes;
  for (std::string_view name : {"w_head", "h.w_in", "h.w_out"}) {
    CAPTURE(name);
    const int grad = gradient_of(g, name), reduction = g[grad].inputs[0];
    REQUIRE(calls.of_step(step_of(data_parallel, reduction)).size() == 1);
    const bound_call& add = calls.of_step(step_of(data_parallel, reduction))[0];
    CHECK(add.kind == call_kind::bucket_add);
    CHECK(add.node == reduction);
    CHECK(add.in[0] == g[reduction].inputs[0]);
    CHECK(calls.of_step(step_of(data_parallel, grad)).empty());  // the bucket writes the param_grad
  }
  // The row-parallel product's output is Partial on tp: its all_reduce over the 2 tp ranks, on the
  // (4, 2, 5) value's 40 elements, the batch Shard on dp leaving 2 x 2 x 5 = 20 here.
  int tp_reduction = -1;
  for (int i = 0; i < g.size() && tp_reduction < 0; ++i)
    if (g[i].kind == sg::op::all_reduce && g[i].axis == 1) tp_reduction = i;
  REQUIRE(tp_reduction >= 0);
  const bound_call& c = calls.of_step(step_of(data_parallel, tp_reduction))[0];
  CHECK(c.kind == call_kind::collective);
  CHECK(c.kernel == sg::op::all_reduce);
  CHECK(c.axis == 1);
  CHECK(c.parts == 2);
  CHECK(c.in_numel == 20);
  CHECK(c.out_numel == 20);
}

TEST_CASE("plan_calls: a pipeline stage sums its param_grads; unread values make no call", "[plan][calls]") {
  const rank_plan<> r(data_parallel);
  const sg::graph& g = data_parallel.nodes;
  const int grad = gradient_of(g, "w_head");
  const std::size_t s = step_of(data_parallel, grad);
  REQUIRE(data_parallel.steps[s].kind == sg::step_kind::copy);
  CHECK(r.calls(true, false).of_step(s)[0].kind == call_kind::copy);
  CHECK(r.calls(true, true).of_step(s)[0].kind == call_kind::gradient_sum);

  sg::plan::memory_layout unread = r.memory;
  const int loss = first_of(g, sg::op::output);
  unread.unread[static_cast<std::size_t>(loss)] = true;
  const sg::plan::call_list calls = sg::plan::plan_calls({.program = data_parallel,
                                                           .layout = r.layout,
                                                           .sizes = r.sizes,
                                                           .fused = r.fused,
                                                           .memory = unread,
                                                           .buckets = r.buckets,
                                                           .axis_sizes = r.axis_sizes,
                                                           .divisor_entry = r.divisor_entry});
  CHECK(calls.of_step(step_of(data_parallel, loss)).empty());
}
