#pragma once
// Custom ops at run time: bind checks that every custom node of a program has a kernel for the
// backend (runnable_on, check_custom_kernels), and run_custom_call makes a custom node's call, handing the op's
// kernel for the backend a custom_call (compute/custom_call.hpp) over the call's buffers.
#include <cstddef>
#include <string>
#include <string_view>

#include "shardgraph/compute/custom_call.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/ir/custom_op.hpp"
#include "shardgraph/plan/backend_traits.hpp"
#include "shardgraph/plan/bound_call.hpp"
#include "shardgraph/program/program.hpp"

namespace shardgraph {

// Fails naming the first custom node whose op has no kernel for `backend` (traits::name).
inline void check_custom_kernels(const program_view& p, std::string_view backend) {
  const graph_view& g = p.nodes;
  for (int i = 0; i < g.size(); ++i) {
    const node& n = g[i];
    if (n.kind != op::custom || n.custom->kernel_for(backend) != nullptr) continue;
    const std::string name(n.custom->name);
    if (backend.empty())
      fail("bind", "op '" + name + "' (node '" + std::string(n.name.view()) + "') runs on a backend without a name",
           "give the backend's traits a static constexpr std::string_view name, and add {name, &fn} to " + name +
               "::kernels");
    fail("bind",
         "op '" + name + "' (node '" + std::string(n.name.view()) + "') has no kernel for backend '" +
             std::string(backend) + "'",
         "add {\"" + std::string(backend) + "\", &fn} to " + name + "::kernels");
  }
}

// p, once it has no diagnostic and a kernel on Backend for each custom op; else fails (bind).
template <class Backend>
const program_view& runnable_on(const program_view& p) {
  if (!p.ok()) throw error(std::string(p.error()));
  check_custom_kernels(p, plan::traits_of<Backend>().name);
  return p;
}

// Runs custom call c: its op's kernel for Backend, on the buffers value_of(node) gives.
template <class Backend, class ValueOf>
void run_custom_call(Backend& backend, const plan::bound_call& c, ValueOf& value_of) {
  const custom_op& op = *c.custom;
  static constexpr std::string_view backend_name = plan::traits_of<Backend>().name;
  const custom_kernel_function kernel = op.kernel_for(backend_name);
  if (kernel == nullptr)  // bind checked it (check_custom_kernels)
    fail("custom op '" + std::string(op.name) + "'", "it has no kernel for this backend",
         "add one to " + std::string(op.name) + "::kernels");
  const auto tensor_of = [&](int v, std::size_t shape) {
    auto& b = value_of(v);
    return custom_tensor{backend.data(b), b.type(), c.custom_shapes[shape]};
  };
  custom_call call;
  call.op = op.name;
  call.out = tensor_of(c.out, 0);
  for (int k = 0; k < c.input_count; ++k)
    call.in[static_cast<std::size_t>(k)] = tensor_of(c.in[static_cast<std::size_t>(k)], static_cast<std::size_t>(k) + 1);
  call.input_count = c.input_count;
  call.attribute = c.scalar;
  if constexpr (requires { backend.stream_handle(); }) call.stream = backend.stream_handle();
  kernel(call);
}

}  // namespace shardgraph
