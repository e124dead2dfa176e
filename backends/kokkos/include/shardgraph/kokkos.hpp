#pragma once
// The kokkos backend: interop for codes that hold their data in Kokkos::View.
//   kokkos::to_host_tensor  a View (rank 1-4, any layout, any memory space) as a row-major host_tensor
//   kokkos::copy_to_view    a host_tensor back into a View
//   kokkos::view_weights    a weight_source that serves parameters from Views
// The caller initializes and finalizes Kokkos (e.g. a Kokkos::ScopeGuard in main); every function
// here needs it initialized.
#include "shardgraph/kokkos/views.hpp"
