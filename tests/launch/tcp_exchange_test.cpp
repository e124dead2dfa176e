// The TCP bootstrap on this machine: rank 0 on a free port hands a blob to every other rank (thread
// per rank); ranks that do not belong to the run, never come, or find nobody listening end with an
// error that says so, within the timeout.
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include <shardgraph/launch/tcp_exchange.hpp>

#include "catch.hpp"

namespace sg = shardgraph;
namespace launch = shardgraph::launch;
using namespace std::chrono_literals;

namespace {

launch::placement rank_of(int rank, int world, int port) {
  launch::placement p;
  p.rank = rank;
  p.world_size = world;
  p.master_port = port;
  return p;
}

std::vector<std::byte> blob_of(std::size_t n) {
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 131 + 7) % 251);
  return b;
}

}  // namespace

TEST_CASE("tcp exchange: rank 0 hands its blob to every rank", "[launch]") {
  for (int world : {2, 5}) {
    launch::tcp_server server(0);
    const int port = server.port();
    const std::vector<std::byte> blob = blob_of(128);  // an NCCL unique id's size
    std::vector<std::vector<std::byte>> got(static_cast<std::size_t>(world));
    std::vector<std::string> errors(static_cast<std::size_t>(world));
    std::vector<std::thread> ranks;
    for (int r = 1; r < world; ++r)
      ranks.emplace_back([&, r] {
        errors[static_cast<std::size_t>(r)] = sg::testing::error_of(
            [&] { got[static_cast<std::size_t>(r)] = launch::fetch_blob(rank_of(r, world, port), 10s); });
      });
    server.serve(blob, world, 10s);
    for (auto& t : ranks) t.join();
    for (int r = 1; r < world; ++r) {
      CAPTURE(world, r);
      CHECK(errors[static_cast<std::size_t>(r)] == "(no error)");
      CHECK(got[static_cast<std::size_t>(r)] == blob);
    }
  }
}

TEST_CASE("tcp exchange: a world of one needs no network", "[launch]") {
  const std::vector<std::byte> blob = blob_of(16);
  CHECK(launch::share_from_rank0(rank_of(0, 1, 1), blob, 1s) == blob);
}

TEST_CASE("tcp exchange: wrong worlds, missing ranks and no rank 0 are errors", "[launch]") {
  using sg::testing::contains;
  using sg::testing::error_of;
  const std::vector<std::byte> blob = blob_of(8);
  {  // a rank that thinks the world is bigger
    launch::tcp_server server(0);
    std::string rank_error;
    std::thread other(
        [&] { rank_error = error_of([&] { launch::fetch_blob(rank_of(1, 3, server.port()), 5s); }); });
    const std::string e = error_of([&] { server.serve(blob, 2, 5s); });
    other.join();
    CHECK(contains(e, "rank 1 has a world of 3 processes, rank 0 of 2"));
    CHECK(contains(rank_error, "rank 0 refused this rank: rank 1 has a world of 3 processes"));
  }
  {  // the same rank twice
    launch::tcp_server server(0);
    std::string e;
    std::thread serving([&] { e = error_of([&] { server.serve(blob, 3, 5s); }); });
    CHECK(launch::fetch_blob(rank_of(1, 3, server.port()), 5s) == blob);
    const std::string second = error_of([&] { launch::fetch_blob(rank_of(1, 3, server.port()), 5s); });
    serving.join();
    CHECK(contains(e, "rank 1 connected twice"));
    CHECK(contains(second, "rank 0 refused this rank: rank 1 connected twice"));
  }
  {  // rank 2 never comes
    launch::tcp_server server(0);
    std::thread a([&] { (void)launch::fetch_blob(rank_of(1, 3, server.port()), 5s); });
    const auto start = std::chrono::steady_clock::now();
    const std::string e = error_of([&] { server.serve(blob, 3, 300ms); });
    a.join();
    CHECK(contains(e, "rank(s) 2 never connected"));
    CHECK(std::chrono::steady_clock::now() - start < 5s);
  }
  {  // nobody listens: the port of a server that is gone
    int port = 0;
    {
      launch::tcp_server gone(0);
      port = gone.port();
    }
    const std::string e = error_of([&] { launch::fetch_blob(rank_of(1, 2, port), 300ms); });
    CHECK(contains(e, "could not reach rank 0 at 127.0.0.1:" + std::to_string(port)));
  }
  {  // a port in use
    launch::tcp_server first(0);
    CHECK(contains(error_of([&] { launch::tcp_server second(first.port()); }),
                   "rank 0 cannot listen on port " + std::to_string(first.port())));
  }
  CHECK(contains(error_of([] {
                   launch::placement p = rank_of(1, 2, 29500);
                   p.master_addr = "no-such-host.invalid";
                   launch::fetch_blob(p, 1s);
                 }),
                 "cannot resolve MASTER_ADDR 'no-such-host.invalid'"));
}
