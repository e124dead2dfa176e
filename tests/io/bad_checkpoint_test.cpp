// Strict loading (issue 31): a HF checkpoint whose tensors disagree with its config.json is refused,
// naming the file, the tensor, the expected and the found shape and dtype; tensors no parameter
// reads are refused unless allowed. Each bad checkpoint is written here, at test time, from a good
// one with one change.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <shardgraph/io/hf_model.hpp>
#include <shardgraph/io/hf_weights.hpp>
#include <shardgraph/io/safetensors.hpp>
#include <shardgraph/io/sharded_weights.hpp>

#include "catch.hpp"

namespace sg = shardgraph;
using shardgraph::testing::contains;
using shardgraph::testing::error_of;

namespace {

struct fake_tensor {
  std::string name;
  sg::io::st_dtype dtype = sg::io::st_dtype::f32;
  std::vector<std::int64_t> shape;
};

std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("shardgraph-bad-checkpoint-" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes config.json and model.safetensors (values 0.25) into a fresh directory `name`.
std::string write_checkpoint(const std::string& name, const std::string& config,
                             const std::vector<fake_tensor>& tensors) {
  const auto dir = scratch(name);
  std::ofstream(dir / "config.json") << config;
  std::vector<std::vector<std::byte>> storage;
  std::vector<sg::io::tensor_to_write> to_write;
  for (const fake_tensor& t : tensors) {
    std::int64_t n = 1;
    for (const std::int64_t d : t.shape) n *= d;
    std::vector<std::byte> bytes(static_cast<std::size_t>(n) * sg::io::st_dtype_size(t.dtype));
    if (t.dtype == sg::io::st_dtype::f32)
      for (std::size_t i = 0; i < bytes.size(); i += 4) {
        const float v = 0.25f;
        std::memcpy(bytes.data() + i, &v, 4);
      }
    storage.push_back(std::move(bytes));
    to_write.push_back({t.name, t.dtype, t.shape, storage.back()});
  }
  sg::io::write_safetensors((dir / "model.safetensors").string(), to_write);
  return dir.string();
}

std::string gpt2_config(std::int64_t layers) {
  return R"({"model_type": "gpt2", "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
             "n_embd": 8, "n_head": 2, "n_inner": null, "n_layer": )" +
         std::to_string(layers) + R"(, "n_positions": 6, "vocab_size": 11, "tie_word_embeddings": true})";
}

// The tensors of a good GPT2LMHeadModel checkpoint of gpt2_config(layers), written out by hand.
std::vector<fake_tensor> gpt2_tensors(int layers) {
  std::vector<fake_tensor> t{{"transformer.wte.weight", sg::io::st_dtype::f32, {11, 8}},
                             {"transformer.wpe.weight", sg::io::st_dtype::f32, {6, 8}},
                             {"transformer.ln_f.weight", sg::io::st_dtype::f32, {8}},
                             {"transformer.ln_f.bias", sg::io::st_dtype::f32, {8}}};
  for (int l = 0; l < layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    for (const char* norm : {"ln_1.", "ln_2."})
      for (const char* kind : {"weight", "bias"}) t.push_back({p + norm + kind, sg::io::st_dtype::f32, {8}});
    t.push_back({p + "attn.c_attn.weight", sg::io::st_dtype::f32, {8, 24}});
    t.push_back({p + "attn.c_attn.bias", sg::io::st_dtype::f32, {24}});
    t.push_back({p + "attn.c_proj.weight", sg::io::st_dtype::f32, {8, 8}});
    t.push_back({p + "attn.c_proj.bias", sg::io::st_dtype::f32, {8}});
    t.push_back({p + "mlp.c_fc.weight", sg::io::st_dtype::f32, {8, 32}});
    t.push_back({p + "mlp.c_fc.bias", sg::io::st_dtype::f32, {32}});
    t.push_back({p + "mlp.c_proj.weight", sg::io::st_dtype::f32, {32, 8}});
    t.push_back({p + "mlp.c_proj.bias", sg::io::st_dtype::f32, {8}});
  }
  return t;
}

std::vector<fake_tensor> with(std::vector<fake_tensor> t, const std::string& name, sg::io::st_dtype dtype,
                              std::vector<std::int64_t> shape) {
  const auto it = std::find_if(t.begin(), t.end(), [&](const fake_tensor& x) { return x.name == name; });
  REQUIRE(it != t.end());
  it->dtype = dtype;
  it->shape = std::move(shape);
  return t;
}

// The error open_hf_model gives for a GPT-2 checkpoint of two layers with `name` changed.
std::string gpt2_error(const std::string& dir_name, const std::string& name, sg::io::st_dtype dtype,
                       std::vector<std::int64_t> shape) {
  const std::string dir =
      write_checkpoint(dir_name, gpt2_config(2), with(gpt2_tensors(2), name, dtype, shape));
  return error_of([&] { sg::io::open_hf_model(dir); });
}

// The parts each mismatch message holds: the file, the tensor, the expected and the found tensor.
void check_mismatch(const std::string& e, const std::string& dir_name, const std::string& tensor,
                    const std::string& expected_shape, const std::string& found) {
  CAPTURE(e);
  const std::string file =
      (std::filesystem::temp_directory_path() / ("shardgraph-bad-checkpoint-" + std::to_string(::getpid())) /
       dir_name / "model.safetensors")
          .string();
  CHECK(e.starts_with("shardgraph: " + file + ": tensor '" + tensor + "': "));
  CHECK(contains(e, "expected a float tensor (F64, F32, BF16 or F16) of shape " + expected_shape));
  CHECK(contains(e, "config.json), found " + found + "."));
}

}  // namespace

TEST_CASE("a good GPT-2 checkpoint opens, and its checks read only headers", "[io][hf]") {
  const std::string dir = write_checkpoint("good", gpt2_config(2), gpt2_tensors(2));
  const sg::io::hf_model m = sg::io::open_hf_model(dir);
  CHECK(m.vocab == 11);
  // GPT-2's causal-mask buffers, which older checkpoints hold, are no weights and not unused
  std::vector<fake_tensor> t = gpt2_tensors(2);
  t.push_back({"transformer.h.0.attn.bias", sg::io::st_dtype::f32, {1, 1, 6, 6}});
  CHECK(sg::io::open_hf_model(write_checkpoint("mask-buffer", gpt2_config(2), t)).vocab == 11);
}

TEST_CASE("a tensor of another shape than config.json implies is refused", "[io][hf]") {
  using sg::io::st_dtype;
  SECTION("fewer rows than vocab_size") {
    check_mismatch(gpt2_error("fewer-rows", "transformer.wte.weight", st_dtype::f32, {10, 8}), "fewer-rows",
                   "transformer.wte.weight", "(11, 8)", "F32 (10, 8)");
  }
  SECTION("fewer rows than n_positions") {
    check_mismatch(gpt2_error("fewer-positions", "transformer.wpe.weight", st_dtype::f32, {4, 8}),
                   "fewer-positions", "transformer.wpe.weight", "(6, 8)", "F32 (4, 8)");
  }
  SECTION("more rows") {
    check_mismatch(gpt2_error("more-rows", "transformer.wte.weight", st_dtype::f32, {12, 8}), "more-rows",
                   "transformer.wte.weight", "(11, 8)", "F32 (12, 8)");
  }
  SECTION("wider") {
    check_mismatch(gpt2_error("wider", "transformer.h.1.attn.c_attn.weight", st_dtype::f32, {8, 30}), "wider",
                   "transformer.h.1.attn.c_attn.weight", "(8, 24)", "F32 (8, 30)");
  }
  SECTION("narrower") {
    check_mismatch(gpt2_error("narrower", "transformer.h.0.mlp.c_fc.weight", st_dtype::f32, {8, 16}),
                   "narrower", "transformer.h.0.mlp.c_fc.weight", "(8, 32)", "F32 (8, 16)");
  }
  SECTION("another rank") {
    check_mismatch(gpt2_error("rank", "transformer.h.0.ln_1.weight", st_dtype::f32, {1, 8}), "rank",
                   "transformer.h.0.ln_1.weight", "(8,)", "F32 (1, 8)");
  }
}

TEST_CASE("an integer or bool tensor where a float is expected is refused", "[io][hf]") {
  using sg::io::st_dtype;
  check_mismatch(gpt2_error("i32", "transformer.wte.weight", st_dtype::i32, {11, 8}), "i32",
                 "transformer.wte.weight", "(11, 8)", "I32 (11, 8)");
  check_mismatch(gpt2_error("bool", "transformer.ln_f.bias", st_dtype::boolean, {8}), "bool",
                 "transformer.ln_f.bias", "(8,)", "BOOL (8,)");
  // every float dtype converts
  for (const st_dtype t : {st_dtype::f64, st_dtype::bf16, st_dtype::f16})
    CHECK(error_of([&] {
            sg::io::open_hf_model(write_checkpoint(
                "float", gpt2_config(2), with(gpt2_tensors(2), "transformer.wte.weight", t, {11, 8})));
          }) == "(no error)");
}

TEST_CASE("a missing tensor, and more layers in config.json than in the files, are refused", "[io][hf]") {
  std::vector<fake_tensor> t = gpt2_tensors(2);
  std::erase_if(t, [](const fake_tensor& x) { return x.name == "transformer.ln_f.bias"; });
  const std::string dir = write_checkpoint("missing", gpt2_config(2), t);
  const std::string e = error_of([&] { sg::io::open_hf_model(dir); });
  CAPTURE(e);
  CHECK(e.starts_with("shardgraph: " + dir + "/model.safetensors: tensor 'transformer.ln_f.bias': "));
  CHECK(contains(e, "expected a float tensor (F64, F32, BF16 or F16) of shape (8,) (from " + dir +
                        "/config.json), found no such tensor."));

  const std::string deeper = write_checkpoint("more-layers", gpt2_config(3), gpt2_tensors(2));
  const std::string m = error_of([&] { sg::io::open_hf_model(deeper); });
  CAPTURE(m);
  CHECK(contains(m, "tensor 'transformer.h.2.ln_1.weight': expected a float tensor"));
  CHECK(contains(m, "found no such tensor"));

  // 2^62 layers are refused by the config's size check, naming the field, before any tensor list
  const std::string huge =
      write_checkpoint("huge-layer-count", gpt2_config(std::int64_t{1} << 62), gpt2_tensors(2));
  const std::string h = error_of([&] { sg::io::open_hf_model(huge); });
  CAPTURE(h);
  CHECK(contains(h, "/config.json: n_layer: 4611686018427387904 is larger than any model's"));
}

TEST_CASE("tensors no parameter reads are refused unless allowed", "[io][hf]") {
  SECTION("fewer layers in config.json than in the files") {
    const std::string dir = write_checkpoint("fewer-layers", gpt2_config(1), gpt2_tensors(2));
    const std::string e = error_of([&] { sg::io::open_hf_model(dir); });
    CAPTURE(e);
    CHECK(e.starts_with("shardgraph: " + dir +
                        "/model.safetensors: 12 unused tensors (read by no parameter "
                        "of the model that " +
                        dir + "/config.json describes): "));
    CHECK(contains(e, "'transformer.h.1.attn.c_attn.bias', 'transformer.h.1.attn.c_attn.weight', "));
    CHECK(contains(e, " and 7 more. "));
    CHECK(contains(e, "--allow-unused-tensors"));
    const sg::io::hf_model m = sg::io::open_hf_model(dir, {.allow_unused_tensors = true});
    CHECK(m.vocab == 11);
  }
  SECTION("an unknown tensor") {
    std::vector<fake_tensor> t = gpt2_tensors(2);
    t.push_back({"transformer.extra.weight", sg::io::st_dtype::f32, {3}});
    const std::string dir = write_checkpoint("unknown", gpt2_config(2), t);
    const std::string e = error_of([&] { sg::io::open_hf_model(dir); });
    CAPTURE(e);
    CHECK(contains(e, "/model.safetensors: 1 unused tensor (read by no parameter"));
    CHECK(contains(e, "describes): 'transformer.extra.weight'. give the config.json of this checkpoint"));
    CHECK(sg::io::open_hf_model(dir, {.allow_unused_tensors = true}).vocab == 11);
  }
}

TEST_CASE("LLaMA checkpoints are held to their config.json", "[io][hf]") {
  const std::string config = R"({"model_type": "llama", "hidden_act": "silu", "hidden_size": 8,
      "intermediate_size": 12, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1,
      "vocab_size": 7, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "max_position_embeddings": 16})";
  using sg::io::st_dtype;
  const std::string p = "model.layers.0.";
  const std::vector<fake_tensor> good{{"model.embed_tokens.weight", st_dtype::f32, {7, 8}},
                                      {p + "input_layernorm.weight", st_dtype::f32, {8}},
                                      {p + "self_attn.q_proj.weight", st_dtype::f32, {8, 8}},
                                      {p + "self_attn.k_proj.weight", st_dtype::f32, {4, 8}},
                                      {p + "self_attn.v_proj.weight", st_dtype::f32, {4, 8}},
                                      {p + "self_attn.o_proj.weight", st_dtype::f32, {8, 8}},
                                      {p + "post_attention_layernorm.weight", st_dtype::f32, {8}},
                                      {p + "mlp.gate_proj.weight", st_dtype::f32, {12, 8}},
                                      {p + "mlp.up_proj.weight", st_dtype::f32, {12, 8}},
                                      {p + "mlp.down_proj.weight", st_dtype::f32, {8, 12}},
                                      {"model.norm.weight", st_dtype::f32, {8}},
                                      {"lm_head.weight", st_dtype::f32, {7, 8}}};
  CHECK(sg::io::open_hf_model(write_checkpoint("llama-good", config, good)).family == "llama");
  check_mismatch(error_of([&] {
                   sg::io::open_hf_model(write_checkpoint(
                       "llama-head", config, with(good, "lm_head.weight", st_dtype::f32, {6, 8})));
                 }),
                 "llama-head", "lm_head.weight", "(7, 8)", "F32 (6, 8)");
  check_mismatch(error_of([&] {
                   sg::io::open_hf_model(write_checkpoint(
                       "llama-kv", config, with(good, p + "self_attn.k_proj.weight", st_dtype::i32, {4, 8})));
                 }),
                 "llama-kv", p + "self_attn.k_proj.weight", "(4, 8)", "I32 (4, 8)");
}

TEST_CASE("the weight sources read only tensors of the model's shape and a float dtype", "[io][hf]") {
  // Without open_hf_model's check: hf_gpt2_weights over the file itself, asked for one slice.
  using sg::io::st_dtype;
  const auto read = [](const std::string& dir, std::int64_t vocab, std::vector<std::int64_t> global) {
    auto file = std::make_shared<const sg::io::safetensors_file>(dir + "/model.safetensors");
    const sg::weight_source source = sg::io::hf_gpt2_weights(file, 8, nullptr, vocab);
    const sg::tensor_slice slice{global, {0, 0}, global};
    sg::host_tensor out(sg::dtype::f32, global);
    source("wte.weight", slice, out);
    return out;
  };
  const std::string good = write_checkpoint("source-good", gpt2_config(2), gpt2_tensors(2));
  // a model padding the vocabulary (11 -> 12 rows): the config's 11 rows, then zeros
  const sg::host_tensor padded = read(good, 11, {12, 8});
  CHECK(padded.at(10 * 8) == 0.25);
  CHECK(padded.at(11 * 8) == 0.0);
  const std::string e = error_of([&] { read(good, 0, {12, 8}); });  // no padding said: 11 rows are too few
  CHECK(contains(e,
                 "model.safetensors: tensor 'transformer.wte.weight': expected a float tensor (F64, F32, "
                 "BF16 or F16) of shape (12, 8) (from the model's parameter), found F32 (11, 8)."));
  const std::string wide = write_checkpoint(
      "source-wide", gpt2_config(2), with(gpt2_tensors(2), "transformer.wte.weight", st_dtype::f32, {11, 9}));
  CHECK(contains(error_of([&] {
                   read(wide, 11, {12, 8});
                 }),
                 "of shape (11, 8) (from the model's parameter), found F32 (11, 9)."));
  const std::string ints = write_checkpoint(
      "source-i32", gpt2_config(2), with(gpt2_tensors(2), "transformer.wte.weight", st_dtype::i32, {11, 8}));
  CHECK(contains(error_of([&] { read(ints, 11, {11, 8}); }), "found I32 (11, 8)."));
}

namespace {

// A shardgraph checkpoint (as save_weights writes it) of one rank holding one piece of tensor "w":
// the piece's dtype and shape, and its place {"global": [...], "offset": [...]}.
std::string write_sharded(const std::string& name, sg::io::st_dtype dtype, std::vector<std::int64_t> shape,
                          const std::string& place) {
  const auto dir = scratch(name);
  std::ofstream(dir / "shardgraph-checkpoint.json") << R"({"format": "shardgraph-weights-1", "ranks": 1})";
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  const std::vector<std::byte> bytes(static_cast<std::size_t>(n) * sg::io::st_dtype_size(dtype));
  sg::io::write_safetensors((dir / "rank-00000.safetensors").string(), {{"w", dtype, shape, bytes}},
                            {{"format", "shardgraph-weights-1"}, {"slice:w", place}});
  return dir.string();
}

// The error of loading the whole of "w", of shape `global`, from a checkpoint.
std::string sharded_error(const std::string& dir, std::vector<std::int64_t> global) {
  return error_of([&] {
    const sg::weight_source source = sg::io::sharded_weights(dir);
    sg::host_tensor out(sg::dtype::f32, global);
    source("w", {global, std::vector<std::int64_t>(global.size(), 0), global}, out);
  });
}

}  // namespace

TEST_CASE("a shardgraph checkpoint's pieces are held to their metadata and the model", "[io][checkpoint]") {
  using sg::io::st_dtype;
  const std::string place = R"({"global": [2, 3], "offset": [0, 0]})";
  CHECK(sharded_error(write_sharded("sharded-good", st_dtype::f32, {2, 3}, place), {2, 3}) == "(no error)");
  CHECK(sharded_error(write_sharded("sharded-bf16", st_dtype::bf16, {2, 3}, place), {2, 3}) == "(no error)");

  const std::string ints = write_sharded("sharded-i32", st_dtype::i32, {2, 3}, place);
  CHECK(sharded_error(ints, {2, 3}) ==
        "shardgraph: " + ints +
            "/rank-00000.safetensors: tensor 'w': expected a float tensor (F64, F32, BF16 "
            "or F16), found I32 (2, 3). the checkpoint is corrupt; save it again");

  const std::string outside =
      write_sharded("sharded-outside", st_dtype::f32, {2, 3}, R"({"global": [2, 3], "offset": [1, 0]})");
  CHECK(sharded_error(outside, {2, 3}) ==
        "shardgraph: " + outside +
            "/rank-00000.safetensors: tensor 'w': its piece of shape (2, 3) at offset "
            "[1, 0] does not lie within its global shape [2, 3]. the checkpoint is corrupt; save it again");

  const std::string wide =
      write_sharded("sharded-wide", st_dtype::f32, {2, 4}, R"({"global": [2, 3], "offset": [0, 0]})");
  CHECK(contains(sharded_error(wide, {2, 3}),
                 "its piece of shape (2, 4) at offset [0, 0] does not lie within"));

  const std::string good = write_sharded("sharded-shape", st_dtype::f32, {2, 3}, place);
  CHECK(sharded_error(good, {2, 4}) ==
        "shardgraph: " + good +
            ": tensor 'w': was saved with shape [2, 3], the model has [2, 4]. load "
            "the checkpoint into a model of the same sizes");
}
