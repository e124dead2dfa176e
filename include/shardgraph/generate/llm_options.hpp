#pragma once
// What the llm (generate/llm.hpp) is opened with, and what each generate() request asks for.
//
//   llm_options o{.mesh = mesh_shape::parse("dp=2,tp=2"), .type = dtype::bf16,
//                 .kv_memory = parse_kv_memory("4GiB")};
//   generation_params p{.max_new_tokens = 32, .sampling = {.temperature = 0.8, .top_p = 0.95, .seed = 1}};
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/memory_size.hpp"
#include "shardgraph/generate/sampling_params.hpp"
#include "shardgraph/generate/token_ids.hpp"
#include "shardgraph/mesh/mesh_shape.hpp"

namespace shardgraph::generate {

struct llm_options {
  // dp: independent replicas sharing the requests (replica_assignment.hpp); tp x pp: the ranks of
  // one replica. Axes other than dp, tp and pp are refused.
  mesh_shape mesh{};
  dtype type = dtype::f32;  // the dtype the model computes, and its cache holds, in
  // The KV cache budget: bytes of each rank's cache ("256MiB"), or a share of the memory free
  // when the llm opens ("50%"), divided among the ranks of this process (one cache each, which
  // its bindings share). The weights come on top. The pool is never made larger than
  // max_sequences sequences of the model's positions can use.
  memory_amount kv_memory{.fraction = 0.5};
  std::int64_t block_tokens = 16;
  std::int64_t max_batched_tokens = 512;  // scheduler_options: tokens per step
  std::int64_t max_sequences = 256;       // scheduler_options: sequences running at once
  std::int64_t max_bindings = 8;          // runner_options: (batch, seq) bindings kept per rank
  bool allow_unused_tensors = false;      // hf_model_options
  // Pipeline stages (pp ranks of a replica): the layers of each, as pipeline_options::stage_layers
  // (empty: balanced), and which stages run on the llm's host backend instead of its backend, as a
  // device map's CPU stages do (plan/device_map_stages.hpp); empty: none.
  std::vector<std::int64_t> stage_layers{};
  std::vector<bool> host_stages{};
};

// One request's limits and sampling (vLLM's SamplingParams).
struct generation_params {
  std::int64_t max_new_tokens = 16;
  sampling_params sampling{};           // greedy by default; temperature, top_k, top_p, penalty, seed
  std::vector<token_id> stop_tokens{};  // besides the checkpoint's eos tokens
  bool ignore_eos = false;              // true: do not stop at the eos tokens of the checkpoint
};

// A prompt: text (encoded with the checkpoint's tokenizer.json) or token ids.
using llm_prompt = std::variant<std::string, std::vector<token_id>>;

}  // namespace shardgraph::generate
