#pragma once
// llm_model: a HF checkpoint opened for generation over a mesh, as llm (llm.hpp) and engine
// (engine.hpp) share it: the model (file headers and compiled programs), its options, the
// tokenizer, each rank's KV cache size, requests checked against them, and the one place a rank
// binds and runs its scheduler (run_rank).
//
//   llm_model<cpu::backend> m(directory, options, codec);   // the factories default to Backend{}
//   llm_output out;
//   std::optional<generation_request> r = m.request_of(prompt, params, 0, out);  // none: out.error
//   World(m.replica_ranks()).run([&](auto& comm) {
//     scheduler s = m.make_scheduler();  s.submit(*r);
//     step_clock clock;
//     auto results = m.run_rank(comm, s, {.on_token = ...}, clock);
//   });
//
// Backend, HostBackend and the factories: as llm.hpp describes them.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/generate/hf_cache_shape.hpp"
#include "shardgraph/generate/kv_cache_size.hpp"
#include "shardgraph/generate/llm_options.hpp"
#include "shardgraph/generate/llm_output.hpp"
#include "shardgraph/generate/runner.hpp"
#include "shardgraph/generate/step_clock.hpp"
#include "shardgraph/generate/token_codec.hpp"
#include "shardgraph/io/hf_model.hpp"
#include "shardgraph/runtime/executor.hpp"
#include "shardgraph/runtime/kv_cache.hpp"
#include "shardgraph/runtime/pipeline_options.hpp"

namespace shardgraph::generate {

template <class Backend, class HostBackend = Backend>
class llm_model {
 public:
  using backend_factory = std::function<Backend(int stage)>;
  using host_backend_factory = std::function<HostBackend(int stage)>;

  // Opens `directory` (open_hf_model) over options.mesh and sizes each rank's KV cache.
  llm_model(
      std::string directory, llm_options options, std::shared_ptr<const token_codec> codec = nullptr,
      backend_factory make_backend = [](int) { return Backend{}; },
      host_backend_factory make_host_backend = [](int) { return HostBackend{}; })
      : directory_(std::move(directory)),
        options_(std::move(options)),
        codec_(std::move(codec)),
        make_backend_(std::move(make_backend)),
        make_host_backend_(std::move(make_host_backend)),
        model_(io::open_hf_model(directory_, {.type = options_.type,
                                              .vocab_multiple = options_.mesh.size("tp"),
                                              .allow_unused_tensors = options_.allow_unused_tensors})) {
    options_.mesh.world_size(model_.generation.nodes.axes);  // only dp, tp and pp
    const auto stages = static_cast<std::size_t>(options_.mesh.size("pp"));
    if (!options_.host_stages.empty() && options_.host_stages.size() != stages)
      fail("llm_options::host_stages",
           std::to_string(options_.host_stages.size()) + " flags for " + std::to_string(stages) +
               " pipeline stages",
           "give one flag per pp stage, or none");
    if (model_.positions < 1)
      fail(directory_ + "/config.json", "has no max_position_embeddings",
           "add the model's context length to config.json");
    cache_ = size_cache();
  }

  const io::hf_model& model() const { return model_; }
  const llm_options& options() const { return options_; }
  const std::string& directory() const { return directory_; }
  const kv_cache_size& kv_cache() const { return cache_; }  // each rank's
  const token_codec* codec() const { return codec_.get(); }
  int replicas() const { return options_.mesh.size("dp"); }
  int replica_ranks() const { return options_.mesh.size("tp") * options_.mesh.size("pp"); }

  // The tokens a request may take in the cache: its prompt and max_new_tokens, at most the
  // model's positions (assign_to_replicas' prediction).
  std::int64_t predicted_tokens(std::int64_t prompt_tokens, const generation_params& p) const {
    return std::min(prompt_tokens + p.max_new_tokens, model_.positions);
  }

  // A scheduler over one rank's cache, with the options' limits.
  scheduler make_scheduler() const {
    return scheduler(cache_, {.vocab_size = model_.vocab,
                              .max_batched_tokens = options_.max_batched_tokens,
                              .max_sequences = options_.max_sequences});
  }

  // The request of a prompt, or none when it fails before reaching a scheduler (its error then in
  // `out`, reason failed). Messages name the caller's `index`. Sets out.prompt_tokens.
  std::optional<generation_request> request_of(const llm_prompt& prompt, const generation_params& p,
                                               std::int64_t index, llm_output& out) const {
    try {
      std::vector<token_id> ids;
      if (const auto* text = std::get_if<std::string>(&prompt)) {
        if (!codec_)
          fail("request " + std::to_string(index), "a text prompt, but " + directory_ + " has no tokenizer",
               "give the prompt as token ids (--prompt-ids), or put the checkpoint's tokenizer.json beside "
               "it");
        ids = codec_->encode(*text);
      } else {
        ids = std::get<std::vector<token_id>>(prompt);
      }
      out.prompt_tokens = static_cast<std::int64_t>(ids.size());
      generation_request r{.prompt = std::move(ids),
                           .max_new_tokens = p.max_new_tokens,
                           .stop_tokens = p.stop_tokens,
                           .sampling = p.sampling};
      if (!p.ignore_eos)
        for (const std::int64_t eos : model_.eos_tokens)
          if (eos >= 0 && eos < model_.vocab) r.stop_tokens.push_back(eos);
      check_request(r, index, {model_.vocab, model_.positions});
      return r;
    } catch (const error& e) {
      out.reason = finish_reason::failed;
      out.error = e.what();
      return std::nullopt;
    }
  }

  // The output's text (none without a tokenizer); an id the tokenizer does not know (a
  // vocabulary padded past the tokenizer's) leaves it empty, with the reason in `error`.
  void decode_text(llm_output& out) const {
    if (!codec_) return;
    try {
      out.text = codec_->decode(out.ids);
    } catch (const error& e) {
      out.error = e.what();
    }
  }

  // The text piece of a request's next token: none without a stream (no tokenizer), and none
  // from an id the tokenizer does not know on.
  static std::string next_piece(std::unique_ptr<token_stream>& stream, token_id token) {
    if (!stream) return {};
    try {
      return stream->step(token);
    } catch (const error&) {
      stream.reset();
      return {};
    }
  }

  // Rank comm.rank() of a replica runs `s` (run_generation) on its stage's backend, reading the
  // weights for its first binding; the binds' time goes to `clock`, whose on_step the caller sets
  // in `options` if it times the steps. max_blocks and max_bindings come from the llm_options.
  template <class Comm>
  std::vector<generation_result> run_rank(Comm& comm, scheduler& s, runner_options options,
                                          step_clock& clock) const {
    options.max_blocks = cache_layout().max_blocks;
    options.max_bindings = options_.max_bindings;
    const auto run_on = [&](const auto& make_backend) {
      auto make_rank = [&](std::int64_t batch, std::int64_t seq, const auto& parameters) {
        const timed_bind timer{clock};
        return bind_rank(comm, make_backend, batch, seq, parameters);
      };
      return run_generation(s, make_rank, model_.weights(std::make_shared<std::atomic<std::uint64_t>>(0)),
                            options);
    };
    return on_host_backend(comm.rank()) ? run_on(make_host_backend_) : run_on(make_backend_);
  }

 private:
  // The one place a rank binds the generation program for (batch, seq), with the cache sizes and
  // `parameters`: the weights read from the checkpoint for a rank's first binding, the first
  // binding's shared parameters (weights and cache) for the others (run_generation). On pipeline
  // stages a call of `batch` rows runs as pipeline_micro_batches micro-batches, so the binding
  // holds one micro-batch's rows.
  template <class Comm, class MakeBackend, class Parameters>
  auto bind_rank(Comm& comm, const MakeBackend& make_backend, std::int64_t batch, std::int64_t seq,
                 const Parameters& parameters) const {
    const int stages = options_.mesh.size("pp");
    model_sizes sizes = model_.sizes(batch / pipeline_micro_batches(batch, stages), seq);
    return shardgraph::bind(model_.generation, set_kv_cache_sizes(sizes, cache_layout()), comm,
                            make_backend(stage_of(comm.rank())), replica_mesh(), parameters,
                            {.stage_layers = options_.stage_layers});
  }

  // Replica rank `rank`'s pipeline stage, and whether that stage runs on the host backend.
  int stage_of(int rank) const {
    const mesh_axes& axes = model_.generation.nodes.axes;
    return replica_mesh().coordinates(axes, rank)[static_cast<std::size_t>(axes.index_of("pp"))];
  }
  bool on_host_backend(int rank) const {
    return !options_.host_stages.empty() && options_.host_stages[static_cast<std::size_t>(stage_of(rank))];
  }

  mesh_shape replica_mesh() const {
    return {{"dp", 1}, {"tp", options_.mesh.size("tp")}, {"pp", options_.mesh.size("pp")}};
  }
  shardgraph::kv_cache_shape cache_layout() const {
    return {.blocks = cache_.blocks,
            .block_tokens = cache_.shape.block_tokens,
            .max_blocks = cache_.shape.blocks_for(cache_.shape.max_positions)};
  }

  // Per rank (hf_cache_shape): the kv heads tp leaves it, the layers of the largest pp stage. A
  // share of free memory is divided among the ranks of the process, each holding one cache (its
  // bindings share it: runner.hpp). The pool is capped at max_sequences sequences of the model's
  // positions.
  kv_cache_size size_cache() const {
    const std::int64_t tp = options_.mesh.size("tp"), pp = options_.mesh.size("pp");
    kv_cache_shape shape = hf_cache_shape(model_, options_.mesh, options_.block_tokens);
    if (!options_.stage_layers.empty())  // the stage holding the most layers
      shape.layers = *std::max_element(options_.stage_layers.begin(), options_.stage_layers.end());
    std::int64_t free_bytes = 0;
    if constexpr (requires(const Backend& b) { b.free_bytes(); })
      if (options_.kv_memory.bytes <= 0)
        free_bytes = static_cast<std::int64_t>(
            std::min<std::size_t>(make_backend_(0).free_bytes(), std::numeric_limits<std::int64_t>::max()) /
            static_cast<std::size_t>(options_.mesh.size("dp") * tp * pp));
    kv_cache_size size = size_kv_cache(shape, options_.kv_memory, free_bytes);
    size.blocks = std::min(size.blocks, options_.max_sequences * shape.blocks_for(shape.max_positions));
    return size;
  }

  // Adds the time from its making to its end (a bind) to the clock's binding time.
  struct timed_bind {
    step_clock& clock;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~timed_bind() {
      clock.add_bind_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  };

  std::string directory_;
  llm_options options_;
  std::shared_ptr<const token_codec> codec_;
  backend_factory make_backend_;
  host_backend_factory make_host_backend_;
  io::hf_model model_;
  kv_cache_size cache_{};
};

}  // namespace shardgraph::generate
