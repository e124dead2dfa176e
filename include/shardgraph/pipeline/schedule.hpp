#pragma once
// Pipeline-parallel schedules as values: the list of actions each pipeline rank runs, in order, and
// verify(), which proves before anything runs that the lists cannot deadlock. Pure logic: no
// communicator, no backend (timeline.hpp simulates a schedule, print_timeline.hpp draws it).
//
// The model is cut into ranks * virtual_stages virtual stages, run in order 0, 1, ..., last. Pipeline
// rank r holds model chunks c = 0 .. virtual_stages-1, chunk c being virtual stage j = c * ranks + r
// (Megatron-LM's interleaving; with one chunk per rank, stage j is rank j).
//   forward(m, c)   needs micro-batch m's activation from stage j - 1: a recv_activation earlier in the
//                   list (none on stage 0); a send_activation to the rank of stage j + 1 follows it
//                   (none on the last stage).
//   backward(m, c)  needs the gradient from stage j + 1: a recv_gradient earlier (none on the last stage,
//                   where the loss is: there it follows forward(m) of the same chunk); a send_gradient to
//                   the rank of stage j - 1 follows it (none on stage 0).
// A send's chunk is the sender's, a recv's the receiver's; `peer` is the other side's pipeline rank.
// With one rank, neighbouring stages share it and the values stay in memory: no send/recv.
//
//   make_schedule(schedule_kind::one_f_one_b, 2, 2) gives (F = forward, B = backward, chunk 0):
//     rank 0: F0 send_act(0)->1 F1 send_act(1)->1 recv_grad(0)<-1 B0 recv_grad(1)<-1 B1
//     rank 1: recv_act(0)<-0 F0 recv_act(1)<-0 B0 send_grad(0)->0 F1 B1 send_grad(1)->0
//
// Where sends and receives go. The compute order is the schedule's own (GPipe, 1F1B, interleaved
// 1F1B below); make_schedule times it (forward 1, backward 2 per chunk, communication free) and
// places every transfer in both ranks' lists at the moment its value is produced, transfers before
// computations at equal times, ties broken by (kind, micro-batch, stage). All ranks then meet their
// transfers in one global order, so even sends that block until the receive is posted (synchronous
// semantics) cannot deadlock; verify() checks this by simulation.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "shardgraph/core/error.hpp"

namespace shardgraph::pipeline {

enum class schedule_kind {
  gpipe,            // all forwards, then all backwards (Huang et al. 2019): m micro-batches in flight
  one_f_one_b,      // warmup forwards, then one forward / one backward (PipeDream-Flush): at most p in flight
  interleaved_1f1b  // 1F1B over v model chunks per rank (Narayanan et al. 2021): bubble / v
};

inline std::string_view schedule_name(schedule_kind k) {
  switch (k) {
    case schedule_kind::gpipe:
      return "gpipe";
    case schedule_kind::one_f_one_b:
      return "1f1b";
    case schedule_kind::interleaved_1f1b:
      return "interleaved-1f1b";
  }
  return "unknown";
}

// "gpipe", "1f1b" or "interleaved-1f1b" (schedule_name's spellings).
inline schedule_kind parse_schedule(std::string_view name) {
  for (schedule_kind k : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::interleaved_1f1b})
    if (name == schedule_name(k)) return k;
  fail("pipeline schedule '" + std::string(name) + "'", "no such schedule",
       "use one of gpipe, 1f1b, interleaved-1f1b");
}

enum class action_kind { forward, backward, send_activation, recv_activation, send_gradient, recv_gradient };

inline std::string_view action_name(action_kind k) {
  switch (k) {
    case action_kind::forward:
      return "forward";
    case action_kind::backward:
      return "backward";
    case action_kind::send_activation:
      return "send_activation";
    case action_kind::recv_activation:
      return "recv_activation";
    case action_kind::send_gradient:
      return "send_gradient";
    case action_kind::recv_gradient:
      return "recv_gradient";
  }
  return "unknown";
}

inline bool is_compute(action_kind k) { return k == action_kind::forward || k == action_kind::backward; }
inline bool is_send(action_kind k) {
  return k == action_kind::send_activation || k == action_kind::send_gradient;
}

struct action {
  action_kind kind = action_kind::forward;
  int micro_batch = 0;
  int chunk = 0;  // the model chunk on this rank, 0 .. virtual_stages-1
  int peer = -1;  // pipeline rank of the other side, for send/recv
  bool operator==(const action&) const = default;
};

struct schedule {
  schedule_kind kind = schedule_kind::one_f_one_b;
  int ranks = 0;
  int virtual_stages = 1;  // model chunks per rank
  int micro_batches = 0;
  std::vector<std::vector<action>> per_rank;  // what pipeline rank r does, in order

  int virtual_stage(int rank, int chunk) const { return chunk * ranks + rank; }
  int stages() const { return ranks * virtual_stages; }  // virtual stages in all
  int rank_of(int stage) const { return stage % ranks; }
  int chunk_of(int stage) const { return stage / ranks; }
};

namespace detail {

inline std::string plural(long long n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

// "1f1b, 4 ranks, 8 micro-batches" (", 2 virtual stages per rank" when interleaved): the `where` of messages.
inline std::string schedule_text(schedule_kind k, int ranks, int micro_batches, int virtual_stages) {
  std::string t = std::string(schedule_name(k)) + ", " + plural(ranks, "rank", "ranks") + ", " +
                  plural(micro_batches, "micro-batch", "micro-batches");
  if (virtual_stages != 1)
    t += ", " + plural(virtual_stages, "virtual stage", "virtual stages") + " per rank";
  return t;
}

inline std::string stage_text(const schedule& s, int stage) {
  return (s.virtual_stages > 1 ? "virtual stage " : "stage ") + std::to_string(stage);
}

// "send_activation of micro-batch 0 from stage 0 to rank 1", "forward of micro-batch 2 on stage 1".
inline std::string action_text(const schedule& s, int rank, const action& a) {
  const int j = s.virtual_stage(rank, a.chunk);
  std::string t = std::string(action_name(a.kind)) + " of micro-batch " + std::to_string(a.micro_batch);
  switch (a.kind) {
    case action_kind::forward:
    case action_kind::backward:
      return t + " on " + stage_text(s, j);
    case action_kind::send_activation:
    case action_kind::send_gradient:
      return t + " from " + stage_text(s, j) + " to rank " + std::to_string(a.peer);
    case action_kind::recv_activation:
    case action_kind::recv_gradient:
      return t + " for " + stage_text(s, j) + " from rank " + std::to_string(a.peer);
  }
  return t;
}

// The cost model of make_schedule and simulate, in ticks of 1 / virtual_stages time units: a chunk's
// forward takes 1 tick, its backward 2.
inline constexpr std::int64_t forward_ticks = 1, backward_ticks = 2;

// Start and end ticks of each rank's compute actions, in list order, with communication free
// (a value can be used as soon as it is computed). Sends and receives in the lists are ignored.
struct compute_ticks {
  std::vector<std::vector<std::int64_t>> start, end;
};

inline compute_ticks time_compute(const schedule& s) {
  const int stages = s.stages();
  const auto slot = [&](int m, int j) {
    return static_cast<std::size_t>(m) * static_cast<std::size_t>(stages) + static_cast<std::size_t>(j);
  };
  std::vector<std::int64_t> forward_end(slot(s.micro_batches, 0), -1), backward_end(forward_end);
  const auto r_count = static_cast<std::size_t>(s.ranks);
  compute_ticks t{std::vector<std::vector<std::int64_t>>(r_count),
                  std::vector<std::vector<std::int64_t>>(r_count)};
  std::vector<std::size_t> next(r_count, 0);
  std::vector<std::int64_t> free_at(r_count, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t r = 0; r < r_count; ++r) {
      const auto& list = s.per_rank[r];
      for (; next[r] < list.size(); ++next[r]) {
        const action& a = list[next[r]];
        if (!is_compute(a.kind)) continue;
        const int j = s.virtual_stage(static_cast<int>(r), a.chunk);
        std::int64_t ready = 0;
        if (a.kind == action_kind::forward) {
          if (j > 0 && (ready = forward_end[slot(a.micro_batch, j - 1)]) < 0) break;
        } else {
          if ((ready = forward_end[slot(a.micro_batch, j)]) < 0) break;
          if (j < stages - 1) {
            const std::int64_t g = backward_end[slot(a.micro_batch, j + 1)];
            if (g < 0) break;
            ready = std::max(ready, g);
          }
        }
        const std::int64_t begin = std::max(free_at[r], ready);
        free_at[r] = begin + (a.kind == action_kind::forward ? forward_ticks : backward_ticks);
        (a.kind == action_kind::forward ? forward_end : backward_end)[slot(a.micro_batch, j)] = free_at[r];
        t.start[r].push_back(begin);
        t.end[r].push_back(free_at[r]);
        progress = true;
      }
    }
  }
  for (std::size_t r = 0; r < r_count; ++r)
    if (next[r] < s.per_rank[r].size())
      fail("pipeline timing (" + schedule_text(s.kind, s.ranks, s.micro_batches, s.virtual_stages) + ")",
           "rank " + std::to_string(r) + " cannot run its " +
               action_text(s, static_cast<int>(r), s.per_rank[r][next[r]]) +
               ": the value it needs is never computed",
           "run pipeline::verify on the schedule for the full diagnosis");
  return t;
}

// The compute order of rank `rank` (forwards and backwards only).
inline std::vector<action> compute_order(schedule_kind kind, int ranks, int micro_batches, int virtual_stages,
                                         int rank) {
  std::vector<action> order;
  const auto forward = [&](int m, int c) { order.push_back({action_kind::forward, m, c}); };
  const auto backward = [&](int m, int c) { order.push_back({action_kind::backward, m, c}); };
  switch (kind) {
    case schedule_kind::gpipe:
      for (int m = 0; m < micro_batches; ++m) forward(m, 0);
      for (int m = 0; m < micro_batches; ++m) backward(m, 0);
      break;
    case schedule_kind::one_f_one_b: {
      // Stage r runs ranks - r - 1 forwards ahead, so its first backward meets the first gradient.
      const int warmup = std::min(ranks - rank - 1, micro_batches);
      for (int m = 0; m < warmup; ++m) forward(m, 0);
      for (int i = 0; i < micro_batches - warmup; ++i) {
        forward(warmup + i, 0);
        backward(i, 0);
      }
      for (int m = micro_batches - (warmup); m < micro_batches; ++m) backward(m, 0);
      break;
    }
    case schedule_kind::interleaved_1f1b: {
      // Megatron-LM's order: the k-th forward of a rank runs chunk (k % (p v)) / p on micro-batch
      // (k / (p v)) p + k % p, groups of p micro-batches going through chunk 0, then chunk 1, ...;
      // the k-th backward walks the chunks the other way.
      const int p = ranks, v = virtual_stages, total = micro_batches * virtual_stages;
      const auto micro_batch = [&](int k) { return (k / (p * v)) * p + k % p; };
      const auto forward_chunk = [&](int k) { return (k % (p * v)) / p; };
      const int warmup = std::min((p - rank - 1) * 2 + (v - 1) * p, total);
      for (int k = 0; k < warmup; ++k) forward(micro_batch(k), forward_chunk(k));
      for (int i = 0; i < total - warmup; ++i) {
        forward(micro_batch(warmup + i), forward_chunk(warmup + i));
        backward(micro_batch(i), v - 1 - forward_chunk(i));
      }
      for (int k = std::max(total - warmup, 0); k < total; ++k)
        backward(micro_batch(k), v - 1 - forward_chunk(k));
      break;
    }
  }
  return order;
}

}  // namespace detail

// The schedule of `kind` for `ranks` pipeline ranks, `micro_batches` micro-batches per step and
// `virtual_stages` model chunks per rank (1 for gpipe and 1f1b; 2 or more for interleaved-1f1b, which
// also needs micro_batches to be a multiple of ranks). Every schedule it returns passes verify().
inline schedule make_schedule(schedule_kind kind, int ranks, int micro_batches, int virtual_stages = 1) {
  const std::string where =
      "pipeline::make_schedule(" + detail::schedule_text(kind, ranks, micro_batches, virtual_stages) + ")";
  if (ranks < 1)
    fail(where, "a pipeline needs at least one rank, got " + std::to_string(ranks), "use --pp 1 or more");
  if (micro_batches < 1)
    fail(where, "a step needs at least one micro-batch, got " + std::to_string(micro_batches),
         "use 1 or more micro-batches; 2 x pp or more keeps the bubble small");
  if (virtual_stages < 1)
    fail(
        where,
        "each rank needs at least one model chunk, got " + std::to_string(virtual_stages) + " virtual stages",
        "use --virtual-stages 1 or more");
  if (kind != schedule_kind::interleaved_1f1b && virtual_stages != 1)
    fail(where,
         std::string(schedule_name(kind)) + " runs one model chunk per rank, not " +
             std::to_string(virtual_stages),
         "use --virtual-stages 1, or the interleaved-1f1b schedule");
  if (kind == schedule_kind::interleaved_1f1b && virtual_stages < 2)
    fail(where, "interleaved-1f1b needs at least 2 virtual stages (model chunks) per rank, got 1",
         "use --virtual-stages 2 or more, or the 1f1b schedule");
  if (kind == schedule_kind::interleaved_1f1b && micro_batches % ranks != 0) {
    const int above = (micro_batches / ranks + 1) * ranks, below = above - ranks;
    fail(where,
         "interleaved-1f1b runs micro-batches in groups of " + std::to_string(ranks) +
             " (one per rank), and " + std::to_string(micro_batches) + " is not a multiple of " +
             std::to_string(ranks),
         "use " + std::to_string(below > 0 ? below : above) + " or " +
             std::to_string(below > 0 ? above : 2 * above) + " micro-batches, or the 1f1b schedule");
  }

  schedule s{kind, ranks, virtual_stages, micro_batches, {}};
  for (int r = 0; r < ranks; ++r)
    s.per_rank.push_back(detail::compute_order(kind, ranks, micro_batches, virtual_stages, r));
  const detail::compute_ticks ticks = detail::time_compute(s);

  // Each rank's actions with their keys: (tick, 0 for a transfer, transfer kind, micro-batch, sending
  // stage) or (tick, 1 for a computation, its index on the rank). Sorting by key gives the lists.
  using key = std::tuple<std::int64_t, int, int, int, int>;
  std::vector<std::vector<std::pair<key, action>>> keyed(static_cast<std::size_t>(ranks));
  const int last = s.stages() - 1;
  for (int r = 0; r < ranks; ++r) {
    const auto& order = s.per_rank[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < order.size(); ++i) {
      const action& a = order[i];
      const std::int64_t start = ticks.start[static_cast<std::size_t>(r)][i],
                         end = ticks.end[static_cast<std::size_t>(r)][i];
      keyed[static_cast<std::size_t>(r)].push_back({key{start, 1, static_cast<int>(i), 0, 0}, a});
      const int j = s.virtual_stage(r, a.chunk);
      const bool forward = a.kind == action_kind::forward;
      const int to = forward ? j + 1 : j - 1;
      if (to < 0 || to > last || s.rank_of(to) == r) continue;
      const int q = s.rank_of(to);
      const key k{end, 0, forward ? 0 : 1, a.micro_batch, j};
      keyed[static_cast<std::size_t>(r)].push_back(
          {k,
           {forward ? action_kind::send_activation : action_kind::send_gradient, a.micro_batch, a.chunk, q}});
      keyed[static_cast<std::size_t>(q)].push_back(
          {k,
           {forward ? action_kind::recv_activation : action_kind::recv_gradient, a.micro_batch,
            s.chunk_of(to), r}});
    }
  }
  for (int r = 0; r < ranks; ++r) {
    auto& events = keyed[static_cast<std::size_t>(r)];
    std::sort(events.begin(), events.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    auto& list = s.per_rank[static_cast<std::size_t>(r)];
    list.clear();
    for (const auto& e : events) list.push_back(e.second);
  }
  return s;
}

// Proves, before running, that `s` cannot deadlock and computes what it should. Checks every action's
// micro-batch, chunk and peer (a send or recv goes to the rank of the neighbouring stage), then runs all
// lists with synchronous send/recv: a send and a recv complete together, only when both are at the head
// of their lists and match in peer, kind (send_activation with recv_activation, send_gradient with
// recv_gradient), micro-batch and stage (the receiver's stage is the sender's plus one for activations,
// minus one for gradients). Along the way, each forward must have its activation (received, or computed
// on this rank by the stage before), each backward its forward and its gradient, each send its value.
// At the end every (micro-batch, stage) must have run forward exactly once and backward exactly once.
// Throws shardgraph::error naming the ranks and actions at fault: for a deadlock, every stuck rank and
// the action it waits at.
inline void verify(const schedule& s) {
  const std::string where =
      "pipeline::verify(" + detail::schedule_text(s.kind, s.ranks, s.micro_batches, s.virtual_stages) + ")";
  if (s.ranks < 1 || s.micro_batches < 1 || s.virtual_stages < 1)
    fail(where, "the schedule needs at least one rank, micro-batch and virtual stage",
         "build schedules with pipeline::make_schedule");
  if (static_cast<int>(s.per_rank.size()) != s.ranks)
    fail(where,
         "the schedule lists " + std::to_string(s.per_rank.size()) + " ranks' actions for " +
             detail::plural(s.ranks, "rank", "ranks"),
         "give per_rank one list per pipeline rank");
  const int stages = s.stages(), last = stages - 1;
  const auto at = [&](int r, std::size_t i) {
    return "rank " + std::to_string(r) + ", action " + std::to_string(i) + " (" +
           detail::action_text(s, r, s.per_rank[static_cast<std::size_t>(r)][i]) + ")";
  };

  // The structure of each action, on its own.
  for (int r = 0; r < s.ranks; ++r) {
    const auto& list = s.per_rank[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const action& a = list[i];
      if (a.micro_batch < 0 || a.micro_batch >= s.micro_batches || a.chunk < 0 || a.chunk >= s.virtual_stages)
        fail(where + ": rank " + std::to_string(r) + ", action " + std::to_string(i),
             "micro-batch " + std::to_string(a.micro_batch) + " or chunk " + std::to_string(a.chunk) +
                 " is out of range",
             "use micro-batches 0 to " + std::to_string(s.micro_batches - 1) + " and chunks 0 to " +
                 std::to_string(s.virtual_stages - 1));
      if (is_compute(a.kind)) continue;
      const int j = s.virtual_stage(r, a.chunk);
      const bool toward_last = a.kind == action_kind::send_activation || a.kind == action_kind::recv_gradient;
      const int other = toward_last ? j + 1 : j - 1;
      if (other < 0 || other > last)
        fail(where + ": " + at(r, i),
             detail::stage_text(s, j) + (other < 0 ? " is the first stage" : " is the last stage") +
                 ": there is no stage " + std::to_string(other) + " to exchange with",
             "drop this action");
      if (s.rank_of(other) == r)
        fail(where + ": " + at(r, i),
             detail::stage_text(s, other) + " runs on the same rank, so the value stays in memory",
             "drop the send and recv between stages of one rank");
      if (a.peer != s.rank_of(other))
        fail(where + ": " + at(r, i),
             "the peer is rank " + std::to_string(a.peer) + ", but " + detail::stage_text(s, other) +
                 " runs on rank " + std::to_string(s.rank_of(other)),
             "set peer to " + std::to_string(s.rank_of(other)) + " (stage j runs on rank j % ranks)");
    }
  }

  // The run, with synchronous send/recv.
  const auto slot = [&](int m, int j) {
    return static_cast<std::size_t>(m) * static_cast<std::size_t>(stages) + static_cast<std::size_t>(j);
  };
  const std::size_t slots = slot(s.micro_batches, 0);
  std::vector<char> forward_done(slots, 0), backward_done(slots, 0), activation_here(slots, 0),
      gradient_here(slots, 0);
  std::vector<std::size_t> next(static_cast<std::size_t>(s.ranks), 0);
  const auto head = [&](int r) -> const action* {
    const auto& list = s.per_rank[static_cast<std::size_t>(r)];
    return next[static_cast<std::size_t>(r)] < list.size() ? &list[next[static_cast<std::size_t>(r)]]
                                                           : nullptr;
  };
  const auto run_compute = [&](int r, const action& a) {
    const std::string here = where + ": " + at(r, next[static_cast<std::size_t>(r)]);
    const int j = s.virtual_stage(r, a.chunk);
    const std::size_t k = slot(a.micro_batch, j);
    if (a.kind == action_kind::forward) {
      if (forward_done[k])
        fail(here, "this forward already ran", "run each micro-batch's forward once per stage");
      const bool has_input =
          j == 0 || activation_here[k] || (s.rank_of(j - 1) == r && forward_done[slot(a.micro_batch, j - 1)]);
      if (!has_input)
        fail(here, "the activation from " + detail::stage_text(s, j - 1) + " has not arrived",
             s.rank_of(j - 1) == r
                 ? std::string("run the forward of the stage before first")
                 : "place the recv_activation from rank " + std::to_string(s.rank_of(j - 1)) + " before it");
      forward_done[k] = 1;
    } else {
      if (backward_done[k])
        fail(here, "this backward already ran", "run each micro-batch's backward once per stage");
      if (!forward_done[k])
        fail(here, "its forward has not run",
             "place the forward of the same micro-batch and chunk before it");
      const bool has_gradient = j == last || gradient_here[k] ||
                                (s.rank_of(j + 1) == r && backward_done[slot(a.micro_batch, j + 1)]);
      if (!has_gradient)
        fail(here, "the gradient from " + detail::stage_text(s, j + 1) + " has not arrived",
             s.rank_of(j + 1) == r
                 ? std::string("run the backward of the stage after first")
                 : "place the recv_gradient from rank " + std::to_string(s.rank_of(j + 1)) + " before it");
      backward_done[k] = 1;
    }
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.ranks; ++r)
      for (const action* a = head(r); a && is_compute(a->kind); a = head(r)) {
        run_compute(r, *a);
        ++next[static_cast<std::size_t>(r)];
        progress = true;
      }
    for (int r = 0; r < s.ranks; ++r) {
      const action* a = head(r);
      if (!a || !is_send(a->kind)) continue;
      const int j = s.virtual_stage(r, a->chunk);
      const bool activation = a->kind == action_kind::send_activation;
      if (!(activation ? forward_done : backward_done)[slot(a->micro_batch, j)])
        fail(where + ": " + at(r, next[static_cast<std::size_t>(r)]),
             std::string(activation ? "the forward" : "the backward") +
                 " that computes this value has not run",
             std::string("place the send after the ") + (activation ? "forward" : "backward") +
                 " of the same micro-batch and chunk");
      const action* b = head(a->peer);
      const int to = activation ? j + 1 : j - 1;
      if (!b || b->kind != (activation ? action_kind::recv_activation : action_kind::recv_gradient) ||
          b->peer != r || b->micro_batch != a->micro_batch || s.virtual_stage(a->peer, b->chunk) != to)
        continue;
      (activation ? activation_here : gradient_here)[slot(a->micro_batch, to)] = 1;
      ++next[static_cast<std::size_t>(r)];
      ++next[static_cast<std::size_t>(a->peer)];
      progress = true;
    }
  }

  std::string stuck, finished;
  for (int r = 0; r < s.ranks; ++r) {
    const action* a = head(r);
    if (a)
      stuck += (stuck.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " waits at its " +
               detail::action_text(s, r, *a);
    else
      finished += (finished.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!stuck.empty())
    fail(
        where,
        "the schedule deadlocks with synchronous send/recv: " + stuck +
            (finished.empty() ? ""
                              : "; rank" + std::string(finished.find(',') == std::string::npos ? " " : "s ") +
                                    finished + " finished"),
        "order each pair of ranks' sends and recvs alike, so that every send meets its matching recv (as "
        "make_schedule does), and give every recv a send");
  for (int m = 0; m < s.micro_batches; ++m)
    for (int j = 0; j < stages; ++j)
      if (!forward_done[slot(m, j)] || !backward_done[slot(m, j)])
        fail(where,
             "micro-batch " + std::to_string(m) + " never runs its " +
                 (forward_done[slot(m, j)] ? "backward" : "forward") + " on " + detail::stage_text(s, j) +
                 " (rank " + std::to_string(s.rank_of(j)) + ", chunk " + std::to_string(s.chunk_of(j)) + ")",
             "give every rank one forward and one backward per micro-batch and chunk");
}

}  // namespace shardgraph::pipeline
