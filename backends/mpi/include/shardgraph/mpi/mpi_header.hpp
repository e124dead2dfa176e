#pragma once
// Includes <mpi.h> without the C++ bindings (namespace MPI::) that MPI-3 removed. OpenMPI 4.1 still
// ships them through mpi.h, and they warn under -Wextra (cast-function-type), which would break
// users' -Werror builds. The C API is all this backend uses. A program that included <mpi.h> before
// this header keeps what it got; the skip macros are undefined again so they do not leak.
#if !defined(OMPI_SKIP_MPICXX)
#define OMPI_SKIP_MPICXX 1
#define SHARDGRAPH_UNDEF_OMPI_SKIP_MPICXX
#endif
#if !defined(MPICH_SKIP_MPICXX)
#define MPICH_SKIP_MPICXX 1
#define SHARDGRAPH_UNDEF_MPICH_SKIP_MPICXX
#endif

#include <mpi.h>

#if defined(SHARDGRAPH_UNDEF_OMPI_SKIP_MPICXX)
#undef OMPI_SKIP_MPICXX
#undef SHARDGRAPH_UNDEF_OMPI_SKIP_MPICXX
#endif
#if defined(SHARDGRAPH_UNDEF_MPICH_SKIP_MPICXX)
#undef MPICH_SKIP_MPICXX
#undef SHARDGRAPH_UNDEF_MPICH_SKIP_MPICXX
#endif
