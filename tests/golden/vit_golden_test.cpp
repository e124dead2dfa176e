// Golden data from outside (DESIGN §6.3): HF transformers' ViTForImageClassification in float64
// (tests/golden/vit, made by multimodal_golden.py) against models::vit on one rank and on dp=2 x
// tp=2: the logits, the normalized states, the loss and every parameter gradient, with the
// checkpoint and config read by shardgraph's own readers.
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <shardgraph/io/hf_vit.hpp>
#include <shardgraph/shardgraph.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "support/golden_comparison.hpp"

namespace sg = shardgraph;
using test_support::listed;
using test_support::values_of;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr sg::graph vit_graph() { return sg::models::vit<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::program vit_training = sg::compile<vit_graph, sg::training{}>();

const std::string vit_dir = std::string(SHARDGRAPH_GOLDEN_DIR) + "/vit";

}  // namespace

TEST_CASE("ViT's config.json gives models::vit its sizes and options", "[golden][io]") {
  const sg::models::vit_options options =
      sg::io::hf_vit_options(vit_dir + "/config.json", {.type = sg::dtype::f64});
  CHECK(options.layer_norm_eps == 1e-12);
  CHECK(options.activation == sg::models::vit_activation::gelu_erf);
  CHECK(options.qkv_bias);
  const sg::models::vit_config c = sg::io::hf_vit_config(vit_dir + "/config.json", options);
  CHECK((c.image_size == 8 && c.patch_size == 4 && c.channels == 3 && c.patches() == 4));
  CHECK((c.model == 24 && c.heads == 12 && c.layers == 2 && c.ffn == 24 && c.labels == 7));
  try {
    sg::io::hf_vit_config(vit_dir + "/config.json", {.layer_norm_eps = 1e-5});
    FAIL("no error");
  } catch (const sg::error& e) {
    CHECK(std::string(e.what()).find("layer_norm_eps") != std::string::npos);
  }
  try {
    sg::io::hf_vit_config(vit_dir + "/config.json",
                          {.layer_norm_eps = 1e-12, .activation = sg::models::vit_activation::gelu_tanh});
    FAIL("no error");
  } catch (const sg::error& e) {
    CHECK(std::string(e.what()).find("hidden_act") != std::string::npos);
  }
}

TEST_CASE("models::vit reads every tensor of the checkpoint that the loss reaches, and no other",
          "[golden][io]") {
  const sg::models::vit_options options = sg::io::hf_vit_options(vit_dir + "/config.json");
  const sg::models::vit_config c = sg::io::hf_vit_config(vit_dir + "/config.json", options);
  auto checkpoint = sg::io::safetensors_checkpoint::open(vit_dir);
  const std::vector<sg::io::hf_tensor_spec> expected = sg::io::hf_vit_tensors(c, options);
  // every tensor present, of its shape, and none in the files unread
  sg::io::check_hf_tensors(sg::io::hf_tensors_of(*checkpoint), expected, checkpoint->where(),
                           vit_dir + "/config.json", false);
  // the files' tensors the model leaves out are those HF's loss does not reach (metadata `unused`)
  const sg::io::safetensors_file golden(vit_dir + "/golden.safetensors");
  std::set<std::string> read, with_gradient;
  for (const auto& t : expected) read.insert(t.name);
  std::set<std::string> left_out;
  for (const std::string& name : checkpoint->tensor_names()) {
    if (!read.contains(name)) left_out.insert(name);
    if (golden.contains("grad." + name)) with_gradient.insert(name);
  }
  CHECK(left_out == listed(golden, "unused"));
  CHECK(with_gradient == read);
}

namespace {

// One layout's outputs and parameter gradients, whole (gathered from every rank's slices), by
// their HF names ("grad.vit.layers.0.mlp.fc1.weight").
struct vit_results {
  std::map<std::string, std::vector<double>> outputs, gradients;
};

vit_results run_vit(const sg::models::vit_config& config, const sg::weight_source& weights,
                    const sg::tensor_map& inputs, std::int64_t batch, int dp, int tp) {
  vit_results r;
  std::mutex m;
  sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(vit_training, config.sizes(batch), comm, sg::cpu::backend{},
                         sg::mesh_shape{{"dp", dp}, {"tp", tp}}, weights);
    const sg::tensor_map out = rank.forward(inputs);
    std::lock_guard lock(m);
    for (auto& [name, grad] : rank.gradients()) {
      std::vector<double>& whole =
          r.gradients[(name.starts_with("classifier.") ? "grad." : "grad.vit.") + name];
      std::size_t elements = 1;
      for (std::int64_t d : grad.slice.global) elements *= static_cast<std::size_t>(d);
      whole.resize(elements);
      sg::for_each_in_slice(grad.slice, [&](std::int64_t global, std::int64_t local) {
        whole[static_cast<std::size_t>(global)] = grad.values.at(local);
      });
    }
    if (comm.rank() == 0)
      for (const char* name : {"logits", "last_hidden_state", "loss"})
        r.outputs[name] = values_of(out.at(name));
  });
  return r;
}

}  // namespace

TEST_CASE("ViT logits, states, loss and gradients equal HF transformers' ViTForImageClassification",
          "[golden][models][training]") {
  const sg::models::vit_options options =
      sg::io::hf_vit_options(vit_dir + "/config.json", {.type = sg::dtype::f64});
  const sg::models::vit_config config = sg::io::hf_vit_config(vit_dir + "/config.json", options);
  const sg::weight_source weights = sg::io::hf_vit_weights(sg::io::safetensors_checkpoint::open(vit_dir));
  const sg::io::safetensors_file golden(vit_dir + "/golden.safetensors");
  const std::int64_t batch = golden.info("pixel_values").shape.at(0);
  const sg::tensor_map inputs{
      {"pixel_values", sg::host_tensor::from<double>(golden.info("pixel_values").shape,
                                                     golden.read_as<double>("pixel_values"))},
      {"labels", sg::host_tensor::from<std::int64_t>({batch, 1}, golden.read_as<std::int64_t>("labels"))}};

  // HF's eager attention takes its softmax in float32 even in a float64 model (ViT's
  // eager_attention_forward), so one rank agrees with HF to float32 rounding (4e-8 here; an error
  // of layout or convention is of order 1).
  // The class token joins the batch-sharded patches without a collective: the batch is gathered
  // only for the outputs, and nothing on tp but the row-parallel products' sums.
  STATIC_REQUIRE(vit_training.count(sg::op::all_gather, "dp") == 2);
  STATIC_REQUIRE(vit_training.count(sg::op::all_gather, "tp") == 0);
  const vit_results one = run_vit(config, weights, inputs, batch, 1, 1);
  test_support::check_against_golden(one.outputs, one.gradients, golden, 1e-6);

  // dp = 2 x tp = 2 computes what one rank does, to float64 rounding.
  const vit_results sharded = run_vit(config, weights, inputs, batch, 2, 2);
  test_support::check_same(sharded.outputs, one.outputs);
  test_support::check_same(sharded.gradients, one.gradients);
}

namespace {
// LLaVA's vision tower: CLIP's names and options, the states of its second-to-last layer
// (vision_feature_layer -2: two of the checkpoint's three layers, no post_layernorm), in
// dimensions of its own beside the decoder's built-in ones.
constexpr sg::graph clip_tower_graph() {
  sg::models::vit_names names = sg::models::vit_names::hf_clip_vision();
  names.final_norm = "";
  const sg::extent tokens = sg::dim::named<"vision_seq">;
  const sg::models::vit_extents dims{.seq = tokens,
                                     .positions = tokens,
                                     .model = sg::dim::named<"vision_model">,
                                     .heads = sg::dim::named<"vision_heads">,
                                     .head_dim = sg::dim::named<"vision_head_dim">,
                                     .ffn = sg::dim::named<"vision_ffn">};
  const sg::models::vit_options o{.layer_norm_eps = 1e-5, .patch_bias = false, .names = names, .dims = dims};
  sg::builder<Mesh> g(sg::dtype::f64);
  namespace image = sg::models::vit_dims;
  sg::tensor pixels =
      g.input("pixel_values", {sg::dim::batch, image::channels, image::image_size, image::image_size},
              sg::dtype::f64);
  sg::output(sg::models::vision_tower(g, pixels, o), "states");
  return g.finish();
}
}  // namespace

TEST_CASE("the CLIP vision tower is vision_tower with CLIP's names and dimensions of its own",
          "[golden][io]") {
  constexpr sg::graph tower = clip_tower_graph();
  const std::string prefix = "model.vision_tower.";
  std::set<std::string> read;
  int decoder_dimensions = 0;  // dimensions of the tower's values that a LLaMA decoder's use too
  for (int i = 0; i < tower.size(); ++i) {
    for (int k = 0; k < tower[i].shape.rank(); ++k)
      for (sg::extent builtin :
           {sg::dim::seq, sg::dim::model, sg::dim::heads, sg::dim::head_dim, sg::dim::ffn})
        if (tower[i].shape[k].first == builtin.first || tower[i].shape[k].second == builtin.first)
          ++decoder_dimensions;
    if (tower[i].kind == sg::op::parameter)
      for (std::int64_t layer = 0; layer < (tower[i].region >= 0 ? 2 : 1); ++layer)
        read.insert(prefix + sg::parameter_name(tower, tower[i], layer));
  }
  const sg::io::safetensors_file golden(std::string(SHARDGRAPH_GOLDEN_DIR) + "/llava/golden.safetensors");
  const std::set<std::string> unused = listed(golden, "unused");
  auto checkpoint = sg::io::safetensors_checkpoint::open(std::string(SHARDGRAPH_GOLDEN_DIR) + "/llava");
  std::set<std::string> tower_tensors;
  for (const std::string& name : checkpoint->tensor_names())
    if (name.starts_with(prefix)) tower_tensors.insert(name);
  CHECK(decoder_dimensions == 0);
  // the tower reads every tensor LLaVA's loss reaches, and none of those it does not
  std::set<std::string> read_or_unused = read;
  read_or_unused.insert(unused.begin(), unused.end());
  CHECK(read_or_unused == tower_tensors);
  for (const std::string& name : unused) CHECK_FALSE(read.contains(name));
}
