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
// and call, and the one cache the bindings share) live for one call (engine.hpp keeps them).
// llm_model.hpp holds the opened checkpoint and the one place a rank binds.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/generate/kv_cache_size.hpp"
#include "shardgraph/generate/llm_model.hpp"
#include "shardgraph/generate/llm_options.hpp"
#include "shardgraph/generate/llm_output.hpp"
#include "shardgraph/generate/replica_assignment.hpp"
#include "shardgraph/generate/runner.hpp"
#include "shardgraph/generate/step_clock.hpp"
#include "shardgraph/generate/token_codec.hpp"
#include "shardgraph/generate/token_funnel.hpp"
#include "shardgraph/io/hf_model.hpp"

namespace shardgraph::generate {

// (the prompt's index in generate's list, the token, its text piece: "" without a tokenizer or
// while the token ends inside a character)
using token_callback = std::function<void(std::int64_t request, token_id token, std::string_view piece)>;

template <class Backend, class World, class HostBackend = Backend>
class llm {
 public:
  using model_type = llm_model<Backend, HostBackend>;
  using backend_factory = typename model_type::backend_factory;
  using host_backend_factory = typename model_type::host_backend_factory;

  // Opens `directory` (open_hf_model) over options.mesh and sizes each rank's KV cache.
  llm(
      std::string directory, llm_options options, std::shared_ptr<const token_codec> codec = nullptr,
      backend_factory make_backend = [](int) { return Backend{}; },
      host_backend_factory make_host_backend = [](int) { return HostBackend{}; })
      : model_(std::move(directory), std::move(options), std::move(codec), std::move(make_backend),
               std::move(make_host_backend)) {}

  const io::hf_model& model() const { return model_.model(); }
  const kv_cache_size& kv_cache() const { return model_.kv_cache(); }  // each rank's
  bool has_tokenizer() const { return model_.codec() != nullptr; }
  const token_codec* codec() const { return model_.codec(); }
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
      requests.push_back(model_.request_of(prompts[i], params[i], static_cast<std::int64_t>(i), outputs[i]));
      if (!requests.back()) continue;
      valid.push_back(static_cast<std::int64_t>(i));
      predicted.push_back(model_.predicted_tokens(outputs[i].prompt_tokens, params[i]));
    }
    const std::vector<int> replica_of = assign_to_replicas(predicted, model_.replicas());
    std::vector<std::vector<std::int64_t>> members(static_cast<std::size_t>(model_.replicas()));
    for (std::size_t k = 0; k < valid.size(); ++k)
      members[static_cast<std::size_t>(replica_of[k])].push_back(valid[k]);
    run_replicas(members, requests, outputs, on_token);
    for (llm_output& out : outputs) model_.decode_text(out);
    return outputs;
  }

 private:
  struct replica_run {
    std::vector<generation_result> results;  // in order of the replica's request ids
    generation_stats stats;
    std::exception_ptr failure;
  };

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
    if (model_.codec() && on_token)
      for (auto& stream : streams) stream = model_.codec()->stream();
    std::exception_ptr callback_failure;
    funnel.drain(static_cast<int>(threads.size()), [&](const sampled_token& t) {
      if (!on_token || callback_failure) return;
      try {
        on_token(t.request, t.token,
                 model_type::next_piece(streams[static_cast<std::size_t>(t.request)], t.token));
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
    World(model_.replica_ranks()).run([&](auto& comm) {
      scheduler s = model_.make_scheduler();
      for (const std::int64_t index : members) s.submit(*requests[static_cast<std::size_t>(index)]);
      const bool reports = comm.rank() == 0;
      step_clock clock;
      runner_options o;
      if (reports) {
        o.on_step = [&](const scheduled_step& step) { clock.begin(step); };
        o.on_token = [&](request_id id, token_id token) {
          funnel.push({members[static_cast<std::size_t>(id)], token});
        };
      }
      std::vector<generation_result> results = model_.run_rank(comm, s, o, clock);
      clock.finish();
      if (reports) run = {std::move(results), clock.stats(), nullptr};
    });
  }

  model_type model_;
  generation_stats stats_{};
};

}  // namespace shardgraph::generate
