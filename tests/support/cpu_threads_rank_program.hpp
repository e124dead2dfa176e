#pragma once
// rank_program<cpu::backend, threads::communicator>, the executor most tests bind, is compiled once:
// in tests/support/cpu_threads_rank_program.cpp, the library shardgraph_test_cpu_threads, which
// shardgraph_add_test links to every test of LINK shardgraph::cpu shardgraph::threads. A test unit
// that includes this header only declares the instantiation, and skips generating its code.
#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/threads.hpp>

extern template class shardgraph::rank_program<shardgraph::cpu::backend, shardgraph::threads::communicator>;
