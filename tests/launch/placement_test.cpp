// detect_placement reads torchrun's, mpirun's and Slurm's variables, in that order of precedence,
// and rejects values that cannot describe a run; device_limits parses GPU counts and memory caps.
#include <map>
#include <string>

#include <shardgraph/launch/device_limits.hpp>
#include <shardgraph/launch/placement.hpp>

#include "catch.hpp"

namespace sg = shardgraph;
namespace launch = shardgraph::launch;

namespace {

launch::environment fake(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST_CASE("placement: no launcher is one process", "[launch]") {
  const launch::placement p = launch::detect_placement(fake({}));
  CHECK(p.rank == 0);
  CHECK(p.world_size == 1);
  CHECK(p.local_rank == 0);
  CHECK(p.from == launch::launcher::none);
  CHECK(p.master_addr == "127.0.0.1");
  CHECK(p.master_port == 29500);
}

TEST_CASE("placement: torchrun, mpirun and Slurm variables", "[launch]") {
  const launch::placement t = launch::detect_placement(fake({{"RANK", "5"},
                                                             {"WORLD_SIZE", "8"},
                                                             {"LOCAL_RANK", "1"},
                                                             {"LOCAL_WORLD_SIZE", "4"},
                                                             {"MASTER_ADDR", "node07"},
                                                             {"MASTER_PORT", "29511"}}));
  CHECK(t.from == launch::launcher::torchrun);
  CHECK(t.rank == 5);
  CHECK(t.world_size == 8);
  CHECK(t.local_rank == 1);
  CHECK(t.local_size == 4);
  CHECK(t.master_addr == "node07");
  CHECK(t.master_port == 29511);

  const launch::placement m = launch::detect_placement(fake({{"OMPI_COMM_WORLD_RANK", "3"},
                                                             {"OMPI_COMM_WORLD_SIZE", "4"},
                                                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  CHECK(m.from == launch::launcher::mpirun);
  CHECK(m.rank == 3);
  CHECK(m.world_size == 4);
  CHECK(m.local_rank == 1);
  CHECK(m.local_size == 2);

  const launch::placement s = launch::detect_placement(fake({{"SLURM_PROCID", "6"},
                                                             {"SLURM_NTASKS", "16"},
                                                             {"SLURM_LOCALID", "2"},
                                                             {"SLURM_NTASKS_PER_NODE", "4(x4)"},
                                                             {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.3"}}));
  CHECK(s.from == launch::launcher::slurm);
  CHECK(s.rank == 6);
  CHECK(s.world_size == 16);
  CHECK(s.local_rank == 2);
  CHECK(s.local_size == 4);
  CHECK(s.master_addr == "10.0.0.3");
  // Nodes with different task counts: the local size is only bounded by the world.
  CHECK(launch::detect_placement(fake({{"SLURM_PROCID", "5"},
                                       {"SLURM_NTASKS", "7"},
                                       {"SLURM_LOCALID", "1"},
                                       {"SLURM_NTASKS_PER_NODE", "4,3"}}))
            .local_size == 7);

  // torchrun inside a Slurm allocation, or under mpirun: torchrun's own variables win.
  const launch::placement both = launch::detect_placement(
      fake({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}));
  CHECK(both.from == launch::launcher::torchrun);
  CHECK(both.rank == 1);
  CHECK(launch::detect_placement(fake({{"OMPI_COMM_WORLD_RANK", "1"},
                                       {"OMPI_COMM_WORLD_SIZE", "2"},
                                       {"SLURM_PROCID", "0"},
                                       {"SLURM_NTASKS", "1"}}))
            .from == launch::launcher::mpirun);
}

TEST_CASE("placement: values that cannot describe a run are errors naming the variable", "[launch]") {
  using sg::testing::contains;
  using sg::testing::error_of;
  CHECK(contains(error_of([] {
                   launch::detect_placement(fake({{"RANK", "two"}, {"WORLD_SIZE", "4"}}));
                 }),
                 "RANK is 'two', which is not a whole number"));
  CHECK(contains(error_of([] {
                   launch::detect_placement(fake({{"RANK", "4"}, {"WORLD_SIZE", "4"}}));
                 }),
                 "RANK is 4 but WORLD_SIZE is 4: a rank must be in 0..3"));
  CHECK(contains(error_of([] {
                   launch::detect_placement(fake({{"RANK", "0"}, {"WORLD_SIZE", "0"}}));
                 }),
                 "WORLD_SIZE is 0"));
  CHECK(contains(error_of([] {
                   launch::detect_placement(fake(
                       {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}));
                 }),
                 "LOCAL_RANK is 2 but LOCAL_WORLD_SIZE is 2"));
  CHECK(contains(
      error_of([] {
        launch::detect_placement(
            fake({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}));
      }),
      "MASTER_PORT is 70000, outside 1..65535"));
  CHECK(contains(error_of([] {
                   launch::detect_placement(fake({{"MASTER_PORT", "29500x"}}));
                 }),
                 "MASTER_PORT is '29500x', which is not a whole number"));
  CHECK(contains(error_of([] {
                   launch::detect_placement(
                       fake({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NTASKS_PER_NODE", "x"}}));
                 }),
                 "SLURM_NTASKS_PER_NODE is 'x'"));
}

TEST_CASE("device limits: GPU count and per-GPU memory cap from the environment", "[launch]") {
  using sg::testing::contains;
  using sg::testing::error_of;
  const launch::device_limits none = launch::device_limits_from(fake({}));
  CHECK(none.gpus == 0);
  CHECK(none.memory_cap(std::int64_t{80} << 30) == 0);

  const launch::device_limits two =
      launch::device_limits_from(fake({{"SHARDGRAPH_GPUS", "2"}, {"SHARDGRAPH_GPU_MEMORY", "40GiB"}}));
  CHECK(two.gpus == 2);
  CHECK(two.memory_cap(std::int64_t{141} << 30) == (std::int64_t{40} << 30));
  CHECK(launch::parse_gpu_memory("512MiB").memory_bytes == (std::int64_t{512} << 20));
  CHECK(launch::parse_gpu_memory("512M").memory_bytes == (std::int64_t{512} << 20));
  CHECK(launch::parse_gpu_memory("40GB").memory_bytes == std::int64_t{40'000'000'000});
  CHECK(launch::parse_gpu_memory("1.5TiB").memory_bytes == (std::int64_t{3} << 39));
  CHECK(launch::parse_gpu_memory("123456").memory_bytes == 123456);
  CHECK(launch::parse_gpu_memory("80%").memory_cap(1000) == 800);

  CHECK(contains(error_of([] { launch::parse_gpu_memory("40 parsecs"); }),
                 "'40 parsecs' is not a memory size"));
  CHECK(contains(error_of([] { launch::parse_gpu_memory("GiB"); }), "is not a memory size"));
  CHECK(contains(error_of([] { launch::parse_gpu_memory("150%"); }), "not a share in (0, 100] %"));
  CHECK(contains(error_of([] { launch::parse_gpu_memory("0GiB"); }), "not a positive size"));
  CHECK(contains(error_of([] {
                   launch::device_limits_from(fake({{"SHARDGRAPH_GPUS", "0"}}));
                 }),
                 "SHARDGRAPH_GPUS is 0"));
}
