// The one explicit instantiation behind tests/support/cpu_threads_rank_program.hpp.
#include "support/cpu_threads_rank_program.hpp"

template class shardgraph::rank_program<shardgraph::cpu::backend, shardgraph::threads::communicator>;
