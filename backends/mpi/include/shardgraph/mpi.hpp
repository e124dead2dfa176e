#pragma once
// The MPI backend: one rank per process, over any MPI (tested with OpenMPI 4.1).
//   shardgraph::mpi::world         this process's rank; initializes MPI; runs the rank, failing fast
//   shardgraph::mpi::communicator  the Communicator concept over an MPI communicator
#include "shardgraph/comm/collectives.hpp"
#include "shardgraph/mpi/argument_agreement.hpp"
#include "shardgraph/mpi/comm_state.hpp"
#include "shardgraph/mpi/communicator.hpp"
#include "shardgraph/mpi/datatype.hpp"
#include "shardgraph/mpi/mpi_call.hpp"
#include "shardgraph/mpi/mpi_header.hpp"
#include "shardgraph/mpi/rank_order_sum.hpp"
#include "shardgraph/mpi/world.hpp"
