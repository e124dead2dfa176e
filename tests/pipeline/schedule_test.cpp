#include "shardgraph/pipeline/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "catch.hpp"
#include "shardgraph/pipeline/print_timeline.hpp"
#include "shardgraph/pipeline/timeline.hpp"

namespace pl = shardgraph::pipeline;
using shardgraph::testing::ContainsSubstring;
using shardgraph::testing::error_of;
using kind = pl::action_kind;

namespace {

struct layout {
  pl::schedule_kind schedule;
  int ranks, micro_batches, virtual_stages;
};

// Every schedule for p in {1, 2, 4}: m = p, 2p and an odd count (2p + 1, and 3 < p for p = 4) where the
// schedule allows it; interleaved with v in {2, 3} needs m to be a multiple of p (odd only for p = 1).
std::vector<layout> every_layout() {
  std::vector<layout> all;
  for (int p : {1, 2, 4}) {
    for (pl::schedule_kind k : {pl::schedule_kind::gpipe, pl::schedule_kind::one_f_one_b}) {
      for (int m : {p, 2 * p, 2 * p + 1}) all.push_back({k, p, m, 1});
      if (p == 4) all.push_back({k, p, 3, 1});
    }
    for (int v : {2, 3}) {
      for (int m : {p, 2 * p}) all.push_back({pl::schedule_kind::interleaved_1f1b, p, m, v});
      if (p == 1) all.push_back({pl::schedule_kind::interleaved_1f1b, p, 3, v});
    }
  }
  return all;
}

int count(const pl::schedule& s, int rank, kind k) {
  const auto& list = s.per_rank[static_cast<std::size_t>(rank)];
  return static_cast<int>(
      std::count_if(list.begin(), list.end(), [&](const pl::action& a) { return a.kind == k; }));
}

std::size_t occurrences(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

pl::action act(kind k, int micro_batch, int peer = -1) { return {k, micro_batch, 0, peer}; }

}  // namespace

TEST_CASE("schedule names parse back, and an unknown name lists the three", "[pipeline]") {
  for (pl::schedule_kind k :
       {pl::schedule_kind::gpipe, pl::schedule_kind::one_f_one_b, pl::schedule_kind::interleaved_1f1b})
    CHECK(pl::parse_schedule(pl::schedule_name(k)) == k);
  CHECK(pl::schedule_name(pl::schedule_kind::one_f_one_b) == "1f1b");
  CHECK(pl::schedule_name(pl::schedule_kind::interleaved_1f1b) == "interleaved-1f1b");
  const std::string e = error_of([] { pl::parse_schedule("pipedream"); });
  CHECK_THAT(e, ContainsSubstring("shardgraph: pipeline schedule 'pipedream': no such schedule. "));
  CHECK_THAT(e, ContainsSubstring("use one of gpipe, 1f1b, interleaved-1f1b"));
}

TEST_CASE("1F1B on two ranks: the exact lists, with transfers where their values are made", "[pipeline]") {
  const pl::schedule s = pl::make_schedule(pl::schedule_kind::one_f_one_b, 2, 2);
  CHECK(s.ranks == 2);
  CHECK(s.virtual_stages == 1);
  CHECK(s.micro_batches == 2);
  using v = std::vector<pl::action>;
  CHECK(s.per_rank[0] == v{act(kind::forward, 0), act(kind::send_activation, 0, 1), act(kind::forward, 1),
                           act(kind::send_activation, 1, 1), act(kind::recv_gradient, 0, 1),
                           act(kind::backward, 0), act(kind::recv_gradient, 1, 1), act(kind::backward, 1)});
  CHECK(s.per_rank[1] == v{act(kind::recv_activation, 0, 0), act(kind::forward, 0),
                           act(kind::recv_activation, 1, 0), act(kind::backward, 0),
                           act(kind::send_gradient, 0, 0), act(kind::forward, 1), act(kind::backward, 1),
                           act(kind::send_gradient, 1, 0)});
  CHECK(s.virtual_stage(1, 0) == 1);
}

TEST_CASE("interleaving maps chunk c of rank r to virtual stage c * ranks + r", "[pipeline]") {
  const pl::schedule s = pl::make_schedule(pl::schedule_kind::interleaved_1f1b, 4, 8, 2);
  CHECK(s.stages() == 8);
  CHECK(s.virtual_stage(0, 0) == 0);
  CHECK(s.virtual_stage(3, 0) == 3);
  CHECK(s.virtual_stage(0, 1) == 4);
  CHECK(s.virtual_stage(3, 1) == 7);
  // Rank 3's chunk 0 (stage 3) sends to rank 0's chunk 1 (stage 4).
  const auto& last = s.per_rank[3];
  CHECK(std::find(last.begin(), last.end(), pl::action{kind::send_activation, 0, 0, 0}) != last.end());
  const auto& first = s.per_rank[0];
  CHECK(std::find(first.begin(), first.end(), pl::action{kind::recv_activation, 0, 1, 3}) != first.end());
  // Megatron's warmup on rank 0: (p - 1) * 2 + (v - 1) * p = 10 forwards before the first backward.
  int warmup = 0;
  for (const pl::action& a : first) {
    if (a.kind == kind::backward) break;
    warmup += a.kind == kind::forward;
  }
  CHECK(warmup == 11);  // the 10 warmup forwards, then the steady phase's first forward
}

TEST_CASE("every schedule verifies, runs each micro-batch once per stage and has the textbook bubble",
          "[pipeline]") {
  for (const layout& l : every_layout()) {
    const std::string name(pl::schedule_name(l.schedule));
    CAPTURE(name, l.ranks, l.micro_batches, l.virtual_stages);
    const pl::schedule s = pl::make_schedule(l.schedule, l.ranks, l.micro_batches, l.virtual_stages);
    REQUIRE(static_cast<int>(s.per_rank.size()) == l.ranks);
    CHECK_NOTHROW(pl::verify(s));
    const int p = l.ranks, m = l.micro_batches, v = l.virtual_stages, last = p * v - 1;
    for (int r = 0; r < p; ++r) {
      CHECK(count(s, r, kind::forward) == m * v);
      CHECK(count(s, r, kind::backward) == m * v);
      // One transfer per micro-batch and stage boundary that crosses ranks.
      int sends = 0, recvs = 0;
      for (int c = 0; c < v && p > 1; ++c) {
        const int j = s.virtual_stage(r, c);
        sends += (j < last) + (j > 0);
        recvs += (j > 0) + (j < last);
      }
      CHECK(count(s, r, kind::send_activation) + count(s, r, kind::send_gradient) == sends * m);
      CHECK(count(s, r, kind::recv_activation) + count(s, r, kind::recv_gradient) == recvs * m);
    }
    // Each pair of ranks meets its transfers in one order: r's sends to q are q's recvs from r.
    for (int r = 0; r < p; ++r)
      for (int q = 0; q < p; ++q) {
        std::vector<std::pair<int, int>> sent, received;  // (activation 0 / gradient 1, micro-batch)
        for (const pl::action& a : s.per_rank[static_cast<std::size_t>(r)])
          if (pl::is_send(a.kind) && a.peer == q)
            sent.emplace_back(a.kind == kind::send_gradient, a.micro_batch);
        for (const pl::action& a : s.per_rank[static_cast<std::size_t>(q)])
          if (!pl::is_send(a.kind) && !pl::is_compute(a.kind) && a.peer == r)
            received.emplace_back(a.kind == kind::recv_gradient, a.micro_batch);
        CHECK(sent == received);
      }

    const pl::timeline t = pl::simulate(s);
    const double textbook = (p - 1.0) / (v * m + p - 1.0);
    CHECK(std::abs(t.bubble_fraction() - textbook) < 1e-12);
    CHECK(std::abs(pl::textbook_bubble_fraction(s) - textbook) < 1e-15);
    CHECK(std::abs(t.makespan - (3.0 * m + 3.0 * (p - 1) / v)) < 1e-12);
    for (int r = 0; r < p; ++r) {
      const auto& row = t.per_rank[static_cast<std::size_t>(r)];
      REQUIRE(static_cast<int>(row.size()) == 2 * m * v);
      for (std::size_t i = 1; i < row.size(); ++i) CHECK(row[i].start >= row[i - 1].end - 1e-12);
    }

    if (l.schedule == pl::schedule_kind::one_f_one_b) {
      CHECK(pl::max_in_flight(s, 0) == std::min(p, m));
      for (int r = 0; r < p; ++r) CHECK(pl::max_in_flight(s, r) == std::min(p - r, m));
    }
    if (l.schedule == pl::schedule_kind::gpipe)
      for (int r = 0; r < p; ++r) CHECK(pl::max_in_flight(s, r) == m);
  }
}

TEST_CASE("make_schedule says which sizes it cannot schedule and what to use instead", "[pipeline]") {
  const auto one_f_one_b = pl::schedule_kind::one_f_one_b, interleaved = pl::schedule_kind::interleaved_1f1b;
  CHECK_THAT(error_of([&] { pl::make_schedule(one_f_one_b, 0, 4); }),
             ContainsSubstring("shardgraph: pipeline::make_schedule(1f1b, 0 ranks, 4 micro-batches): "));
  CHECK_THAT(error_of([&] { pl::make_schedule(one_f_one_b, 0, 4); }),
             ContainsSubstring("use --pp 1 or more"));
  CHECK_THAT(error_of([&] { pl::make_schedule(one_f_one_b, 2, 0); }),
             ContainsSubstring("use 1 or more micro-batches"));
  CHECK_THAT(error_of([&] { pl::make_schedule(interleaved, 2, 4, 0); }),
             ContainsSubstring("use --virtual-stages 1 or more"));
  const std::string chunks = error_of([] { pl::make_schedule(pl::schedule_kind::gpipe, 2, 4, 2); });
  CHECK_THAT(chunks, ContainsSubstring("gpipe runs one model chunk per rank, not 2"));
  CHECK_THAT(chunks, ContainsSubstring("use --virtual-stages 1, or the interleaved-1f1b schedule"));
  CHECK_THAT(error_of([&] { pl::make_schedule(one_f_one_b, 2, 4, 3); }),
             ContainsSubstring("1f1b runs one model chunk"));
  const std::string one_chunk = error_of([&] { pl::make_schedule(interleaved, 2, 4, 1); });
  CHECK_THAT(one_chunk, ContainsSubstring("needs at least 2 virtual stages"));
  CHECK_THAT(one_chunk, ContainsSubstring("use --virtual-stages 2 or more, or the 1f1b schedule"));
  const std::string groups = error_of([&] { pl::make_schedule(interleaved, 4, 6, 2); });
  CHECK_THAT(groups, ContainsSubstring("6 is not a multiple of 4"));
  CHECK_THAT(groups, ContainsSubstring("use 4 or 8 micro-batches, or the 1f1b schedule"));
  CHECK_THAT(error_of([&] { pl::make_schedule(interleaved, 4, 3, 2); }),
             ContainsSubstring("use 4 or 8 micro-batches"));
}

TEST_CASE("verify finds deadlocks under synchronous send/recv and names the stuck ranks", "[pipeline]") {
  pl::schedule s{pl::schedule_kind::one_f_one_b, 2, 1, 2, {}};
  SECTION("both ranks send to each other first") {
    // Rank 0 sends micro-batch 1's activation while rank 1 sends micro-batch 0's gradient: neither receives.
    s.per_rank = {{act(kind::forward, 0), act(kind::forward, 1), act(kind::send_activation, 0, 1),
                   act(kind::send_activation, 1, 1), act(kind::recv_gradient, 0, 1), act(kind::backward, 0),
                   act(kind::recv_gradient, 1, 1), act(kind::backward, 1)},
                  {act(kind::recv_activation, 0, 0), act(kind::forward, 0), act(kind::backward, 0),
                   act(kind::send_gradient, 0, 0), act(kind::recv_activation, 1, 0), act(kind::forward, 1),
                   act(kind::backward, 1), act(kind::send_gradient, 1, 0)}};
    const std::string e = error_of([&] { pl::verify(s); });
    CHECK_THAT(e, ContainsSubstring("shardgraph: pipeline::verify(1f1b, 2 ranks, 2 micro-batches): "));
    CHECK_THAT(e, ContainsSubstring("the schedule deadlocks with synchronous send/recv"));
    CHECK_THAT(
        e, ContainsSubstring("rank 0 waits at its send_activation of micro-batch 1 from stage 0 to rank 1"));
    CHECK_THAT(
        e, ContainsSubstring("rank 1 waits at its send_gradient of micro-batch 0 from stage 1 to rank 0"));
    CHECK_THAT(error_of([&] { pl::simulate(s); }), ContainsSubstring("deadlocks"));
  }
  SECTION("a recv with no matching send") {
    s.micro_batches = 1;
    s.per_rank = {{act(kind::forward, 0), act(kind::send_activation, 0, 1), act(kind::recv_gradient, 0, 1),
                   act(kind::backward, 0)},
                  {act(kind::recv_activation, 0, 0), act(kind::forward, 0), act(kind::backward, 0)}};
    const std::string e = error_of([&] { pl::verify(s); });
    CHECK_THAT(
        e, ContainsSubstring("rank 0 waits at its recv_gradient of micro-batch 0 for stage 0 from rank 1"));
    CHECK_THAT(e, ContainsSubstring("rank 1 finished"));
    CHECK_THAT(e, ContainsSubstring("give every recv a send"));
  }
  SECTION("two ranks that meet their transfers in different orders") {
    const pl::schedule good = pl::make_schedule(pl::schedule_kind::gpipe, 2, 2);
    s = good;
    auto& receiver = s.per_rank[1];  // recv_activation 0, forward 0, recv_activation 1, ...: swap the recvs
    std::swap(receiver[0].micro_batch, receiver[2].micro_batch);
    std::swap(receiver[1].micro_batch, receiver[3].micro_batch);
    const std::string e = error_of([&] { pl::verify(s); });
    CHECK_THAT(
        e, ContainsSubstring("rank 0 waits at its send_activation of micro-batch 0 from stage 0 to rank 1"));
    CHECK_THAT(
        e, ContainsSubstring("rank 1 waits at its recv_activation of micro-batch 1 for stage 1 from rank 0"));
  }
}

TEST_CASE("verify names a schedule that computes the wrong thing", "[pipeline]") {
  pl::schedule s{pl::schedule_kind::one_f_one_b, 2, 1, 1, {}};
  const std::vector<pl::action> stage_0{act(kind::forward, 0), act(kind::send_activation, 0, 1),
                                        act(kind::recv_gradient, 0, 1), act(kind::backward, 0)};
  SECTION("a forward before its activation arrives") {
    s.per_rank = {stage_0,
                  {act(kind::forward, 0), act(kind::recv_activation, 0, 0), act(kind::backward, 0),
                   act(kind::send_gradient, 0, 0)}};
    const std::string e = error_of([&] { pl::verify(s); });
    CHECK_THAT(e, ContainsSubstring("rank 1, action 0 (forward of micro-batch 0 on stage 1)"));
    CHECK_THAT(e, ContainsSubstring("place the recv_activation from rank 0 before it"));
  }
  SECTION("a send to the wrong rank") {
    s.ranks = 3;
    s.per_rank = {{act(kind::forward, 0), act(kind::send_activation, 0, 2)}, {}, {}};
    const std::string e = error_of([&] { pl::verify(s); });
    CHECK_THAT(e, ContainsSubstring("the peer is rank 2, but stage 1 runs on rank 1"));
    CHECK_THAT(e, ContainsSubstring("set peer to 1"));
  }
  SECTION("a send before the value is computed") {
    s.per_rank = {{act(kind::send_activation, 0, 1), act(kind::forward, 0)},
                  {act(kind::recv_activation, 0, 0)}};
    CHECK_THAT(error_of([&] { pl::verify(s); }),
               ContainsSubstring("place the send after the forward of the same micro-batch and chunk"));
  }
  SECTION("a backward that never runs") {
    s.per_rank = {{act(kind::forward, 0), act(kind::send_activation, 0, 1)},
                  {act(kind::recv_activation, 0, 0), act(kind::forward, 0), act(kind::backward, 0)}};
    const std::string e = error_of([&] { pl::verify(s); });
    CHECK_THAT(e, ContainsSubstring("micro-batch 0 never runs its backward on stage 0 (rank 0, chunk 0)"));
  }
  SECTION("a forward that runs twice") {
    s.per_rank = {{act(kind::forward, 0), act(kind::forward, 0)}, {}};
    CHECK_THAT(error_of([&] { pl::verify(s); }), ContainsSubstring("this forward already ran"));
  }
  SECTION("a list per rank") {
    s.per_rank = {stage_0};
    CHECK_THAT(error_of([&] { pl::verify(s); }),
               ContainsSubstring("give per_rank one list per pipeline rank"));
  }
}

TEST_CASE("timeline_text draws one row per rank and the bubble beside its textbook value", "[pipeline]") {
  const pl::schedule s = pl::make_schedule(pl::schedule_kind::one_f_one_b, 4, 8);
  const std::string text = pl::timeline_text(s, pl::simulate(s));
  CHECK_THAT(text, ContainsSubstring("bubble fraction 0.273 (textbook (p-1)/(m+p-1) = 0.273)\n"));
  CHECK_THAT(text, ContainsSubstring("rank 0 | F0 F1 F2 F3 .  .  .  .  .  .  B0    F4 B1    F5 B2"));
  CHECK_THAT(text, ContainsSubstring("rank 3 | .  .  .  F0 B0    F1 B1    F2 B2"));
  CHECK(occurrences(text, "\nrank ") == 4);

  const pl::schedule gpipe = pl::make_schedule(pl::schedule_kind::gpipe, 2, 3);
  CHECK_THAT(pl::timeline_text(gpipe, pl::simulate(gpipe)),
             ContainsSubstring("rank 1 | .  F0 F1 F2 B0    B1    B2    .  .\n"));

  const pl::schedule interleaved = pl::make_schedule(pl::schedule_kind::interleaved_1f1b, 2, 4, 2);
  const std::string chunks = pl::timeline_text(interleaved, pl::simulate(interleaved));
  CHECK_THAT(chunks, ContainsSubstring("rank 0 | F0a F1a F0b F1b"));
  CHECK_THAT(chunks, ContainsSubstring("(textbook (p-1)/(v*m+p-1) = 0.111)"));
  CHECK_THAT(chunks,
             ContainsSubstring("forward of model chunk a, b, ... (1/2 unit), B<m><chunk> backward (1 unit)"));
}

TEST_CASE("timeline_svg draws one rectangle per compute action", "[pipeline]") {
  for (const layout& l :
       {layout{pl::schedule_kind::gpipe, 4, 8, 1}, layout{pl::schedule_kind::interleaved_1f1b, 2, 4, 3}}) {
    const pl::schedule s = pl::make_schedule(l.schedule, l.ranks, l.micro_batches, l.virtual_stages);
    const pl::timeline t = pl::simulate(s);
    const std::string svg = pl::timeline_svg(s, t);
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK_THAT(svg, ContainsSubstring("</svg>"));
    CHECK(occurrences(svg, "<rect") ==
          static_cast<std::size_t>(2 * l.ranks * l.micro_batches * l.virtual_stages));
    CHECK(occurrences(svg, ">rank ") == static_cast<std::size_t>(l.ranks));
  }
  const pl::schedule s = pl::make_schedule(pl::schedule_kind::one_f_one_b, 4, 8);
  CHECK_THAT(pl::timeline_svg(s, pl::simulate(s)),
             ContainsSubstring("1f1b, 4 ranks, 8 micro-batches, bubble fraction 0.273</text>"));
}

TEST_CASE("max_in_flight counts each chunk's micro-batches, and checks the rank", "[pipeline]") {
  const pl::schedule s = pl::make_schedule(pl::schedule_kind::interleaved_1f1b, 4, 8, 2);
  CHECK(pl::max_in_flight(s, 0) == 11);
  CHECK(pl::max_in_flight(s, 3) == 5);
  CHECK_THAT(error_of([&] { pl::max_in_flight(s, 4); }), ContainsSubstring("ask for a rank from 0 to 3"));
}
