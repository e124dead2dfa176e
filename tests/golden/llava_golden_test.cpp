// Golden data from outside (DESIGN §6.3): HF transformers' LlavaForConditionalGeneration in
// float64 (tests/golden/llava, made by multimodal_golden.py) against models::llava on one rank and
// on dp=2 x tp=2, with the vision tower replicated and with it on tp: the logits, the projected
// image features, the loss and every parameter gradient, with the checkpoint and config read by
// shardgraph's own readers. The training graph needs more nodes than the default capacity:
// llava() builds with llava_graph_capacity. Generation (generate/image_generation.hpp): each
// prefill and decode step's logits equal the full forward's last position (one rank, tp = 2 and
// dp = 2 x tp = 2), and greedy ids equal HF's generate() (tests/golden/llava/generate.safetensors).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/generate/image_generation.hpp>
#include <shardgraph/io/clip_image_processor.hpp>
#include <shardgraph/io/hf_llava.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/golden_comparison.hpp"

namespace sg = shardgraph;
using test_support::listed;
using test_support::values_of;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr sg::models::llava_options tower_replicated{.type = sg::dtype::f64};
constexpr sg::models::llava_options tower_on_tp = [] {
  sg::models::llava_options o{.type = sg::dtype::f64};
  o.vision.tensor_axis = "tp";
  return o;
}();
// The tower and the projector tensor parallel on an axis of their own: the 2 ranks of "vision_tp"
// share the tower's heads while those of "tp" share the decoder's.
using MeshWithVisionAxis = sg::mesh<"dp", "tp", "vision_tp">;
constexpr sg::models::llava_options tower_on_own_axis = [] {
  sg::models::llava_options o{.type = sg::dtype::f64};
  o.vision.tensor_axis = "vision_tp";
  return o;
}();
constexpr auto llava_graph() { return sg::models::llava<Mesh>(tower_replicated); }
constexpr auto llava_tower_on_tp_graph() { return sg::models::llava<Mesh>(tower_on_tp); }
constexpr auto llava_training = sg::compile<llava_graph, sg::training{}>();
constexpr auto llava_tower_on_tp_training = sg::compile<llava_tower_on_tp_graph, sg::training{}>();
constexpr auto llava_tower_on_own_axis_graph() {
  return sg::models::llava<MeshWithVisionAxis>(tower_on_own_axis);
}
constexpr auto llava_tower_on_own_axis_training =
    sg::compile<llava_tower_on_own_axis_graph, sg::training{}>();

// The collectives on `axis` that read the tower's values: its forward nodes ("encoder.layers.0.mlp.fc2")
// and their gradients ("d.encoder...").
constexpr int tower_collectives_on(const sg::program_view& p, std::string_view axis) {
  const sg::graph_view& g = p.nodes;
  const int on = g.axes.index_of(axis);
  int count = 0;
  for (int i = 0; i < g.size(); ++i) {
    const sg::node& n = g[i];
    const bool collective = n.kind == sg::op::all_reduce || n.kind == sg::op::all_gather ||
                            n.kind == sg::op::reduce_scatter || n.kind == sg::op::all_to_all;
    if (!collective || n.axis != on) continue;
    const std::string_view from = g[n.inputs[0]].name.view();
    if (from.starts_with("encoder.") || from.starts_with("d.encoder.")) ++count;
  }
  return count;
}

const std::string llava_dir = std::string(SHARDGRAPH_GOLDEN_DIR) + "/llava";

// The parameters a graph reads, by the checkpoint's names, with the decoder's `layers` layers.
std::set<std::string> hf_names_read(const sg::graph_view& g, const sg::models::llava_options& o,
                                    std::int64_t layers) {
  std::set<std::string> read;
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == sg::op::parameter)
      for (std::int64_t layer = 0; layer < (g[i].region >= 0 ? layers : 1); ++layer)
        read.insert(sg::io::hf_llava_tensor_name(sg::parameter_name(g, g[i], layer), o));
  return read;
}

}  // namespace

TEST_CASE("LLaVA's config.json gives models::llava its sizes and options", "[golden][io]") {
  const sg::models::llava_options options =
      sg::io::hf_llava_options(llava_dir + "/config.json", {.type = sg::dtype::f64});
  CHECK(options.vision.unrolled_layers == 2);  // vision_feature_layer -2 of 3 layers
  CHECK(options.vision.activation == sg::models::vit_activation::quick_gelu);
  CHECK(options.vision.layer_norm_eps == 1e-5);
  CHECK(options.text.rms_norm_eps == 1e-6);
  CHECK(options.projector_activation == sg::models::vit_activation::gelu_erf);
  CHECK(options.projector_bias);
  const sg::models::llava_config c = sg::io::hf_llava_config(llava_dir + "/config.json", options);
  CHECK((c.vision.image_size == 8 && c.vision.patch_size == 4 && c.vision.channels == 3 &&
         c.image_tokens() == 4));
  CHECK((c.vision.model == 24 && c.vision.heads == 12 && c.vision.layers == 3 && c.vision.ffn == 24));
  CHECK((c.text.vocab == 61 && c.text.model == 48 && c.text.heads == 12 && c.text.kv_heads == 6));
  CHECK((c.text.head_dim == 4 && c.text.ffn == 24 && c.text.layers == 1));
  try {
    c.sizes(2, c.image_tokens());
    FAIL("no error");
  } catch (const sg::error& e) {
    CHECK(std::string(e.what()).find("leaves no text after the 4 image tokens") != std::string::npos);
  }
  // the defaults are this tiny model
  const sg::models::llava_config defaults;
  CHECK((defaults.vision.model == c.vision.model && defaults.text.model == c.text.model));
  CHECK(sg::models::llava_options{}.vision.unrolled_layers == options.vision.unrolled_layers);
}

TEST_CASE("hf_llava refuses by name what models::llava does not model", "[golden][io]") {
  const sg::io::json::value config = sg::io::read_json_file(llava_dir + "/config.json");
  const std::string text = [] {
    std::ifstream in(llava_dir + "/config.json");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }();
  auto refused = [&](const std::string& from, const std::string& to, const std::string& named) {
    std::string changed = text;
    const std::size_t at = changed.find(from);
    REQUIRE(at != std::string::npos);
    changed.replace(at, from.size(), to);
    CAPTURE(to);
    try {
      sg::io::hf_llava_options("config.json", sg::io::json::parse(changed, "config.json"));
      FAIL("no error");
    } catch (const sg::error& e) {
      CHECK(std::string(e.what()).find(named) != std::string::npos);
    }
  };
  refused("\"vision_feature_select_strategy\": \"default\"", "\"vision_feature_select_strategy\": \"full\"",
          "vision_feature_select_strategy");
  refused("\"projector_hidden_act\": \"gelu\"", "\"projector_hidden_act\": \"relu\"", "projector_hidden_act");
  refused("\"hidden_act\": \"quick_gelu\"", "\"hidden_act\": \"relu\"", "hidden_act");
  refused("\"vision_feature_layer\": -2", "\"vision_feature_layer\": [-2, -1]", "vision_feature_layer");
  refused("\"vision_feature_layer\": -2", "\"vision_feature_layer\": -4", "vision_feature_layer");
  CHECK(sg::io::hf_llava_options("config.json", config).vision.unrolled_layers == 2);
  // a program compiled for another feature layer
  sg::models::llava_options three_layers;
  three_layers.vision.unrolled_layers = 3;
  try {
    sg::io::hf_llava_config(llava_dir + "/config.json", three_layers);
    FAIL("no error");
  } catch (const sg::error& e) {
    CHECK(std::string(e.what()).find("vision_feature_layer") != std::string::npos);
  }
}

TEST_CASE("models::llava refuses a tower without its layer count", "[models]") {
  sg::models::llava_options o;
  o.vision.unrolled_layers = 0;
  const auto g = sg::models::llava<Mesh>(o);  // at run time: the diagnostic is the graph's
  CHECK_FALSE(g.ok());
  CHECK(g.error.view().find("llava: vision.unrolled_layers is 0") != std::string_view::npos);
}

TEST_CASE("models::llava reads every tensor of the checkpoint that the loss reaches, and no other",
          "[golden][io]") {
  const sg::models::llava_config c = sg::io::hf_llava_config(llava_dir + "/config.json", tower_replicated);
  const sg::io::safetensors_file golden(llava_dir + "/golden.safetensors");
  auto checkpoint = sg::io::safetensors_checkpoint::open(llava_dir);
  std::set<std::string> in_files, with_gradient;
  for (const std::string& name : checkpoint->tensor_names()) {
    in_files.insert(name);
    if (golden.contains("grad." + name)) with_gradient.insert(name);
  }
  const std::set<std::string> unused = listed(golden, "unused");
  REQUIRE(!unused.empty());
  std::set<std::string> reached;
  std::set_difference(in_files.begin(), in_files.end(), unused.begin(), unused.end(),
                      std::inserter(reached, reached.end()));
  CHECK(with_gradient == reached);
  CHECK(hf_names_read(llava_graph(), tower_replicated, c.text.layers) == reached);
  CHECK(hf_names_read(llava_tower_on_tp_graph(), tower_on_tp, c.text.layers) == reached);
}

namespace {

// One layout's outputs and parameter gradients, whole (gathered from every rank's slices), by the
// checkpoint's names ("grad.model.language_model.layers.0.mlp.up_proj.weight"). A padded
// vocabulary's logits and table rows are cut to the file's `vocab`; `padding` is the largest
// gradient the padded rows got.
struct llava_results {
  test_support::values_by_name outputs, gradients;
  double padding = 0;
};

llava_results run_llava(const sg::program_view& program, const sg::models::llava_options& options,
                        sg::models::llava_config config, const sg::tensor_map& inputs,
                        const sg::mesh_shape& mesh) {
  const std::int64_t vocab = config.text.vocab, tp = mesh.size("tp");
  config.text.padded_vocab = (vocab + tp - 1) / tp * tp;
  const std::vector<std::int64_t>& ids = inputs.at("input_ids").shape();
  const sg::weight_source weights =
      sg::io::hf_llava_weights(sg::io::safetensors_checkpoint::open(llava_dir), options, vocab);
  llava_results r;
  std::mutex m;
  sg::threads::world(mesh.world_size(program.nodes.axes)).run([&](sg::threads::communicator& comm) {
    auto rank =
        sg::bind(program, config.sizes(ids.at(0), ids.at(1)), comm, sg::cpu::backend{}, mesh, weights);
    const sg::tensor_map out = rank.forward(inputs);
    std::lock_guard lock(m);
    for (auto& [name, slice_of_rank] : rank.gradients()) {
      const auto& grad = slice_of_rank;  // a lambda below reads it (no structured binding there)
      std::vector<double>& whole = r.gradients["grad." + sg::io::hf_llava_tensor_name(name, options)];
      const std::int64_t row = grad.slice.global.size() > 1 ? grad.slice.global[1] : 1;
      const bool table = name == "embed_tokens.weight" || name == "lm_head.weight";
      const std::int64_t rows = table ? vocab : grad.slice.global[0];
      whole.resize(static_cast<std::size_t>(rows * row));
      sg::for_each_in_slice(grad.slice, [&](std::int64_t global, std::int64_t local) {
        if (global / row < rows)
          whole[static_cast<std::size_t>(global)] = grad.values.at(local);
        else
          r.padding = std::max(r.padding, std::abs(grad.values.at(local)));
      });
    }
    if (comm.rank() == 0) {
      r.outputs["logits"] = values_of(out.at("logits"), vocab);
      for (const char* name : {"image_features", "loss"}) r.outputs[name] = values_of(out.at(name));
    }
  });
  return r;
}

sg::tensor_map golden_inputs(const sg::io::safetensors_file& golden) {
  const std::vector<std::int64_t> ids = golden.info("input_ids").shape;
  return {{"pixel_values", sg::host_tensor::from<double>(golden.info("pixel_values").shape,
                                                         golden.read_as<double>("pixel_values"))},
          {"input_ids", sg::host_tensor::from<std::int64_t>(ids, golden.read_as<std::int64_t>("input_ids"))},
          {"targets", sg::host_tensor::from<std::int64_t>(ids, golden.read_as<std::int64_t>("targets"))}};
}

}  // namespace

TEST_CASE("LLaVA logits, image features, loss and gradients equal HF transformers'",
          "[golden][models][training]") {
  const sg::models::llava_config config =
      sg::io::hf_llava_config(llava_dir + "/config.json", tower_replicated);
  const sg::io::safetensors_file golden(llava_dir + "/golden.safetensors");
  const sg::tensor_map inputs = golden_inputs(golden);

  // HF computes the attention softmax (CLIP's and LLaMA's eager attention), LLaMA's RMSNorm and its
  // RoPE angles in float32 even in a float64 model: one rank agrees with HF to float32 rounding
  // (at most 6e-7 relative over every tensor here, the tower's q_proj bias in its second layer; an
  // error of layout or convention is of order 1), and is compared to 1e-5 as the LLaMA cases are.
  const llava_results one =
      run_llava(llava_training, tower_replicated, config, inputs, {{"dp", 1}, {"tp", 1}});
  test_support::check_against_golden(one.outputs, one.gradients, golden, 1e-5);

  // Replicated, the tower runs whole on every tp rank; on tp, each of its 2 layers sums its
  // row-parallel out_proj and fc2 (and the backward its column-parallel products' input gradients).
  STATIC_REQUIRE(tower_collectives_on(llava_training, "tp") == 0);
  STATIC_REQUIRE(tower_collectives_on(llava_tower_on_tp_training, "tp") >= 4);
  STATIC_REQUIRE(tower_collectives_on(llava_tower_on_own_axis_training, "tp") == 0);
  STATIC_REQUIRE(tower_collectives_on(llava_tower_on_own_axis_training, "vision_tp") >= 4);

  // dp = 2 x tp = 2 (the vocabulary padded to 62) computes what one rank does, to float64
  // rounding, with the tower and the projector replicated on tp and with them sharded on it.
  for (const bool on_tp : {false, true}) {
    CAPTURE(on_tp);
    const sg::mesh_shape mesh{{"dp", 2}, {"tp", 2}};
    const llava_results sharded =
        on_tp ? run_llava(llava_tower_on_tp_training, tower_on_tp, config, inputs, mesh)
              : run_llava(llava_training, tower_replicated, config, inputs, mesh);
    test_support::check_same(sharded.outputs, one.outputs);
    test_support::check_same(sharded.gradients, one.gradients);
    CHECK(sharded.padding == 0);
  }
  // dp = 1 x tp = 2 x vision_tp = 2: the tower and the projector on an axis of their own.
  const llava_results own_axis = run_llava(llava_tower_on_own_axis_training, tower_on_own_axis, config,
                                           inputs, {{"dp", 1}, {"tp", 2}, {"vision_tp", 2}});
  test_support::check_same(own_axis.outputs, one.outputs);
  test_support::check_same(own_axis.gradients, one.gradients);
}

namespace {

// The generation programs (prefill: the model; decode: its language model) and the forward
// program of the full sequence, compiled at run time.
struct llava_generation_programs {
  sg::models::llava_options options;
  sg::basic_program<sg::models::llava_graph_capacity> prefill, forward;
  sg::program decode;
};

const llava_generation_programs& generation_programs(bool tower_on_tp_axis) {
  static const auto make = [](const sg::models::llava_options& o) {
    return llava_generation_programs{
        .options = o,
        .prefill = sg::compile_graph(sg::models::llava<Mesh>(o), sg::inference{.kv_cache = true}),
        .forward = sg::compile_graph(sg::models::llava<Mesh>(o)),
        .decode = sg::compile_graph(sg::models::llama<Mesh>(sg::models::llava_language_model(o)),
                                    sg::inference{.kv_cache = true})};
  };
  static const llava_generation_programs replicated = make(tower_replicated), on_tp = make(tower_on_tp);
  return tower_on_tp_axis ? on_tp : replicated;
}

// One rank's generation: what it generated and each step's last-position logits, its own and
// those of the full forward (Catch's assertions run on the main thread, after the ranks').
struct image_generation_run {
  std::vector<std::vector<std::int64_t>> generated;  // per row
  std::vector<sg::generate::finish_reason> reasons;  // per row
  std::vector<std::vector<double>> steps, forwards;  // per step: every row's logits
  double worst = 0;  // the largest relative difference of a step's logits from the full forward's
};

// The logits (batch, seq, columns) -> every row's last position's first `vocab`, in row order.
std::vector<double> last_positions(const sg::host_tensor& logits, std::int64_t vocab) {
  std::vector<double> rows;
  for (std::int64_t b = 0; b < logits.shape()[0]; ++b)
    for (double x : sg::generate::detail::last_position_logits(logits, b, vocab)) rows.push_back(x);
  return rows;
}

// The prompt and the first `step` new tokens of every row (which has that many), as input_ids.
sg::host_tensor sequence_at(const sg::host_tensor& prompt,
                            const std::vector<std::vector<std::int64_t>>& generated, std::int64_t step) {
  const std::int64_t batch = prompt.shape()[0], length = prompt.shape()[1];
  std::vector<std::int64_t> ids;
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto* row = reinterpret_cast<const std::int64_t*>(prompt.bytes().data()) + b * length;
    ids.insert(ids.end(), row, row + length);
    const auto& more = generated[static_cast<std::size_t>(b)];
    ids.insert(ids.end(), more.begin(), more.begin() + step);
  }
  return sg::host_tensor::from<std::int64_t>({batch, length + step}, ids);
}

// Greedy generation of `new_tokens` from golden `inputs` on dp x tp ranks, and at every step the
// forward of the whole sequence so far. Rank 0's run, its `worst` over every rank.
image_generation_run generate_from_image(const llava_generation_programs& p, const sg::tensor_map& inputs,
                                         std::int64_t new_tokens, int dp, int tp) {
  sg::models::llava_config config = sg::io::hf_llava_config(llava_dir + "/config.json", p.options);
  config.text.padded_vocab = (config.text.vocab + tp - 1) / tp * tp;
  const sg::mesh_shape mesh{{"dp", dp}, {"tp", tp}};
  const sg::weight_source weights =
      sg::io::hf_llava_weights(sg::io::safetensors_checkpoint::open(llava_dir), p.options, config.text.vocab);
  const sg::host_tensor& prompt = inputs.at("input_ids");
  const std::int64_t batch = prompt.shape()[0], vocab = config.text.vocab;
  std::vector<image_generation_run> runs(static_cast<std::size_t>(dp * tp));
  sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
    image_generation_run& run = runs[static_cast<std::size_t>(comm.rank())];
    auto bind_rank = [&](sg::generate::image_generation_step step, const sg::model_sizes& sizes) {
      const sg::program_view& program =
          step == sg::generate::image_generation_step::prefill ? sg::program_view(p.prefill) : p.decode;
      return sg::bind(program, sizes, comm, sg::cpu::backend{}, mesh, weights);
    };
    const sg::generate::image_generation_options options{
        .max_new_tokens = new_tokens,
        .max_positions = 32,
        .block_tokens = 4,  // the prompt's 12 tokens and the new ones over several blocks
        .data_parallel = dp,
        .on_logits = [&](std::int64_t, const sg::host_tensor& logits) {
          run.steps.push_back(last_positions(logits, vocab));
        }};
    for (const sg::generate::generation_result& r :
         sg::generate::generate_from_image(config, bind_rank, inputs.at("pixel_values"), prompt, options)) {
      run.reasons.push_back(r.reason);
      run.generated.push_back(r.generated);
      if (static_cast<std::int64_t>(r.generated.size()) != new_tokens) return;  // checked below
    }
    for (std::int64_t step = 0; step < new_tokens; ++step) {
      const sg::host_tensor ids = sequence_at(prompt, run.generated, step);
      auto whole =
          sg::bind(p.forward, config.sizes(batch, ids.shape()[1]), comm, sg::cpu::backend{}, mesh, weights);
      const sg::host_tensor targets = sg::host_tensor::from<std::int64_t>(
          ids.shape(), std::vector<std::int64_t>(static_cast<std::size_t>(ids.numel()), 0));
      run.forwards.push_back(last_positions(
          whole
              .forward(
                  {{"pixel_values", inputs.at("pixel_values")}, {"input_ids", ids}, {"targets", targets}})
              .at("logits"),
          vocab));
    }
  });
  double worst = 0;
  for (const image_generation_run& run : runs) {
    REQUIRE(run.generated == runs[0].generated);
    for (sg::generate::finish_reason r : run.reasons) CHECK(r == sg::generate::finish_reason::max_new_tokens);
    REQUIRE(run.steps.size() == std::size_t(new_tokens));
    REQUIRE(run.forwards.size() == std::size_t(new_tokens));
    for (std::size_t step = 0; step < run.steps.size(); ++step)
      worst = std::max(worst, test_support::relative_difference(run.steps[step], run.forwards[step]));
  }
  image_generation_run first = runs[0];
  first.worst = worst;
  return first;
}

std::vector<std::vector<std::int64_t>> rows_of(const sg::io::safetensors_file& f, const std::string& name) {
  const std::vector<std::int64_t> shape = f.info(name).shape;
  const std::vector<std::int64_t> values = f.read_as<std::int64_t>(name);
  std::vector<std::vector<std::int64_t>> rows;
  for (std::int64_t b = 0; b < shape[0]; ++b)
    rows.emplace_back(values.begin() + b * shape[1], values.begin() + (b + 1) * shape[1]);
  return rows;
}

}  // namespace

TEST_CASE("LLaVA generates from an image: each step equals the full forward, the ids HF's generate",
          "[golden][generate][threads]") {
  const sg::io::safetensors_file golden(llava_dir + "/generate.safetensors");
  const sg::tensor_map inputs{
      {"pixel_values", sg::host_tensor::from<double>(golden.info("pixel_values").shape,
                                                     golden.read_as<double>("pixel_values"))},
      {"input_ids", sg::host_tensor::from<std::int64_t>(golden.info("input_ids").shape,
                                                        golden.read_as<std::int64_t>("input_ids"))}};
  const std::vector<std::vector<std::int64_t>> hf = rows_of(golden, "generated");
  const auto new_tokens = static_cast<std::int64_t>(hf.at(0).size());

  // The decode program is the language model's: no tower, no image, no join.
  const llava_generation_programs& programs = generation_programs(false);
  CHECK(programs.prefill.ok());
  CHECK(programs.decode.ok());
  CHECK(programs.prefill.count(sg::op::patchify) == 1);
  CHECK(programs.prefill.count(sg::op::cached_attention) == 1);  // the decoder's; the tower's 2 stay
  CHECK(programs.prefill.count(sg::op::attention) == 2);
  CHECK(programs.decode.count(sg::op::patchify) == 0);
  CHECK(programs.decode.count(sg::op::concat) == 0);
  CHECK(programs.decode.count(sg::op::attention) == 0);
  CHECK(programs.decode.count(sg::op::cached_attention) == 1);

  const image_generation_run one = generate_from_image(programs, inputs, new_tokens, 1, 1);
  CHECK(one.worst < 1e-9);
  CHECK(one.generated == hf);
  for (const bool on_tp : {false, true}) {
    CAPTURE(on_tp);
    const image_generation_run two =
        generate_from_image(generation_programs(on_tp), inputs, new_tokens, 1, 2);
    CHECK(two.worst < 1e-9);
    CHECK(two.generated == hf);
  }
  // dp = 2 x tp = 2: each data-parallel rank holds one row and that row's blocks in its own pool.
  const image_generation_run four = generate_from_image(generation_programs(true), inputs, new_tokens, 2, 2);
  CHECK(four.worst < 1e-9);
  CHECK(four.generated == hf);
}

namespace {

// generate_from_image on one rank with the replicated tower; `streamed` gets on_token's tokens.
std::vector<sg::generate::generation_result> generate_on_one_rank(
    const sg::tensor_map& inputs, sg::generate::image_generation_options options,
    std::vector<std::vector<std::int64_t>>& streamed) {
  const llava_generation_programs& p = generation_programs(false);
  const sg::models::llava_config config = sg::io::hf_llava_config(llava_dir + "/config.json", p.options);
  const sg::weight_source weights =
      sg::io::hf_llava_weights(sg::io::safetensors_checkpoint::open(llava_dir), p.options, config.text.vocab);
  streamed.assign(static_cast<std::size_t>(inputs.at("input_ids").shape()[0]), {});
  options.on_token = [&](std::int64_t row, std::int64_t token) {
    streamed.at(std::size_t(row)).push_back(token);
  };
  std::vector<sg::generate::generation_result> results;
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    auto bind_rank = [&](sg::generate::image_generation_step step, const sg::model_sizes& sizes) {
      const sg::program_view& program =
          step == sg::generate::image_generation_step::prefill ? sg::program_view(p.prefill) : p.decode;
      return sg::bind(program, sizes, comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", 1}, {"tp", 1}},
                      weights);
    };
    results = sg::generate::generate_from_image(config, bind_rank, inputs.at("pixel_values"),
                                                inputs.at("input_ids"), options);
  });
  return results;
}

}  // namespace

TEST_CASE("generate_from_image finishes each row as a scheduler's request, and refuses bad input",
          "[golden][generate][threads]") {
  using sg::generate::finish_reason;
  const sg::io::safetensors_file golden(llava_dir + "/generate.safetensors");
  const sg::host_tensor pixels = sg::host_tensor::from<double>(golden.info("pixel_values").shape,
                                                               golden.read_as<double>("pixel_values"));
  const std::vector<std::int64_t> ids_shape = golden.info("input_ids").shape;
  const std::vector<std::int64_t> ids = golden.read_as<std::int64_t>("input_ids");
  const sg::tensor_map inputs{{"pixel_values", pixels},
                              {"input_ids", sg::host_tensor::from<std::int64_t>(ids_shape, ids)}};
  const std::vector<std::vector<std::int64_t>> hf = rows_of(golden, "generated");
  const auto new_tokens = static_cast<std::int64_t>(hf.at(0).size());
  std::vector<std::vector<std::int64_t>> streamed;

  // A stop token ends its row there (kept, as HF keeps its eos); the other row goes on to max_new_tokens.
  const std::int64_t stop = hf.at(1).at(hf.at(1).size() - 2);
  REQUIRE(std::find(hf.at(0).begin(), hf.at(0).end(), stop) == hf.at(0).end());
  const auto stopped = generate_on_one_rank(
      inputs, {.max_new_tokens = new_tokens, .stop_tokens = {stop}, .max_positions = 32}, streamed);
  REQUIRE(stopped.size() == 2);
  CHECK((stopped[0].id == 0 && stopped[1].id == 1));
  CHECK(stopped[0].reason == finish_reason::max_new_tokens);
  CHECK(stopped[0].generated == hf[0]);
  CHECK(stopped[1].reason == finish_reason::stop_token);
  const auto at_stop = std::find(hf[1].begin(), hf[1].end(), stop) + 1;
  CHECK(stopped[1].generated == std::vector<std::int64_t>(hf[1].begin(), at_stop));
  CHECK((streamed[0] == stopped[0].generated && streamed[1] == stopped[1].generated));

  // The decoder's positions end both rows: 12 prompt tokens + 6 new in 18 positions.
  const auto full =
      generate_on_one_rank(inputs, {.max_new_tokens = new_tokens, .max_positions = 18}, streamed);
  for (std::size_t b = 0; b < 2; ++b) {
    CHECK(full.at(b).reason == finish_reason::max_positions);
    CHECK(full.at(b).generated == std::vector<std::int64_t>(hf[b].begin(), hf[b].begin() + 6));
  }

  // The golden prompts are image_prompt's: 4 image tokens (60), then the text.
  const std::vector<std::int64_t> text(ids.begin() + 4, ids.begin() + 12);
  CHECK(sg::generate::image_prompt(sg::models::llava_config{}, text, 60) ==
        std::vector<std::int64_t>(ids.begin(), ids.begin() + 12));
  CHECK_THROWS_WITH(sg::generate::image_prompt(sg::models::llava_config{}, ids, 60),
                    sg::testing::ContainsSubstring("image_prompt: the text holds the image token 60"));

  auto refused = [&](const sg::tensor_map& in, sg::generate::image_generation_options o,
                     const std::string& why) {
    CAPTURE(why);
    try {
      generate_on_one_rank(in, o, streamed);
      FAIL("no error");
    } catch (const sg::error& e) {
      CHECK(std::string(e.what()).find(why) != std::string::npos);
    }
  };
  refused(inputs, {.max_new_tokens = 0, .max_positions = 32}, "request 0: max_new_tokens is 0, not positive");
  refused(inputs, {.max_new_tokens = 4}, "generate_from_image: max_positions is 0");
  refused(inputs, {.max_new_tokens = 4, .max_positions = 12},
          "leave no room for a new token in the model's 12");
  std::vector<std::int64_t> outside = ids;
  outside.back() = 61;
  refused({{"pixel_values", pixels}, {"input_ids", sg::host_tensor::from<std::int64_t>(ids_shape, outside)}},
          {.max_positions = 32}, "request 1: prompt token 11 is 61, outside the vocabulary [0, 61)");
  const std::vector<std::int64_t> image_only(ids.begin(), ids.begin() + 4);
  refused({{"pixel_values", sg::host_tensor::from<double>({1, 3, 8, 8}, std::vector<double>(192, 0.5))},
           {"input_ids", sg::host_tensor::from<std::int64_t>({1, 4}, image_only)}},
          {.max_positions = 32}, "leaves no text after the 4 image tokens");
  refused({{"pixel_values", pixels},
           {"input_ids", sg::host_tensor::from<std::int64_t>(
                             {1, 12}, std::vector<std::int64_t>(ids.begin(), ids.begin() + 12))}},
          {.max_positions = 32}, "one image per prompt row (1)");
}

// The whole path from an image file (tests/golden/clip_image/image.png, whose pixels stb decodes
// to Pillow's: tests/io/image_file_test.cpp): CLIP's preprocessing to the model's 8 x 8, then
// generation, against CLIPImageProcessorPil and HF's generate (llava/image_file.safetensors).
TEST_CASE("LLaVA generates from an image file's pixels as HF does", "[golden][generate][io]") {
  const sg::io::safetensors_file golden(llava_dir + "/image_file.safetensors");
  const std::string clip_dir = std::string(SHARDGRAPH_GOLDEN_DIR) + "/clip_image";
  const sg::io::safetensors_file clip(clip_dir + "/golden.safetensors");
  sg::io::rgb8_image image{.width = 45, .height = 30, .values = {}};
  for (std::int64_t v : clip.read_as<std::int64_t>("rgb"))
    image.values.push_back(static_cast<std::uint8_t>(v));
  sg::io::clip_image_processor processor =
      sg::io::read_clip_image_processor(clip_dir + "/preprocessor_config.json");
  processor.shortest_edge = processor.crop_height = processor.crop_width = 8;
  const sg::host_tensor pixels = sg::io::clip_pixel_values({image}, processor, sg::dtype::f64);
  CHECK(test_support::relative_difference(values_of(pixels), golden.read_as<double>("pixel_values")) < 1e-5);

  const sg::tensor_map inputs{
      {"pixel_values", pixels},
      {"input_ids", sg::host_tensor::from<std::int64_t>(golden.info("input_ids").shape,
                                                        golden.read_as<std::int64_t>("input_ids"))}};
  std::vector<std::vector<std::int64_t>> streamed;
  const auto results = generate_on_one_rank(inputs, {.max_new_tokens = 16, .max_positions = 32}, streamed);
  CHECK(results.at(0).generated == rows_of(golden, "generated").at(0));
}
