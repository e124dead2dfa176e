#pragma once
// engine: a model opened as llm (llm.hpp) opens it, whose rank threads live on and take requests
// from any thread while they run (continuous batching), as a server needs.
//
//   gen::engine<sg::cpu::backend, sg::threads::world> e(directory, options, codec);   // starts
//   auto handle = e.submit("The capital of France is", {.max_new_tokens = 32},
//                          [](gen::token_id id, std::string_view piece) { std::cout << piece; },
//                          [](const gen::llm_output& out) { ... out.ids, out.reason, out.error });
//   e.cancel(handle);                 // ends it with finish_reason::cancelled, its blocks freed
//   gen::engine_stats s = e.stats();  // running, waiting, KV blocks, tokens/s
//   e.shutdown();                     // cancels what runs (shutdown(false): finishes it); ~engine too
//
// Each dp replica runs World(tp x pp) once, for the engine's life, on a thread of its own; each of
// its ranks reads the weights once (its first binding) and serves every request the replica gets.
// A request goes to the replica with the fewest predicted tokens among its live requests (the
// rule of assign_to_replicas, replica_assignment.hpp). Requests reach a replica's ranks through its
// replica_inbox, cut by rank 0 at each step boundary (runner_options::at_step_boundary), so all
// its ranks apply the same submits and cancels before the same step; an idle replica waits on a
// condition variable.
//
// Callbacks: on_token and on_finish run on one dispatch thread of the engine, never on a rank
// thread (a slow callback delays only the callbacks after it) and never two at once; a request's
// tokens come in order, then its on_finish, once. A callback that throws cancels its request.
// A bad request (as llm.hpp lists them) fails alone: its
// on_finish has reason failed and the error. When a rank fails, its replica's live requests
// finish failed with the rank's error, and later requests go to the other replicas (failing
// when none is left). A request submitted after shutdown fails at once, on the caller's thread.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/generate/engine_stats.hpp"
#include "shardgraph/generate/llm_model.hpp"
#include "shardgraph/generate/llm_options.hpp"
#include "shardgraph/generate/llm_output.hpp"
#include "shardgraph/generate/replica_inbox.hpp"
#include "shardgraph/generate/scheduler.hpp"
#include "shardgraph/generate/step_clock.hpp"
#include "shardgraph/generate/token_funnel.hpp"

namespace shardgraph::generate {

using request_handle = std::int64_t;
// (the token, its text piece: "" without a tokenizer or while the token ends inside a character)
using request_token_callback = std::function<void(token_id token, std::string_view piece)>;
using request_finish_callback = std::function<void(const llm_output& output)>;

template <class Backend, class World, class HostBackend = Backend>
class engine {
 public:
  using model_type = llm_model<Backend, HostBackend>;

  // Opens `directory` as llm does and starts every replica's ranks.
  engine(
      std::string directory, llm_options options, std::shared_ptr<const token_codec> codec = nullptr,
      typename model_type::backend_factory make_backend = [](int) { return Backend{}; },
      typename model_type::host_backend_factory make_host_backend = [](int) { return HostBackend{}; })
      : model_(std::move(directory), std::move(options), std::move(codec), std::move(make_backend),
               std::move(make_host_backend)) {
    for (int r = 0; r < model_.replicas(); ++r)
      replicas_.push_back(std::make_unique<replica>(model_.replica_ranks()));
    dispatcher_ = std::thread([this] { dispatch(); });
    for (int r = 0; r < model_.replicas(); ++r)
      replicas_[static_cast<std::size_t>(r)]->thread = std::thread([this, r] { run_replica(r); });
  }
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  ~engine() { shutdown(); }

  const model_type& model() const { return model_; }

  // Queues a request from any thread; returns its handle at once.
  request_handle submit(const llm_prompt& prompt, const generation_params& params,
                        request_token_callback on_token = {}, request_finish_callback on_finish = {}) {
    const request_handle handle = next_handle_++;
    live_request live{.on_token = std::move(on_token), .on_finish = std::move(on_finish)};
    std::optional<generation_request> request = model_.request_of(prompt, params, handle, live.output);
    std::unique_lock<std::mutex> guard(lock_);  // after encoding the prompt, which may take a while
    if (request && shut_down_) {
      fail_output(live.output, "engine::submit", "the engine is shut down", "submit before shutdown()");
      request.reset();
    }
    if (request && !pick_replica(live, params)) {
      fail_output(live.output, "engine::submit", "every replica has failed",
                  "see the earlier requests' errors");
      request.reset();
    }
    if (shut_down_) {  // the dispatcher is gone: finish here
      guard.unlock();
      if (live.on_finish) live.on_finish(live.output);
      return handle;
    }
    if (model_.codec() && live.on_token) live.stream = model_.codec()->stream();
    const int replica_index = live.replica;
    live.finishing = !request;
    requests_.emplace(handle, std::move(live));
    if (request)
      replicas_[static_cast<std::size_t>(replica_index)]->inbox.post(
          {.kind = engine_command::submit, .handle = handle, .request = std::move(*request)});
    else
      events_.push({.handle = handle, .finished = true, .result = {}});
    return handle;
  }

  // Ends a waiting or running request at the next step boundary (finish_reason::cancelled, with
  // the tokens generated so far). False for a request that is finishing, finished or unknown.
  bool cancel(request_handle handle) {
    const std::lock_guard<std::mutex> guard(lock_);
    const auto it = requests_.find(handle);
    if (it == requests_.end() || it->second.finishing) return false;
    replicas_[static_cast<std::size_t>(it->second.replica)]->inbox.post(
        {.kind = engine_command::cancel, .handle = handle, .request = {}});
    return true;
  }

  engine_stats stats() const {
    engine_stats total;
    for (const auto& r : replicas_) {
      const std::lock_guard<std::mutex> guard(r->stats_lock);
      total.running += r->stats.running;
      total.waiting += r->stats.waiting + r->inbox.posted_submits();
      total.kv_blocks_used += r->stats.kv_blocks_used;
      total.kv_blocks_total += r->stats.kv_blocks_total;
      total.generated_tokens += r->stats.generated_tokens;
      total.tokens_per_second += r->stats.tokens_per_second;
    }
    const std::lock_guard<std::mutex> guard(lock_);
    total.finished_requests = finished_requests_;
    return total;
  }

  // Ends the engine: cancels the waiting and running requests (cancel_running = false: lets them
  // finish), delivers their callbacks and joins every thread. Later calls do nothing.
  void shutdown(bool cancel_running = true) {
    {
      const std::lock_guard<std::mutex> guard(lock_);
      if (shut_down_) return;
      shut_down_ = true;
    }
    for (const auto& r : replicas_) r->inbox.stop(cancel_running);
    for (const auto& r : replicas_) r->thread.join();
    events_.producer_done();  // the engine's own pushes (requests failed at submit) are over
    dispatcher_.join();
  }

 private:
  struct live_request {
    request_token_callback on_token;
    request_finish_callback on_finish;
    llm_output output{};
    std::unique_ptr<token_stream> stream{};
    int replica = -1;
    std::int64_t predicted = 0;  // tokens, for the replica's load
    bool finishing = false;      // its finish event is queued: no cancel, no second finish
  };
  // A token of a request, or its end.
  struct event {
    request_handle handle = 0;
    token_id token = 0;
    bool finished = false;
    generation_result result{};  // with finished: its reason, error and tokens
  };
  struct replica {
    explicit replica(int ranks) : inbox(ranks) {}
    replica_inbox inbox;
    std::thread thread{};
    std::int64_t load = 0;  // predicted tokens of its live requests (under the engine's lock)
    bool failed = false;    // (under the engine's lock)
    mutable std::mutex stats_lock;
    engine_stats stats{};
  };

  static void fail_output(llm_output& out, const std::string& where, const std::string& why,
                          const std::string& how) {
    try {
      fail(where, why, how);
    } catch (const error& e) {
      out.reason = finish_reason::failed;
      out.error = e.what();
    }
  }

  // The least loaded working replica, in live.replica (with the load added); false when none.
  bool pick_replica(live_request& live, const generation_params& params) {
    replica* best = nullptr;
    for (std::size_t r = 0; r < replicas_.size(); ++r)
      if (!replicas_[r]->failed && (best == nullptr || replicas_[r]->load < best->load)) {
        best = replicas_[r].get();
        live.replica = static_cast<int>(r);
      }
    if (best == nullptr) return false;
    live.output.replica = live.replica;
    live.predicted = model_.predicted_tokens(live.output.prompt_tokens, params);
    best->load += live.predicted;
    return true;
  }

  // Replica r's thread: its World, for the engine's life. When a rank fails, the replica's live
  // requests finish failed with its error.
  void run_replica(int r) {
    replica& rep = *replicas_[static_cast<std::size_t>(r)];
    try {
      World(model_.replica_ranks()).run([&](auto& comm) {
        try {
          serve_rank(comm, rep);
        } catch (...) {
          rep.inbox.abort();
          throw;
        }
      });
    } catch (const std::exception& e) {
      fail_replica(r, e.what());
    } catch (...) {
      fail_replica(r, "shardgraph: engine: a rank of replica " + std::to_string(r) + " failed");
    }
    events_.producer_done();
  }

  void fail_replica(int r, const std::string& why) {
    const std::lock_guard<std::mutex> guard(lock_);
    replicas_[static_cast<std::size_t>(r)]->failed = true;
    for (auto& [handle, live] : requests_)
      if (live.replica == r && !live.finishing) {
        live.finishing = true;
        events_.push({.handle = handle,
                      .finished = true,
                      .result = {.id = 0, .generated = {}, .reason = finish_reason::failed, .error = why}});
      }
  }

  // One rank of a replica: its scheduler, fed at each step boundary with the replica's orders,
  // until the engine stops. Rank 0 reports the tokens, the finished requests and the stats.
  template <class Comm>
  void serve_rank(Comm& comm, replica& rep) {
    scheduler s = model_.make_scheduler();
    std::map<request_handle, request_id> ids;
    std::map<request_id, request_handle> handles;
    const bool reports = comm.rank() == 0;
    step_clock clock;
    runner_options o;
    std::int64_t boundary = 0;
    bool stopping = false;
    if (reports) {
      o.on_step = [&](const scheduled_step& step) { clock.begin(step); };
      o.on_token = [&](request_id id, token_id token) {
        events_.push({.handle = handles.at(id), .token = token});
      };
    }
    // The requests finished since the last call, reported (rank 0) and forgotten.
    const auto settle = [&](scheduler& sched) {
      std::vector<generation_result> finished = sched.take_finished();
      if (reports) report(rep, sched, clock, finished, handles);
      for (const generation_result& f : finished) {
        ids.erase(handles.at(f.id));
        handles.erase(f.id);
      }
    };
    o.at_step_boundary = [&](scheduler& sched) {
      clock.finish();  // idle time is no step's
      settle(sched);   // those of the last step, before waiting for orders
      const step_orders orders = rep.inbox.orders(comm.rank(), boundary++, !sched.has_work());
      if (orders.aborted) return false;
      apply(orders, sched, ids, handles);
      stopping = stopping || orders.stop;
      settle(sched);  // cancelled, or failed at submit
      return !stopping || sched.has_work();
    };
    model_.run_rank(comm, s, o, clock);
  }

  static void apply(const step_orders& orders, scheduler& s, std::map<request_handle, request_id>& ids,
                    std::map<request_id, request_handle>& handles) {
    for (const engine_command& c : orders.commands) {
      if (c.kind == engine_command::submit) {
        const request_id id = s.submit(c.request);
        ids[c.handle] = id;
        handles[id] = c.handle;
      } else if (const auto it = ids.find(c.handle); it != ids.end()) {
        s.cancel(it->second);  // false: it finished in the step before
      }
    }
    if (orders.cancel_all)
      for (const auto& [handle, id] : ids) s.cancel(id);
  }

  // Rank 0 at a boundary: the replica's stats, then the finished requests' events.
  void report(replica& rep, const scheduler& s, const step_clock& clock,
              const std::vector<generation_result>& finished,
              const std::map<request_id, request_handle>& handles) {
    {
      const std::lock_guard<std::mutex> guard(rep.stats_lock);
      const generation_stats& g = clock.stats();
      const double seconds = g.prefill_seconds + g.decode_seconds;
      rep.stats = {.running = s.running_count(),
                   .waiting = s.waiting_count(),
                   .kv_blocks_used = s.cache().pool().held_count(),
                   .kv_blocks_total = s.cache().pool().total(),
                   .generated_tokens = g.generated_tokens,
                   .finished_requests = 0,
                   .tokens_per_second = seconds > 0 ? static_cast<double>(g.generated_tokens) / seconds : 0};
    }
    if (finished.empty()) return;
    const std::lock_guard<std::mutex> guard(lock_);
    for (const generation_result& f : finished) {
      const request_handle handle = handles.at(f.id);
      auto it = requests_.find(handle);
      if (it == requests_.end() || it->second.finishing) continue;
      it->second.finishing = true;
      events_.push({.handle = handle, .finished = true, .result = f});
    }
  }

  // The dispatch thread: every callback, in the order the events came, until all producers (the
  // replicas and the engine's submit) are done.
  void dispatch() {
    events_.drain(model_.replicas() + 1, [&](event& e) {
      std::unique_lock<std::mutex> guard(lock_);
      const auto it = requests_.find(e.handle);
      if (it == requests_.end()) return;
      live_request& live = it->second;
      if (!e.finished) {
        live.output.ids.push_back(e.token);
        if (!live.on_token) return;
        const std::string piece = model_type::next_piece(live.stream, e.token);
        guard.unlock();
        run_callback(e.handle, [&] { live.on_token(e.token, piece); });
        return;
      }
      live_request done = std::move(live);
      requests_.erase(it);
      ++finished_requests_;
      if (done.replica >= 0) replicas_[static_cast<std::size_t>(done.replica)]->load -= done.predicted;
      guard.unlock();
      finish_output(done.output, e.result);
      if (done.on_finish) run_callback(e.handle, [&] { done.on_finish(done.output); });
    });
  }

  // The output of a finished request: the scheduler's tokens (those streamed, or all of them),
  // reason and error; the text decoded.
  void finish_output(llm_output& out, generation_result& result) const {
    if (out.reason == finish_reason::failed && !out.error.empty()) return;  // failed at submit
    if (!result.generated.empty()) out.ids = std::move(result.generated);
    out.reason = result.reason;
    out.error = std::move(result.error);
    model_.decode_text(out);
  }

  // A callback that throws cancels its request; the engine goes on.
  template <class Call>
  void run_callback(request_handle handle, const Call& call) {
    try {
      call();
    } catch (...) {
      cancel(handle);
    }
  }

  model_type model_;
  mutable std::mutex lock_;  // the requests, the replicas' loads and failed flags, the counters
  std::map<request_handle, live_request> requests_;
  std::vector<std::unique_ptr<replica>> replicas_;
  funnel<event> events_;
  std::thread dispatcher_;
  std::atomic<request_handle> next_handle_ = 0;
  std::int64_t finished_requests_ = 0;
  bool shut_down_ = false;
};

}  // namespace shardgraph::generate
