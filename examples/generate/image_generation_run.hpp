#pragma once
// generate DIR --image FILE: a LLaVA checkpoint (LlavaForConditionalGeneration) continues one
// prompt that opens with the image, on tp thread ranks (generate/image_generation.hpp).
//
// The image is read (PNG, JPEG, ...: examples/common/image_file.hpp) and preprocessed as DIR's
// preprocessor_config.json says (CLIP's resize, crop and normalization); the prompt is the image's
// image_seq_length tokens (config.json's image_token_index), then the text's ids (--prompt through
// DIR/tokenizer.json, or --prompt-ids). The tokens stream as they come.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/generate/image_generation.hpp>
#include <shardgraph/generate/llm_options.hpp>
#include <shardgraph/generate/token_codec.hpp>
#include <shardgraph/io/clip_image_processor.hpp>
#include <shardgraph/io/hf_eos_tokens.hpp>
#include <shardgraph/io/hf_llava.hpp>
#include <shardgraph/models/llama.hpp>
#include <shardgraph/models/llava.hpp>
#include <shardgraph/passes/compile.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/threads.hpp>

#include "../common/image_file.hpp"

struct image_generation_run {
  std::string directory, image;
  shardgraph::mesh_shape mesh;
  shardgraph::dtype type = shardgraph::dtype::f32;
  shardgraph::generate::llm_prompt prompt;
  shardgraph::generate::generation_params params;
  std::shared_ptr<const shardgraph::generate::token_codec> codec;  // null: --prompt-ids only
};

namespace image_generation_detail {

namespace sg = shardgraph;
using Mesh = sg::mesh<"dp", "tp">;

// The text's ids: a text prompt through the tokenizer, or the ids given.
inline std::vector<sg::generate::token_id> text_ids(const image_generation_run& r) {
  if (const auto* ids = std::get_if<std::vector<sg::generate::token_id>>(&r.prompt)) return *ids;
  if (!r.codec)
    sg::fail("generate --image: " + r.directory, "has no tokenizer.json for the text prompt",
             "give the prompt's ids with --prompt-ids, or a checkpoint with its tokenizer.json");
  return r.codec->encode(std::get<std::string>(r.prompt));
}

// The decoder's positions and the ids that end a sequence: text_config's, where HF's LLaVA keeps them.
inline std::int64_t text_positions(const sg::io::json::value& config, const std::string& path) {
  const sg::io::json::value* text = config.find("text_config");
  const sg::io::json::value* p = text ? text->find("max_position_embeddings") : nullptr;
  if (p == nullptr || p->type() != sg::io::json::kind::integer)
    sg::fail(path + ": text_config", "has no integer max_position_embeddings",
             "give a LLaVA config.json as save_pretrained writes it");
  return p->as_int();
}
inline std::vector<sg::generate::token_id> eos_tokens(const std::string& directory, const sg::io::json::value& config) {
  std::vector<sg::generate::token_id> eos = sg::io::hf_eos_tokens(directory);
  const sg::io::json::value* text = config.find("text_config");
  const sg::io::json::value* id = text ? text->find("eos_token_id") : nullptr;
  if (eos.empty() && id != nullptr && id->type() == sg::io::json::kind::integer) eos.push_back(id->as_int());
  return eos;
}

}  // namespace image_generation_detail

// Generates and prints; returns the generated ids of the prompt.
inline std::vector<shardgraph::generate::token_id> generate_from_image_file(const image_generation_run& r) {
  namespace sg = shardgraph;
  namespace gen = shardgraph::generate;
  namespace detail = image_generation_detail;
  if (r.mesh.size("pp") != 1 || r.mesh.size("dp") != 1)
    sg::fail("generate --image", "runs one prompt on tp ranks, and the mesh is " + r.mesh.to_string(),
             "give --mesh tp=N");
  const std::string config_path = r.directory + "/config.json";
  const sg::io::json::value json = sg::io::read_json_file(config_path);
  const sg::models::llava_options o = sg::io::hf_llava_options(config_path, json, {.type = r.type});
  sg::models::llava_config config = sg::io::hf_llava_config(config_path, o);
  const std::int64_t tp = r.mesh.size("tp");
  config.text.padded_vocab = (config.text.vocab + tp - 1) / tp * tp;
  const auto prefill = sg::compile_graph(sg::models::llava<detail::Mesh>(o), sg::inference{.kv_cache = true});
  const auto decode = sg::compile_graph(sg::models::llama<detail::Mesh>(sg::models::llava_language_model(o)),
                                        sg::inference{.kv_cache = true});

  const sg::io::clip_image_processor processor =
      sg::io::read_clip_image_processor(r.directory + "/preprocessor_config.json");
  const sg::host_tensor pixels = sg::io::clip_pixel_values({read_image_file(r.image)}, processor, r.type);
  const std::vector<gen::token_id> ids =
      gen::image_prompt(config, detail::text_ids(r), json.at("image_token_index").as_int());
  const sg::host_tensor prompt = sg::host_tensor::from<std::int64_t>({1, static_cast<std::int64_t>(ids.size())}, ids);
  const sg::weight_source weights =
      sg::io::hf_llava_weights(sg::io::safetensors_checkpoint::open(r.directory), o, config.text.vocab);
  std::printf("%s: llava checkpoint, image %s (%lld x %lld pixels in), %zu prompt tokens, on %s\n",
              r.directory.c_str(), r.image.c_str(), static_cast<long long>(pixels.shape()[2]),
              static_cast<long long>(pixels.shape()[3]), ids.size(), r.mesh.to_string().c_str());

  std::vector<gen::token_id> generated;
  sg::threads::world(static_cast<int>(tp)).run([&](sg::threads::communicator& comm) {
    auto bind_rank = [&](gen::image_generation_step step, const sg::model_sizes& sizes) {
      const sg::program_view program =
          step == gen::image_generation_step::prefill ? sg::program_view(prefill) : sg::program_view(decode);
      return sg::bind(program, sizes, comm, sg::cpu::backend{}, r.mesh, weights);
    };
    std::unique_ptr<gen::token_stream> stream = r.codec && comm.rank() == 0 ? r.codec->stream() : nullptr;
    gen::image_generation_options options{.max_new_tokens = r.params.max_new_tokens,
                                          .stop_tokens = r.params.stop_tokens,
                                          .sampling = r.params.sampling,
                                          .max_positions = detail::text_positions(json, config_path)};
    if (!r.params.ignore_eos)
      for (const gen::token_id id : detail::eos_tokens(r.directory, json)) options.stop_tokens.push_back(id);
    if (comm.rank() == 0)
      options.on_token = [&](std::int64_t, gen::token_id id) {
        if (stream)
          std::fputs(stream->step(id).c_str(), stdout);
        else
          std::printf("%lld ", static_cast<long long>(id));
        std::fflush(stdout);
      };
    const auto results = gen::generate_from_image(config, bind_rank, pixels, prompt, options);
    if (comm.rank() == 0) generated = results.at(0).generated;
  });
  std::printf("\n");
  return generated;
}
