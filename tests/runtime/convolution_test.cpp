// The convolutions (dsl/convolution.hpp) in tiny models: the patch embedding and two conv1d layers
// give what a direct convolution loop gives (torch's Conv2d and Conv1d formulas), and train one
// step on dp=2 x tp=2 thread ranks as on one rank (f64: loss and every gradient within 1e-9). The
// layout shards the batch on dp and the convolutions' output channels on tp (the second conv1d row
// parallel), and the gradients pass through unpatchify and fold1d.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/dsl/convolution.hpp>
#include <shardgraph/passes/compile.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "support/whole_gradients.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
using test_support::gradient_map;

constexpr std::int64_t n_batch = 2, n_model = 4, n_vocab = 5;
// the patch embedding: rgb (2) -> channels (3) pixels, 8 x 8 images in 4 x 4 patches
constexpr std::int64_t n_rgb = 2, n_channels = 3, n_image = 8, n_patch = 4, n_patches = 4, n_features = 48;
// the conv1d layers: mel (2) channels of 6 samples -> 6 samples (stride 1) -> 3 frames (stride 2)
constexpr std::int64_t n_mel = 2, n_samples = 6, n_frames = 3, n_kernel = 3;

constexpr sg::extent image = sg::dim::named<"image">, patches = sg::dim::named<"patches">;
constexpr sg::extent mel = sg::dim::named<"mel">, samples = sg::dim::named<"samples">;
constexpr sg::extent frames = sg::dim::named<"frames">, kernel = sg::dim::fixed<3>;

sg::model_sizes sizes() {
  sg::model_sizes s;
  s.set(sg::size_symbol::batch, n_batch)
      .set(sg::size_symbol::model, n_model)
      .set(sg::size_symbol::vocab, n_vocab);
  s.set("rgb", n_rgb).set("channels", n_channels).set("image", n_image).set("patch", n_patch);
  s.set("patches", n_patches).set("patch_features", n_features);
  s.set("mel", n_mel).set("samples", n_samples).set("frames", n_frames);
  return s;
}

std::vector<double> sine(std::int64_t n, double step) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(step * static_cast<double>(i) + 0.3);
  return v;
}
std::vector<std::int64_t> targets(std::int64_t n) {
  std::vector<std::int64_t> t(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int64_t>((i * 3 + 1) % n_vocab);
  return t;
}

// pixels (batch, image, image, rgb) -> linear to channels, permuted to images (batch, channels,
// image, image) -> patch_embedding (tp-sharded hidden) -> gelu -> head -> the loss over the patches.
constexpr sg::graph patch_model() {
  using namespace sg::dim;
  sg::builder<Mesh> g(sg::dtype::f64);
  const sg::extent rgb = named<"rgb">, channels = named<"channels">, features = named<"patch_features">;
  auto pixels = g.input("pixels", {batch, image, image, rgb}, sg::dtype::f64, sg::on<"dp">(sg::shard<0>));
  auto labels = g.input("targets", {batch, patches}, sg::dtype::i64, sg::on<"dp">(sg::shard<0>));
  auto images = sg::permute(sg::linear(pixels, g.param("color", {rgb, channels})), {0, 3, 1, 2});
  auto weight = g.param("patch.weight", {model, features}, sg::on<"tp">(sg::shard<0>));
  auto bias = g.param("patch.bias", {model}, sg::on<"tp">(sg::shard<0>));
  auto embedded = sg::patch_embedding(images, weight, bias, {.patch = named<"patch">, .patches = patches});
  sg::output(images, "images");
  sg::output(embedded, "embedded");
  sg::output(sg::cross_entropy(sg::linear(sg::gelu(embedded), g.param("head", {model, vocab})), labels),
             "loss");
  return g.finish();
}
constexpr sg::program patch_program = sg::compile<patch_model, sg::training{}>();
static_assert(patch_program.count(sg::op::patchify) == 1 && patch_program.count(sg::op::unpatchify) == 1);

// Whisper's front end: x (batch, mel, samples) -> conv1d (kernel 3, padding 1, column parallel) ->
// gelu -> conv1d (stride 2, row parallel: a Partial product, all-reduced) -> (batch, frames, model)
// -> head -> the loss over the frames. The first conv1d reads an input: it needs no fold1d.
constexpr sg::graph conv1d_model() {
  using namespace sg::dim;
  sg::builder<Mesh> g(sg::dtype::f64);
  auto x = g.input("x", {batch, mel, samples}, sg::dtype::f64, sg::on<"dp">(sg::shard<0>));
  auto labels = g.input("targets", {batch, frames}, sg::dtype::i64, sg::on<"dp">(sg::shard<0>));
  auto w1 = g.param("conv1.weight", {model, mel * kernel}, sg::on<"tp">(sg::shard<0>));
  auto b1 = g.param("conv1.bias", {model}, sg::on<"tp">(sg::shard<0>));
  auto w2 = g.param("conv2.weight", {model, model * kernel}, sg::on<"tp">(sg::shard<1>));
  auto b2 = g.param("conv2.bias", {model});
  auto first = sg::conv1d(x, w1, b1, {.kernel = kernel, .length_out = samples, .stride = 1, .padding = 1});
  auto second = sg::conv1d(sg::gelu(first), w2, b2,
                           {.kernel = kernel, .length_out = frames, .stride = 2, .padding = 1});
  sg::output(first, "first");
  sg::output(second, "second");
  auto logits = sg::linear(sg::transpose(second, 1, 2), g.param("head", {model, vocab}));
  sg::output(sg::cross_entropy(logits, labels), "loss");
  return g.finish();
}
constexpr sg::program conv1d_program = sg::compile<conv1d_model, sg::training{}>();
static_assert(conv1d_program.count(sg::op::unfold1d) == 2 && conv1d_program.count(sg::op::fold1d) == 1);

sg::tensor_map patch_inputs() {
  sg::tensor_map m;
  m.emplace("pixels", sg::host_tensor::from<double>({n_batch, n_image, n_image, n_rgb},
                                                    sine(n_batch * n_image * n_image * n_rgb, 0.43)));
  m.emplace("targets",
            sg::host_tensor::from<std::int64_t>({n_batch, n_patches}, targets(n_batch * n_patches)));
  return m;
}
sg::tensor_map conv1d_inputs() {
  sg::tensor_map m;
  m.emplace("x", sg::host_tensor::from<double>({n_batch, n_mel, n_samples},
                                               sine(n_batch * n_mel * n_samples, 0.71)));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({n_batch, n_frames}, targets(n_batch * n_frames)));
  return m;
}

const sg::weight_source weights = sg::random_weights(5, 0.7);

// A whole parameter's values as `weights` gives them.
std::vector<double> whole(std::string_view name, std::vector<std::int64_t> shape) {
  sg::host_tensor t(sg::dtype::f64, shape);
  weights(name, {.global = shape, .offset = std::vector<std::int64_t>(shape.size(), 0), .count = shape}, t);
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = t.at(static_cast<std::int64_t>(i));
  return v;
}
std::vector<double> values(const sg::host_tensor& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = t.at(static_cast<std::int64_t>(i));
  return v;
}

// torch's Conv2d(kernel = stride = patch) then flatten(2).transpose(1, 2): x (batch, channels, image,
// image), w (hidden, channels, patch, patch) -> (batch, patches, hidden), one sum per output.
std::vector<double> direct_patch_convolution(const std::vector<double>& x, const std::vector<double>& w,
                                             const std::vector<double>& b) {
  const std::int64_t grid = n_image / n_patch;
  std::vector<double> y;
  for (std::int64_t n = 0; n < n_batch; ++n)
    for (std::int64_t i = 0; i < grid; ++i)
      for (std::int64_t j = 0; j < grid; ++j)
        for (std::int64_t o = 0; o < n_model; ++o) {
          double sum = b[std::size_t(o)];
          for (std::int64_t c = 0; c < n_channels; ++c)
            for (std::int64_t r = 0; r < n_patch; ++r)
              for (std::int64_t s = 0; s < n_patch; ++s)
                sum += w[std::size_t(((o * n_channels + c) * n_patch + r) * n_patch + s)] *
                       x[std::size_t(((n * n_channels + c) * n_image + i * n_patch + r) * n_image +
                                     j * n_patch + s)];
          y.push_back(sum);
        }
  return y;
}

// torch's conv1d: out[b][o][t] = bias[o] + sum over c, k of w[o][c][k] x[b][c][t stride - padding + k]
// (0 outside x); x (batch, in, length), w (out, in, kernel) -> (batch, out, length_out).
std::vector<double> direct_conv1d(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>& b, std::int64_t in, std::int64_t length,
                                  std::int64_t length_out, std::int64_t stride) {
  const std::int64_t padding = 1;
  std::vector<double> y;
  for (std::int64_t n = 0; n < n_batch; ++n)
    for (std::int64_t o = 0; o < n_model; ++o)
      for (std::int64_t t = 0; t < length_out; ++t) {
        double sum = b[std::size_t(o)];
        for (std::int64_t c = 0; c < in; ++c)
          for (std::int64_t k = 0; k < n_kernel; ++k) {
            const std::int64_t l = t * stride - padding + k;
            if (l >= 0 && l < length)
              sum += w[std::size_t((o * in + c) * n_kernel + k)] * x[std::size_t((n * in + c) * length + l)];
          }
        y.push_back(sum);
      }
  return y;
}

double largest_difference(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// Rank 0's outputs of one forward step of p on `mesh`.
sg::tensor_map forward_outputs(const sg::program& p, const sg::mesh_shape& mesh,
                               const sg::tensor_map& inputs) {
  sg::tensor_map outputs;
  sg::threads::world(mesh.world_size(p.nodes.axes)).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, sizes(), comm, sg::cpu::backend{}, mesh, weights);
    auto out = rank.forward(inputs);
    if (comm.rank() == 0) outputs = out;
  });
  return outputs;
}

// One training step of p on one rank and on dp=2 x tp=2: the same loss and gradients.
void check_equal_to_one_rank(const sg::program& p, const sg::tensor_map& inputs, std::size_t parameters) {
  double reference_loss = 0, loss = 0;
  const gradient_map reference =
      test_support::whole_gradients(p, sizes(), {{"dp", 1}, {"tp", 1}}, weights, inputs, &reference_loss);
  REQUIRE(reference.size() == parameters);
  const gradient_map got =
      test_support::whole_gradients(p, sizes(), {{"dp", 2}, {"tp", 2}}, weights, inputs, &loss);
  CHECK(std::isfinite(reference_loss));
  CHECK(std::abs(loss - reference_loss) <= 1e-12 * std::abs(reference_loss));
  test_support::check_same_gradients(got, reference, 1e-9);
}

}  // namespace

TEST_CASE("patch_embedding equals a direct Conv2d loop, on one rank and on dp=2 x tp=2",
          "[runtime][threads]") {
  for (const sg::mesh_shape& mesh :
       {sg::mesh_shape{{"dp", 1}, {"tp", 1}}, sg::mesh_shape{{"dp", 2}, {"tp", 2}}}) {
    const sg::tensor_map out = forward_outputs(patch_program, mesh, patch_inputs());
    const std::vector<double> want =
        direct_patch_convolution(values(out.at("images")), whole("patch.weight", {n_model, n_features}),
                                 whole("patch.bias", {n_model}));
    CHECK(largest_difference(values(out.at("embedded")), want) <= 1e-12);
  }
}

TEST_CASE("patch_embedding trains on dp=2 x tp=2 as on one rank", "[runtime][threads]") {
  check_equal_to_one_rank(patch_program, patch_inputs(), 4);
}

TEST_CASE("conv1d equals torch's conv1d formula, stride 1 and 2, on one rank and on dp=2 x tp=2",
          "[runtime][threads]") {
  const std::vector<double> x = values(conv1d_inputs().at("x"));
  for (const sg::mesh_shape& mesh :
       {sg::mesh_shape{{"dp", 1}, {"tp", 1}}, sg::mesh_shape{{"dp", 2}, {"tp", 2}}}) {
    const sg::tensor_map out = forward_outputs(conv1d_program, mesh, conv1d_inputs());
    const std::vector<double> first = values(out.at("first"));
    CHECK(largest_difference(
              first, direct_conv1d(x, whole("conv1.weight", {n_model, n_mel * n_kernel}),
                                   whole("conv1.bias", {n_model}), n_mel, n_samples, n_samples, 1)) <= 1e-12);
    std::vector<double> activated = first;
    for (double& v : activated)
      v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
    CHECK(largest_difference(
              values(out.at("second")),
              direct_conv1d(activated, whole("conv2.weight", {n_model, n_model * n_kernel}),
                            whole("conv2.bias", {n_model}), n_model, n_samples, n_frames, 2)) <= 1e-12);
  }
}

TEST_CASE("conv1d trains on dp=2 x tp=2 as on one rank", "[runtime][threads]") {
  check_equal_to_one_rank(conv1d_program, conv1d_inputs(), 5);
}

TEST_CASE("bind names a convolution's result dimension of the wrong size", "[runtime][threads]") {
  auto bind_error = [](const sg::program& p, const sg::model_sizes& s) {
    return sg::testing::error_of([&] {
      sg::threads::world(1).run([&](sg::threads::communicator& comm) {
        auto rank = sg::bind(p, s, comm, sg::cpu::backend{}, {{"dp", 1}, {"tp", 1}}, weights);
      });
    });
  };
  sg::model_sizes s = sizes();
  s.set("patches", 5);
  std::string message = bind_error(patch_program, s);
  CHECK(message.find("bind: patchify 'patchify': patches = 5 is not (height / patch) * (width / patch) = "
                     "(8 / 4) * (8 / 4) = 4. size it so: sizes.set(\"patches\", 4)") != std::string::npos);
  s = sizes();
  s.set("patch", 3);
  message = bind_error(patch_program, s);
  CHECK(message.find("height = 8 and width = 8 are not multiples of patch = 3") != std::string::npos);
  s = sizes();
  s.set("frames", 4);
  message = bind_error(conv1d_program, s);
  CHECK(message.find(
            "frames = 4 is not (length + 2 padding - kernel) / stride + 1 = (6 + 2 * 1 - 3) / 2 + 1 = 3") !=
        std::string::npos);
}
