#pragma once
// Where this process sits in a multi-process run, read from the launcher's environment:
//
//   torchrun, tools/shardgraph-run   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   mpirun (Open MPI)                OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   Slurm srun                       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
//   none of these                    one process: rank 0 of 1
//
// The first set present wins, in that order (torchrun inside a Slurm allocation sets both; its own
// variables describe the processes it started). MASTER_ADDR and MASTER_PORT, where set, say where
// rank 0 listens for the bootstrap exchange (launch/tcp_exchange.hpp) under any launcher.
//
//   const shardgraph::launch::placement p = shardgraph::launch::detect_placement();
//   // p.rank, p.world_size, p.local_rank (which GPU on this node), p.launcher_name()
//
// Every value is checked: a rank outside the world, a local rank outside the node, a value that is
// not a number or a port outside 1..65535 is an error naming the variable and what it holds.
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"

namespace shardgraph::launch {

enum class launcher { none, torchrun, mpirun, slurm };

struct placement {
  int rank = 0, world_size = 1;
  int local_rank = 0, local_size = 1;  // on this node
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  launcher from = launcher::none;

  std::string_view launcher_name() const {
    switch (from) {
      case launcher::none:
        return "none (one process)";
      case launcher::torchrun:
        return "torchrun-style (RANK, WORLD_SIZE)";
      case launcher::mpirun:
        return "mpirun (OMPI_COMM_WORLD_*)";
      case launcher::slurm:
        return "Slurm (SLURM_PROCID, SLURM_NTASKS)";
    }
    return "?";
  }
};

// Reads one environment variable; empty when unset. Tests pass their own.
using environment = std::function<std::optional<std::string>(std::string_view)>;

inline std::optional<std::string> process_environment(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

namespace detail {

inline int integer_variable(const environment& env, std::string_view name, int fallback) {
  const std::optional<std::string> v = env(name);
  if (!v) return fallback;
  int result = 0;
  const char* end = v->data() + v->size();
  const auto [ptr, ec] = std::from_chars(v->data(), end, result);
  if (ec != std::errc{} || ptr != end || v->empty())
    fail("launch", std::string(name) + " is '" + *v + "', which is not a whole number",
         "set " + std::string(name) + " to an integer, or unset it");
  return result;
}

// Slurm writes tasks per node as "4" or "4(x2),3" (counts per node group): the first count is ours
// only when all are equal, so a list is used only when it has one group.
inline int slurm_tasks_per_node(const environment& env, int fallback) {
  const std::optional<std::string> v = env("SLURM_NTASKS_PER_NODE");
  if (!v) return fallback;
  const std::string first = v->substr(0, v->find_first_of("(,"));
  if (first.size() != v->size() && v->find(',') != std::string::npos) return fallback;
  int result = 0;
  const auto [ptr, ec] = std::from_chars(first.data(), first.data() + first.size(), result);
  if (ec != std::errc{} || ptr != first.data() + first.size() || first.empty())
    fail("launch", "SLURM_NTASKS_PER_NODE is '" + *v + "', which is not a task count",
         "run under srun, which sets it, or unset it");
  return result;
}

inline void check_placement(const placement& p, std::string_view rank_var, std::string_view size_var,
                            std::string_view local_var, std::string_view local_size_var) {
  const auto number = [](int v) { return std::to_string(v); };
  if (p.world_size < 1)
    fail("launch",
         std::string(size_var) + " is " + number(p.world_size) + ": a world needs at least one process",
         "set " + std::string(size_var) + " to the number of processes");
  if (p.rank < 0 || p.rank >= p.world_size)
    fail("launch",
         std::string(rank_var) + " is " + number(p.rank) + " but " + std::string(size_var) + " is " +
             number(p.world_size) + ": a rank must be in 0.." + number(p.world_size - 1),
         "start the processes with a launcher (tools/shardgraph-run, torchrun, mpirun, srun) or fix the "
         "variables");
  if (p.local_size < 1 || p.local_size > p.world_size)
    fail("launch",
         std::string(local_size_var) + " is " + number(p.local_size) + " with a world of " +
             number(p.world_size),
         "set it to the number of processes on this node (1.." + number(p.world_size) + ")");
  if (p.local_rank < 0 || p.local_rank >= p.local_size)
    fail("launch",
         std::string(local_var) + " is " + number(p.local_rank) + " but " + std::string(local_size_var) +
             " is " + number(p.local_size) + ": a local rank must be in 0.." + number(p.local_size - 1),
         "fix the variables, or let the launcher set them");
  if (p.master_port < 1 || p.master_port > 65535)
    fail("launch", "MASTER_PORT is " + number(p.master_port) + ", outside 1..65535",
         "choose a free TCP port");
}

}  // namespace detail

// Each launcher's names for rank, world size, local rank and local size.
struct launcher_variables {
  launcher from;
  std::string_view rank, size, local_rank, local_size;
};
inline constexpr launcher_variables known_launchers[] = {
    {launcher::torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {launcher::mpirun, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {launcher::slurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

inline placement detect_placement(const environment& env = process_environment) {
  placement p;
  launcher_variables names{launcher::none, "rank", "world size", "local rank", "local size"};
  for (const launcher_variables& v : known_launchers)
    if (env(v.rank) && env(v.size)) {
      names = v;
      break;
    }
  p.from = names.from;
  if (p.from != launcher::none) {
    p.rank = detail::integer_variable(env, names.rank, 0);
    p.world_size = detail::integer_variable(env, names.size, 1);
    p.local_rank = detail::integer_variable(env, names.local_rank, p.rank);
    if (p.from == launcher::slurm) {
      p.local_size = detail::slurm_tasks_per_node(env, p.world_size);
      if (p.local_rank >= p.local_size) p.local_size = p.world_size;  // heterogeneous nodes: bound only
      if (const auto host = env("SLURM_LAUNCH_NODE_IPADDR")) p.master_addr = *host;
    } else {
      p.local_size = detail::integer_variable(env, names.local_size, p.world_size);
    }
  }
  if (const auto addr = env("MASTER_ADDR")) p.master_addr = *addr;
  p.master_port = detail::integer_variable(env, "MASTER_PORT", p.master_port);
  detail::check_placement(p, names.rank, names.size, names.local_rank, names.local_size);
  return p;
}

}  // namespace shardgraph::launch
