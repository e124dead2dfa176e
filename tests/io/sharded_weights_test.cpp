// Resharding (issue 6): weights saved by the ranks of one layout load under any other, with no
// converter step, and equal what was saved; an interrupted or damaged checkpoint is refused.
#include <unistd.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/io/sharded_weights.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;
using shardgraph::testing::contains;
using shardgraph::testing::error_of;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr sg::graph gpt2_graph() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::program gpt2 = sg::compile<gpt2_graph>();
constexpr sg::models::gpt2_config config{.vocab = 96, .positions = 32, .model = 32, .heads = 4, .layers = 2};
const sg::weight_source original = sg::random_weights(3, 0.1);

struct layout {
  int dp, tp;
};

std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("shardgraph-sharded-weights-" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(dir);
  return dir;
}

void save_under(layout l, const std::filesystem::path& dir) {
  sg::threads::world(l.dp * l.tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(gpt2, config.sizes(4, 8), comm, sg::cpu::backend{},
                         sg::mesh_shape{{"dp", l.dp}, {"tp", l.tp}}, original);
    sg::io::save_weights(dir.string(), rank.parameters(), comm);
  });
}

// The largest |loaded - original| over every rank's slice of every parameter, loading under `l`.
double load_under(layout l, const sg::weight_source& weights) {
  double worst = 0;
  std::mutex m;
  sg::threads::world(l.dp * l.tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(gpt2, config.sizes(4, 8), comm, sg::cpu::backend{},
                         sg::mesh_shape{{"dp", l.dp}, {"tp", l.tp}}, weights);
    for (const auto& [name, part] : rank.parameters()) {
      sg::host_tensor want(part.values.type(), part.slice.count);
      original(name, part.slice, want);
      const std::lock_guard<std::mutex> lock(m);
      for (std::int64_t i = 0; i < want.numel(); ++i)
        worst = std::max(worst, std::abs(part.values.at(i) - want.at(i)));
    }
  });
  return worst;
}

}  // namespace

TEST_CASE("weights saved under one layout load under every other, equal to what was saved",
          "[io][checkpoint][threads]") {
  for (const layout saved : {layout{1, 1}, layout{1, 2}, layout{2, 2}}) {
    const auto dir = scratch("saved-" + std::to_string(saved.dp) + "x" + std::to_string(saved.tp));
    save_under(saved, dir);
    CHECK(std::filesystem::is_regular_file(dir / sg::io::sharded_weights_manifest));
    const sg::weight_source loaded = sg::io::sharded_weights(dir.string());
    for (const layout l : {layout{1, 1}, layout{1, 4}, layout{2, 2}, layout{4, 1}}) {
      CAPTURE(saved.dp, saved.tp, l.dp, l.tp);
      CHECK(load_under(l, loaded) == 0);  // the same f64 values, element for element
    }
  }
}

TEST_CASE("data-parallel replicas are saved once: a dp=4 save is the size of a one-rank save",
          "[io][checkpoint][threads]") {
  const auto bytes_of = [](const std::filesystem::path& dir) {
    std::uintmax_t total = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      if (entry.path().extension() == ".safetensors") total += entry.file_size();
    return total;
  };
  const auto one = scratch("one-rank"), replicated = scratch("dp4"), mixed = scratch("dp2-tp2");
  save_under({1, 1}, one);
  save_under({4, 1}, replicated);
  save_under({2, 2}, mixed);
  const sg::io::sharded_weights_index index(replicated.string());
  CHECK(index.pieces("wte.weight").size() == 1);
  CHECK(index.pieces("h.1.attn.c_proj.weight").size() == 1);
  // the four files carry four headers, the one file one: a few hundred bytes each
  CHECK(bytes_of(replicated) < bytes_of(one) + 3 * 4096);
  CHECK(bytes_of(replicated) >= bytes_of(one));
  CHECK(sg::io::sharded_weights_index(mixed.string()).pieces("h.0.mlp.c_fc.weight").size() ==
        2);  // tp halves
  CHECK(bytes_of(mixed) < bytes_of(one) + 3 * 4096);
}

TEST_CASE("an interrupted or damaged weight checkpoint is refused, naming what is wrong",
          "[io][checkpoint]") {
  const auto dir = scratch("damaged");
  save_under({1, 2}, dir);
  const auto load = [&] { return error_of([&] { sg::io::sharded_weights(dir.string()); }); };
  CHECK(load() == "(no error)");

  // rank 1's file cut short: its header no longer fits the file
  const auto rank1 = dir / "rank-00001.safetensors";
  const auto size = std::filesystem::file_size(rank1);
  std::filesystem::copy_file(rank1, dir / "rank1.saved");
  std::filesystem::resize_file(rank1, size / 2);
  const std::string truncated = load();
  CHECK(contains(truncated, "rank-00001.safetensors"));
  std::filesystem::rename(dir / "rank1.saved", rank1);

  std::filesystem::remove(rank1);
  CHECK(contains(load(), "rank file rank-00001.safetensors of 2 is missing"));

  std::filesystem::remove(dir / sg::io::sharded_weights_manifest);  // as a save killed before its end
  CHECK(contains(load(), "the checkpoint is incomplete (a save was interrupted)"));
  std::filesystem::remove_all(dir.parent_path());
}
