#pragma once
// llm: generate text from a HF checkpoint directory on any mesh, as vLLM's LLM(model,
// tensor_parallel_size=...).generate(prompts, sampling_params) does.
//
//   namespace gen = shardgraph::generate;
//   gen::llm<sg::cpu::backend, sg::threads::world> model(
//       "tinyllama", {.mesh = sg::mesh_shape::parse("dp=2,tp=2"), .kv_memory = gen::parse_kv_memory("1GiB")},
//       sg::text::open_tokenizer_codec("tinyllama"));           // null: token-id prompts only
//   auto outputs = model.generate({"The capital of France is", std::vector<gen::token_id>{1, 450}},
//                                 {.max_new_tokens = 32, .sampling = {.temperature = 0.8, .seed = 7}},
//                                 [](std::int64_t request, gen::token_id id, std::string_view piece) {
//                                   std::cout << piece << std::flush;
//                                 });
//   outputs[0].text, outputs[0].ids, outputs[0].reason, outputs[1].error
//
// Backend: the compute backend of every rank (cpu::backend; a GPU backend for one GPU), made by
// the factory given (default: Backend{}) with the rank's pipeline stage (0 without pp), which is
// called on the rank threads at each bind and once when the llm opens, for stage 0 (free_bytes(),
// for a budget given as a share). HostBackend: the backend
// of the pipeline stages that llm_options::host_stages names (a device map's CPU stages beside
// GPU ones: llm<cuda::backend, threads::world, cpu::backend>); the activations cross between
// stages as between any. World: runs a function on N ranks with a communicator each and joins
// them (threads::world): World(ranks).run(fn).
//
// The mesh's dp replicas run at once, each a World of tp x pp ranks with its own scheduler and
// cache; assign_to_replicas (replica_assignment.hpp) gives each its requests. Every rank of a
// replica runs run_generation (runner.hpp) on the same requests, so their steps and collectives
// meet; the first rank of each replica reports tokens and results. Tokens reach on_token on the
// calling thread (token_funnel.hpp), in order within each request, as soon as their step has run.
//
// A bad request (a text prompt without a tokenizer, a prompt longer than the positions allow, an
// id outside the vocabulary, max_new_tokens <= 0, bad sampling) fails alone: its output carries
// the error and reason failed, and the others go on. A failure of a rank (a bind, a file) throws
// from generate().
//
// Lifetime: the checkpoint (its file headers, the compiled programs, the tokenizer) stays open
// across generate() calls; the rank threads and their bindings (the weights, read once per rank
// and call, and the one cache the bindings share) live for one call. bind_rank is the one place a
// rank binds.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/generate/hf_cache_shape.hpp"
#include "shardgraph/generate/kv_cache_size.hpp"
#include "shardgraph/generate/llm_options.hpp"
#include "shardgraph/generate/llm_output.hpp"
#include "shardgraph/generate/replica_assignment.hpp"
#include "shardgraph/generate/runner.hpp"
#include "shardgraph/generate/step_clock.hpp"
#include "shardgraph/generate/token_codec.hpp"
#include "shardgraph/generate/token_funnel.hpp"
#include "shardgraph/io/hf_model.hpp"
#include "shardgraph/runtime/executor.hpp"
#include "shardgraph/runtime/kv_cache.hpp"
#include "shardgraph/runtime/pipeline_options.hpp"

namespace shardgraph::generate {

// (the prompt's index in generate's list, the token, its text piece: "" without a tokenizer or
// while the token ends inside a character)
using token_callback = std::function<void(std::int64_t request, token_id token, std::string_view piece)>;

template <class Backend, class World, class HostBackend = Backend>
class llm {
 public:
  using backend_factory = std::function<Backend(int stage)>;
  using host_backend_factory = std::function<HostBackend(int stage)>;

  // Opens `directory` (open_hf_model) over options.mesh and sizes each rank's KV cache.
  llm(
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
      fail("llm_options::host_stages", std::to_string(options_.host_stages.size()) + " flags for " +
                                           std::to_string(stages) + " pipeline stages",
           "give one flag per pp stage, or none");
    if (model_.positions < 1)
      fail(directory_ + "/config.json", "has no max_position_embeddings",
           "add the model's context length to config.json");
    cache_ = size_cache();
  }

  const io::hf_model& model() const { return model_; }
  const kv_cache_size& kv_cache() const { return cache_; }  // each rank's
  bool has_tokenizer() const { return codec_ != nullptr; }
  const token_codec* codec() const { return codec_.get(); }
  const generation_stats& last_stats() const { return stats_; }

  std::vector<llm_output> generate(const std::vector<llm_prompt>& prompts,
                                   const generation_params& params = {},
                                   const token_callback& on_token = {}) {
    return generate(prompts, std::vector<generation_params>(prompts.size(), params), on_token);
  }

  // One generation_params per prompt. Returns one output per prompt, in the prompts' order.
  std::vector<llm_output> generate(const std::vector<llm_prompt>& prompts,
                                   const std::vector<generation_params>& params,
                                   const token_callback& on_token) {
    if (params.size() != prompts.size())
      fail("llm::generate",
           std::to_string(params.size()) + " generation_params for " + std::to_string(prompts.size()) +
               " prompts",
           "give one generation_params for all prompts, or one per prompt");
    std::vector<llm_output> outputs(prompts.size());
    std::vector<std::optional<generation_request>> requests;
    std::vector<std::int64_t> predicted, valid;  // predicted tokens of the valid requests
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      requests.push_back(request_of(prompts[i], params[i], static_cast<std::int64_t>(i), outputs[i]));
      if (!requests.back()) continue;
      valid.push_back(static_cast<std::int64_t>(i));
      predicted.push_back(std::min(outputs[i].prompt_tokens + params[i].max_new_tokens, model_.positions));
    }
    const std::vector<int> replica_of = assign_to_replicas(predicted, options_.mesh.size("dp"));
    std::vector<std::vector<std::int64_t>> members(static_cast<std::size_t>(options_.mesh.size("dp")));
    for (std::size_t k = 0; k < valid.size(); ++k)
      members[static_cast<std::size_t>(replica_of[k])].push_back(valid[k]);
    run_replicas(members, requests, outputs, on_token);
    if (codec_)
      for (llm_output& out : outputs) decode_text(out);
    return outputs;
  }

 private:
  struct replica_run {
    std::vector<generation_result> results;  // in order of the replica's request ids
    generation_stats stats;
    std::exception_ptr failure;
  };

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

  // The request of prompt `index`, or none when it fails before reaching a scheduler (its error
  // then in `out`). Checked here, so that messages name the caller's index.
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

  // The output's text; an id the tokenizer does not know (a vocabulary padded past the
  // tokenizer's) leaves it empty, with the reason in `error`, the ids kept.
  void decode_text(llm_output& out) const {
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

  // Runs each replica with requests on its own thread, streams their tokens on this one, and
  // fills `outputs` from their results.
  void run_replicas(const std::vector<std::vector<std::int64_t>>& members,
                    const std::vector<std::optional<generation_request>>& requests,
                    std::vector<llm_output>& outputs, const token_callback& on_token) {
    std::vector<replica_run> runs(members.size());
    token_funnel funnel;
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < members.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          run_replica(members[r], requests, runs[r], funnel);
        } catch (...) {
          runs[r].failure = std::current_exception();
        }
        funnel.producer_done();
      });
    std::vector<std::unique_ptr<token_stream>> streams(outputs.size());
    if (codec_ && on_token)
      for (auto& stream : streams) stream = codec_->stream();
    std::exception_ptr callback_failure;
    funnel.drain(static_cast<int>(threads.size()), [&](const sampled_token& t) {
      if (!on_token || callback_failure) return;
      try {
        on_token(t.request, t.token, next_piece(streams[static_cast<std::size_t>(t.request)], t.token));
      } catch (...) {
        callback_failure = std::current_exception();  // stop calling it; the ranks finish their work
      }
    });
    for (std::thread& t : threads) t.join();
    stats_ = {};
    for (std::size_t r = 0; r < runs.size(); ++r) {
      if (runs[r].failure) std::rethrow_exception(runs[r].failure);
      stats_.add_replica(runs[r].stats);
      for (generation_result& result : runs[r].results) {
        llm_output& out = outputs[static_cast<std::size_t>(members[r][static_cast<std::size_t>(result.id)])];
        out.ids = std::move(result.generated);
        out.reason = result.reason;
        out.error = std::move(result.error);
        out.replica = static_cast<int>(r);
      }
    }
    if (callback_failure) std::rethrow_exception(callback_failure);
  }

  // One replica: tp x pp ranks, each with a scheduler fed the replica's requests in order.
  void run_replica(const std::vector<std::int64_t>& members,
                   const std::vector<std::optional<generation_request>>& requests, replica_run& run,
                   token_funnel& funnel) const {
    if (members.empty()) return;
    World(options_.mesh.size("tp") * options_.mesh.size("pp")).run([&](auto& comm) {
      scheduler s(cache_, {.vocab_size = model_.vocab,
                           .max_batched_tokens = options_.max_batched_tokens,
                           .max_sequences = options_.max_sequences});
      for (const std::int64_t index : members) s.submit(*requests[static_cast<std::size_t>(index)]);
      const bool reports = comm.rank() == 0;
      step_clock clock;
      runner_options o{.max_blocks = cache_layout().max_blocks, .max_bindings = options_.max_bindings};
      if (reports) {
        o.on_step = [&](const scheduled_step& step) { clock.begin(step); };
        o.on_token = [&](request_id id, token_id token) {
          funnel.push({members[static_cast<std::size_t>(id)], token});
        };
      }
      const auto run_on = [&](const auto& make_backend) {
        auto make_rank = [&](std::int64_t batch, std::int64_t seq, const auto& parameters) {
          const timed_bind timer{clock};
          return bind_rank(comm, make_backend, batch, seq, parameters);
        };
        return run_generation(s, make_rank, model_.weights(std::make_shared<std::atomic<std::uint64_t>>(0)), o);
      };
      std::vector<generation_result> results =
          on_host_backend(comm.rank()) ? run_on(make_host_backend_) : run_on(make_backend_);
      clock.finish();
      if (reports) run = {std::move(results), clock.stats(), nullptr};
    });
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
  generation_stats stats_{};
};

}  // namespace shardgraph::generate
