// The convolutions' layouts (dsl/convolution.hpp) in the passes: their shapes, their placement
// signatures (passes/convolution_sharding.hpp), their gradients, and their shape errors, at
// compile time where every size is fixed.
#include <string_view>

#include <shardgraph/dsl/convolution.hpp>

#include "catch.hpp"
#include "test_models.hpp"

namespace sg = shardgraph;
using namespace test_models;

namespace {

constexpr sg::extent channels = sg::dim::named<"channels">, image = sg::dim::named<"image">;
constexpr sg::extent patch = sg::dim::named<"patch">, patches = sg::dim::named<"patches">;
constexpr sg::extent features = sg::dim::named<"patch_features">;
constexpr sg::extent samples = sg::dim::named<"samples">, frames = sg::dim::named<"frames">;

// images (batch, channels, image, image) Shard<0> on dp -> patch_embedding with a weight sharded
// on tp by hidden ("embedded"); and images sharded by channels on tp -> patchify ("by_channel").
constexpr sg::graph patch_layouts() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto images =
      g.input("images", {batch, channels, image, image}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
  auto weight = g.param("w", {model, features}, sg::on<"tp">(sg::shard<0>));
  auto embedded = sg::patch_embedding(images, weight, g.param("b", {model}, sg::on<"tp">(sg::shard<0>)),
                                      {.patch = patch, .patches = patches});
  sg::output(sg::rename(embedded, "embedded"), "a");
  auto by_channel = sg::redistribute(images, sg::on<"tp">(sg::shard<1>));
  sg::output(
      sg::rename(sg::patchify(by_channel, {.patch = patch, .patches = patches}, features), "by_channel"),
      "b");
  auto by_row = sg::redistribute(images, sg::on<"tp">(sg::shard<2>));
  sg::output(sg::rename(sg::patchify(by_row, {.patch = patch, .patches = patches}, features), "by_row"), "c");
  return g.finish();
}

// x (batch, model, samples) Shard<1> on tp -> unfold1d: sharded features; Partial -> unfold1d.
constexpr sg::graph signal_layouts() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, model, samples}, sg::dtype::f32, sg::on<"tp">(sg::shard<1>));
  const sg::conv1d_window window{.kernel = fixed<3>, .length_out = frames, .stride = 2, .padding = 1};
  sg::output(sg::rename(sg::unfold1d(x, window), "windows"), "a");
  auto h = g.input("h", {batch, samples, ffn}, sg::dtype::f32);
  auto partial = sg::linear(h, g.param("w", {ffn, model}, sg::on<"tp">(sg::shard<0>)));  // Partial on tp
  sg::output(sg::rename(sg::unfold1d(sg::transpose(partial, 1, 2), window), "partial"), "b");
  return g.finish();
}

// pixels -> linear -> permute to images -> patch_embedding -> loss: the images need a gradient;
// and x (an input) -> conv1d -> loss: x needs none.
constexpr sg::graph differentiated() {
  using namespace sg::dim;
  sg::builder<Mesh> b;
  auto pixels = b.input("pixels", {batch, image, image, ffn}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
  auto targets = b.input("targets", {batch, patches}, sg::dtype::i64, sg::on<"dp">(sg::shard<0>));
  auto images = sg::permute(sg::linear(pixels, b.param("color", {ffn, channels})), {0, 3, 1, 2});
  auto embedded = sg::patch_embedding(sg::rename(images, "images"), b.param("w", {model, features}),
                                      b.param("b", {model}), {.patch = patch, .patches = patches});
  auto x = b.input("x", {batch, ffn, samples}, sg::dtype::f32);
  const sg::conv1d_window window{.kernel = fixed<3>, .length_out = patches, .padding = 1};
  auto conv = sg::conv1d(x, b.param("conv.w", {model, ffn * fixed<3>}), b.param("conv.b", {model}), window);
  auto logits = sg::linear(embedded + sg::transpose(conv, 1, 2), b.param("head", {model, vocab}));
  sg::output(sg::cross_entropy(logits, targets), "loss");
  return b.finish();
}

// The error of a graph whose only op is made by `op` from x (batch, 3, 8, 8) f32.
template <class Op>
std::string_view patchify_error(Op op) {
  static sg::program p;
  sg::builder<Mesh> b;
  auto x =
      b.input("x", {sg::dim::batch, sg::dim::fixed<3>, sg::dim::fixed<8>, sg::dim::fixed<8>}, sg::dtype::f32);
  sg::output(op(x), "y");
  p = sg::compile_graph(b.finish());
  return p.error();
}

}  // namespace

TEST_CASE("patchify and patch_embedding: batch passes, a tp weight shards hidden, channels shard features",
          "[passes]") {
  static constexpr sg::graph g = sg::passes::propagate_sharding(patch_layouts());
  STATIC_REQUIRE(g.ok());
  constexpr const sg::node& embedded = named(g, "embedded", sg::op::add_bias);
  STATIC_REQUIRE(embedded.shape == sg::shape{sg::dim::batch, patches, sg::dim::model});
  STATIC_REQUIRE(embedded.spec[dp] == sg::shard<0>);
  STATIC_REQUIRE(embedded.spec[tp] == sg::shard<2>);  // hidden, as a column-parallel linear
  constexpr const sg::node& rows = g[g[embedded.inputs[0]].inputs[0]];
  STATIC_REQUIRE(rows.kind == sg::op::patchify);
  STATIC_REQUIRE(rows.shape == sg::shape{sg::dim::batch, patches, features});
  STATIC_REQUIRE(rows.spec[dp] == sg::shard<0>);
  STATIC_REQUIRE(rows.required[0][dp] == sg::shard<0>);  // read as it is: no collective
  constexpr const sg::node& by_channel = named(g, "by_channel", sg::op::patchify);
  STATIC_REQUIRE(by_channel.spec[tp] == sg::shard<2>);  // whole channels per rank: a block of features
  STATIC_REQUIRE(by_channel.required[0][tp] == sg::shard<1>);
  constexpr const sg::node& by_row = named(g, "by_row", sg::op::patchify);
  STATIC_REQUIRE(by_row.required[0][tp] == sg::replicate);  // a patch spans rows: gathered first
  STATIC_REQUIRE(by_row.spec[tp] == sg::replicate);
}

TEST_CASE("unfold1d: sharded channels shard the features, a Partial value stays Partial", "[passes]") {
  static constexpr sg::graph g = sg::passes::propagate_sharding(signal_layouts());
  STATIC_REQUIRE(g.ok());
  constexpr const sg::node& windows = named(g, "windows", sg::op::unfold1d);
  STATIC_REQUIRE(windows.shape == sg::shape{sg::dim::batch, frames, sg::dim::model * sg::dim::fixed<3>});
  STATIC_REQUIRE(windows.stride == 2 && windows.padding == 1);
  STATIC_REQUIRE(windows.spec[tp] == sg::shard<2>);
  STATIC_REQUIRE(windows.required[0][tp] == sg::shard<1>);
  constexpr const sg::node& partial = named(g, "partial", sg::op::unfold1d);
  STATIC_REQUIRE(partial.spec[tp] == sg::partial);  // a layout sums nothing: linear
  STATIC_REQUIRE(partial.required[0][tp] == sg::partial);
}

TEST_CASE("autodiff: unpatchify and fold1d undo the layouts; an input gets neither", "[passes]") {
  static constexpr sg::graph p = sg::passes::propagate_sharding(sg::passes::autodiff(differentiated()));
  STATIC_REQUIRE(p.ok());
  STATIC_REQUIRE(p.count(sg::op::unpatchify) == 1);
  STATIC_REQUIRE(p.count(sg::op::fold1d) == 0);  // x is an input
  constexpr const sg::node& back = named(p, "d.patchify", sg::op::unpatchify);
  STATIC_REQUIRE(back.shape == sg::shape{sg::dim::batch, channels, image, image});
  STATIC_REQUIRE(back.window == patch.first);
  STATIC_REQUIRE(back.spec[dp] == sg::shard<0>);
}

TEST_CASE("fixed sizes are checked when the graph is built", "[passes]") {
  using sg::dim::fixed;
  // (8 / 4) * (8 / 4) = 4 patches of 3 * 4 * 4 = 48 features
  CHECK(patchify_error([](sg::tensor x) {
          return sg::patchify(x, {fixed<4>, fixed<4>}, fixed<48>);
        }).empty());
  CHECK(patchify_error([](sg::tensor x) {
          return sg::patchify(x, {fixed<4>, fixed<5>}, fixed<48>);
        }) ==
        "shardgraph: patchify 'patchify': the patches are not (height / patch) * (width / patch): images "
        "(batch, "
        "3, 8, 8), patch (4). size the result's patches dimension as that product");
  CHECK(patchify_error([](sg::tensor x) {
          return sg::patchify(x, {fixed<3>, fixed<4>}, fixed<27>);
        }).find("the height and width are not multiples of the patch") != std::string_view::npos);
  CHECK(patchify_error([](sg::tensor x) {
          return sg::patchify(x, {fixed<4>, fixed<4>}, fixed<16>);
        }).find("the features are not channels * patch * patch") != std::string_view::npos);
  CHECK(patchify_error([](sg::tensor x) {
          return sg::unfold1d(sg::transpose(x, 0, 1), {.kernel = fixed<3>, .length_out = fixed<4>});
        }).find("expects x (batch, channels, length): x (3, batch, 8, 8)") != std::string_view::npos);
}

TEST_CASE("unfold1d checks length_out, the stride and the padding when they are fixed", "[passes]") {
  using sg::dim::fixed;
  auto error_of = [](sg::conv1d_window w) {
    static sg::program p;
    sg::builder<Mesh> b;
    auto x = b.input("x", {sg::dim::batch, fixed<2>, fixed<10>}, sg::dtype::f32);
    sg::output(sg::unfold1d(x, w), "y");
    p = sg::compile_graph(b.finish());
    return p.error();
  };
  CHECK(error_of({.kernel = fixed<3>, .length_out = fixed<5>, .stride = 2, .padding = 1})
            .empty());  // (10 + 2 - 3) / 2 + 1
  CHECK(error_of({.kernel = fixed<3>, .length_out = fixed<6>, .stride = 2, .padding = 1}) ==
        "shardgraph: unfold1d 'unfold1d': length_out is not (length + 2 padding - kernel) / stride + 1: x "
        "(batch, 2, "
        "10), kernel (3), stride 2, padding 1. size length_out by torch's formula, or pad the length up to "
        "the kernel");
  CHECK(error_of({.kernel = fixed<3>, .length_out = fixed<5>, .stride = 0})
            .find("the stride must be 1 to 127") != std::string_view::npos);
  CHECK(error_of({.kernel = fixed<3>, .length_out = fixed<5>, .padding = 200}).find("the padding 0 to 127") !=
        std::string_view::npos);
}
