// Ops of the user's own, defined here outside the library: one with a composite backward
// (gated_square), one whose backward is its own custom op with its kernel (scaled_tanh ->
// scaled_tanh_grad), one whose rule forces a gather (reverse_last), one whose rule gives a
// Partial output (project, summing over k), and a composite op (a plain function). A tiny model
// of all of them trains one step on one rank and on dp=2 x tp=2 thread ranks; the loss and every
// gradient agree (f64, relative 1e-9).
#include <cmath>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/dsl/custom.hpp>
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "support/whole_gradients.hpp"

namespace sg = shardgraph;

namespace {

// dy * s * (1 - y^2): the gradient of y = tanh(s x), from y and dy. Forward only.
struct scaled_tanh_grad {
  static constexpr std::string_view name = "scaled_tanh_grad";
  static constexpr int inputs = 2;
  static constexpr std::string_view sharding = "b s d, b s d -> b s d";
  static constexpr sg::shape_result output_shape(std::span<const sg::shape> in) { return in[0]; }
  static void cpu(const sg::custom_call& c) {
    std::span<const double> y = c.in[0].values<const double>(), dy = c.in[1].values<const double>();
    std::span<double> out = c.out.values<double>();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = dy[i] * c.attribute * (1 - y[i] * y[i]);
  }
  static constexpr sg::custom_kernel kernels[] = {{"cpu", &cpu}};
};

// y = tanh(s x), s the attribute; its backward is the op above.
struct scaled_tanh {
  static constexpr std::string_view name = "scaled_tanh";
  static constexpr int inputs = 1;
  static constexpr std::string_view sharding = "b s d -> b s d";
  static constexpr sg::shape output_shape(std::span<const sg::shape> in) { return in[0]; }
  static constexpr void backward(sg::custom_gradient& g) {
    g.set_input_grad(0, sg::apply<scaled_tanh_grad>({g.output(), g.output_grad()}, g.attribute()));
  }
  static void cpu(const sg::custom_call& c) {
    std::span<const double> x = c.in[0].values<const double>();
    std::span<double> y = c.out.values<double>();
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = std::tanh(c.attribute * x[i]);
  }
  static constexpr sg::custom_kernel kernels[] = {{"cpu", &cpu}};
};

// y = x * x * g; its backward is a composition of mul and add.
struct gated_square {
  static constexpr std::string_view name = "gated_square";
  static constexpr int inputs = 2;
  static constexpr std::string_view sharding = "b s d, b s d -> b s d";
  static constexpr sg::shape_result output_shape(std::span<const sg::shape> in) {
    if (!(in[0] == in[1])) return sg::shape_error("x and g differ in shape", "gate x with a tensor of its shape");
    return in[0];
  }
  static constexpr void backward(sg::custom_gradient& g) {
    sg::tensor x = g.input(0), gate = g.input(1), dy = g.output_grad();
    sg::tensor half = dy * gate * x;
    g.set_input_grad(0, half + half);
    g.set_input_grad(1, dy * x * x);
  }
  static void cpu(const sg::custom_call& c) {
    std::span<const double> x = c.in[0].values<const double>(), gate = c.in[1].values<const double>();
    std::span<double> y = c.out.values<double>();
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = x[i] * x[i] * gate[i];
  }
  static constexpr sg::custom_kernel kernels[] = {{"cpu", &cpu}};
};

// y[..., j] = x[..., d - 1 - j]: the last dimension reversed, which needs it whole (a gather where
// it is sharded: d is not in the output). Its own backward.
struct reverse_last {
  static constexpr std::string_view name = "reverse_last";
  static constexpr int inputs = 1;
  static constexpr std::string_view sharding = "b s d -> b s e";
  static constexpr sg::shape output_shape(std::span<const sg::shape> in) { return in[0]; }
  static constexpr void backward(sg::custom_gradient& g) {
    g.set_input_grad(0, sg::apply<reverse_last>({g.output_grad()}));
  }
  static void cpu(const sg::custom_call& c) {
    std::span<const double> x = c.in[0].values<const double>();
    std::span<double> y = c.out.values<double>();
    const std::size_t d = static_cast<std::size_t>(c.out.shape.back());
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = x[i - i % d + (d - 1 - i % d)];
  }
  static constexpr sg::custom_kernel kernels[] = {{"cpu", &cpu}};
};

// Local rows of a (rows, k) by (k, n) product, added into out (rows, n) or written.
void product(std::span<const double> a, std::span<const double> b, std::span<double> out, std::size_t k,
             std::size_t n) {
  for (std::size_t r = 0; r < out.size() / n; ++r)
    for (std::size_t j = 0; j < n; ++j) {
      double sum = 0;
      for (std::size_t i = 0; i < k; ++i) sum += a[r * k + i] * b[i * n + j];
      out[r * n + j] = sum;
    }
}

// dw (k, v) = sum over b, s of x (b, s, k) outer dy (b, s, v). Forward only.
struct outer_sum {
  static constexpr std::string_view name = "outer_sum";
  static constexpr int inputs = 2;
  static constexpr std::string_view sharding = "b s k, b s v -> k v | sum b s";
  static constexpr sg::shape output_shape(std::span<const sg::shape> in) { return {in[0][2], in[1][2]}; }
  static void cpu(const sg::custom_call& c) {
    std::span<const double> x = c.in[0].values<const double>(), dy = c.in[1].values<const double>();
    std::span<double> out = c.out.values<double>();
    const std::size_t k = static_cast<std::size_t>(c.out.shape[0]), v = static_cast<std::size_t>(c.out.shape[1]);
    for (std::size_t i = 0; i < k; ++i)
      for (std::size_t j = 0; j < v; ++j) {
        double sum = 0;
        for (std::size_t r = 0; r < x.size() / k; ++r) sum += x[r * k + i] * dy[r * v + j];
        out[i * v + j] = sum;
      }
  }
  static constexpr sg::custom_kernel kernels[] = {{"cpu", &cpu}};
};

// y (b, s, v) = x (b, s, k) w (k, v): a sum over k, so k sharded gives a Partial output.
struct project {
  static constexpr std::string_view name = "project";
  static constexpr int inputs = 2;
  static constexpr std::string_view sharding = "b s k, k v -> b s v | sum k";
  static constexpr sg::shape_result output_shape(std::span<const sg::shape> in) {
    if (!(in[0][2] == in[1][0])) return sg::shape_error("x's last dimension differs from w's first", "check w's shape");
    return sg::shape{in[0][0], in[0][1], in[1][1]};
  }
  static constexpr void backward(sg::custom_gradient& g) {
    g.set_input_grad(0, sg::linear(g.output_grad(), g.input(1), sg::weight_layout::out_in));
    g.set_input_grad(1, sg::apply<outer_sum>({g.input(0), g.output_grad()}));
  }
  static void cpu(const sg::custom_call& c) {
    product(c.in[0].values<const double>(), c.in[1].values<const double>(), c.out.values<double>(),
            static_cast<std::size_t>(c.in[1].shape[0]), static_cast<std::size_t>(c.in[1].shape[1]));
  }
  static constexpr sg::custom_kernel kernels[] = {{"cpu", &cpu}};
};

// A composite op: a plain function of other ops.
constexpr sg::tensor gated_silu(sg::tensor a, sg::tensor b) { return sg::silu(a) * b; }

using Mesh = sg::mesh<"dp", "tp">;

constexpr sg::graph custom_model() {
  using namespace sg::dim;
  sg::builder<Mesh> g(sg::dtype::f64);
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f64, sg::on<"dp">(sg::shard<0>));
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i64, sg::on<"dp">(sg::shard<0>));
  auto w_a = g.param("w_a", {model, ffn}, sg::on<"tp">(sg::shard<1>));
  auto w_b = g.param("w_b", {model, ffn}, sg::on<"tp">(sg::shard<1>));
  auto w_out = g.param("w_out", {ffn, vocab}, sg::on<"tp">(sg::shard<0>));
  auto a = sg::apply<scaled_tanh>({sg::linear(x, w_a)}, 0.7);  // ffn sharded on tp: passes through
  auto b = sg::linear(x, w_b);
  auto h = sg::apply<reverse_last>({gated_silu(sg::apply<gated_square>({a, b}), b)});  // gathers ffn
  auto logits = sg::apply<project>({h, w_out});  // ffn sliced on tp: a Partial sum, all-reduced
  sg::output(sg::cross_entropy(logits, targets), "loss");
  return g.finish();
}
constexpr sg::program train = sg::compile<custom_model, sg::training{}>();
static_assert(train.count(sg::op::custom) == 7);  // 4 forward; backward: scaled_tanh_grad, reverse_last, outer_sum
static_assert(train.count(sg::op::all_gather, "tp") >= 1);
static_assert(train.count(sg::op::all_reduce, "tp") >= 1);
static_assert(train.nodes.find("d.scaled_tanh.scaled_tanh_grad") >= 0);  // a backward's ops: "d.<forward>.<op>"

constexpr std::int64_t n_batch = 2, n_seq = 3, n_model = 4, n_ffn = 4, n_vocab = 5;

sg::model_sizes sizes() {
  sg::model_sizes s;
  s.set(sg::size_symbol::batch, n_batch).set(sg::size_symbol::seq, n_seq).set(sg::size_symbol::model, n_model);
  s.set(sg::size_symbol::ffn, n_ffn).set(sg::size_symbol::vocab, n_vocab);
  return s;
}

sg::tensor_map inputs() {
  std::vector<double> x(n_batch * n_seq * n_model);
  std::vector<std::int64_t> targets(n_batch * n_seq);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.41 * static_cast<double>(i) + 0.2);
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int64_t>((i * 3 + 2) % n_vocab);
  sg::tensor_map m;
  m.emplace("x", sg::host_tensor::from<double>({n_batch, n_seq, n_model}, x));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({n_batch, n_seq}, targets));
  return m;
}

test_support::gradient_map gradients(int dp, int tp, double* loss) {
  return test_support::whole_gradients(train, sizes(), {{"dp", dp}, {"tp", tp}}, sg::random_weights(11, 0.5),
                                       inputs(), loss);
}

// An op with a kernel for another backend only.
struct cuda_only {
  static constexpr std::string_view name = "cuda_only";
  static constexpr int inputs = 1;
  static constexpr std::string_view sharding = "b d -> b d";
  static constexpr sg::shape output_shape(std::span<const sg::shape> in) { return in[0]; }
  static void cuda(const sg::custom_call&) {}
  static constexpr sg::custom_kernel kernels[] = {{"cuda", &cuda}};
};

}  // namespace

TEST_CASE("custom ops: dp=2 x tp=2 trains as one rank does", "[runtime][threads]") {
  double reference_loss = 0, loss = 0;
  const test_support::gradient_map reference = gradients(1, 1, &reference_loss);
  REQUIRE(reference.size() == 3);
  REQUIRE(std::isfinite(reference_loss));
  const test_support::gradient_map got = gradients(2, 2, &loss);
  CHECK(std::abs(loss - reference_loss) <= 1e-9 * std::abs(reference_loss));
  test_support::check_same_gradients(got, reference, 1e-9);
}

TEST_CASE("custom ops: a gradient matches a finite difference of the loss", "[runtime][threads]") {
  // w_out[0][0] moved by +-eps: the central difference of the loss against its gradient.
  const double eps = 1e-6;
  double base = 0;
  const test_support::gradient_map g = gradients(1, 1, &base);
  auto loss_with = [&](double delta) {
    const sg::weight_source random = sg::random_weights(11, 0.5);
    const sg::weight_source moved = [&](std::string_view name, const sg::tensor_slice& slice, sg::host_tensor& out) {
      random(name, slice, out);
      if (name == "w_out") out.set(0, out.at(0) + delta);
    };
    double loss = 0;
    sg::threads::world(1).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(train, sizes(), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", 1}, {"tp", 1}}, moved);
      loss = rank.forward(inputs()).at("loss").at(0);
    });
    return loss;
  };
  const double numeric = (loss_with(eps) - loss_with(-eps)) / (2 * eps);
  CHECK(std::abs(numeric - g.at("w_out")[0]) <= 1e-6 * std::max(1.0, std::abs(numeric)));
}

TEST_CASE("custom ops: a missing kernel is an error at bind naming the op, node and backend", "[runtime]") {
  static constexpr sg::program p = sg::compile_graph([] {
    sg::builder<Mesh> g(sg::dtype::f64);
    auto x = g.input("x", {sg::dim::batch, sg::dim::model}, sg::dtype::f64);
    g.push_scope("h");
    auto y = sg::apply<cuda_only>({x}, 0.0, "h.act");
    sg::output(y, "y");
    return g.finish();
  }());
  std::string message;
  try {
    sg::threads::world(1).run([&](sg::threads::communicator& comm) {
      sg::model_sizes s;
      s.set(sg::size_symbol::batch, 2).set(sg::size_symbol::model, 3);
      auto rank = sg::bind(p, s, comm, sg::cpu::backend{}, sg::mesh_shape{}, sg::random_weights());
    });
  } catch (const sg::error& e) {
    message = e.what();
  }
  CHECK(message ==
        "shardgraph: bind: op 'cuda_only' (node 'h.act') has no kernel for backend 'cpu'. add {\"cpu\", &fn} to "
        "cuda_only::kernels");
}

TEST_CASE("custom ops: a kernel reading a tensor as another element type fails naming both", "[runtime]") {
  float values[3] = {1, 2, 3};
  const std::int64_t shape[1] = {3};
  const sg::custom_tensor t{values, sg::dtype::f32, shape};
  CHECK(t.numel() == 3);
  CHECK(t.values<const float>()[2] == 3.0f);
  std::string message;
  try {
    (void)t.values<double>();
  } catch (const sg::error& e) {
    message = e.what();
  }
  CHECK(message.find("custom op kernel: a tensor of dtype f32 was read as f64") != std::string::npos);
}
