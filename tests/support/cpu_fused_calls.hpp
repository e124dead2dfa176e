#pragma once
// The cpu backend declaring that it runs every fused kind (compute/fused_kinds.hpp): each call
// arrives as the plan made it, for a test to count or check, and is then lowered onto the reference
// kernels by the core's lowering (compute/lower_fused.hpp), as for any backend. A test derives from
// it and calls cpu_fused_calls::run(call) from its own run().
#include <shardgraph/compute/lower_fused.hpp>
#include <shardgraph/cpu/backend.hpp>

namespace shardgraph::testing {

struct cpu_fused_calls : cpu::backend {
  struct traits {
    static constexpr compute::fused_set runs = compute::fused_set::all();
  };
  void run(const compute::kernel_call<buffer>& call) {
    cpu::backend& reference = *this;
    lowering_.run(reference, call, compute::fused_kinds_run_by<cpu::backend>());
  }

 private:
  compute::fused_lowering<cpu::backend> lowering_;
};

}  // namespace shardgraph::testing
