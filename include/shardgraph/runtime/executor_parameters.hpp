#pragma once
// A rank's parameters and their gradients, read for checks, checkpoints and the optimizer: whole
// slices or, under ZeRO, the chunks this rank stores. Member definitions of rank_program
// (runtime/executor.hpp).
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardgraph/runtime/executor.hpp"

namespace shardgraph {

template <compute::ComputeBackend Backend, comm::Communicator Comm>
std::map<std::string, tensor_part> rank_program<Backend, Comm>::gradients() {
  const std::vector<bool>& scattered = buckets_.plan().scattered_grad;
  if (std::find(scattered.begin(), scattered.end(), true) != scattered.end())
    fail("gradients()",
         "under ZeRO-" + std::to_string(program_.zero_stage) +
             " each gradient is reduce-scattered in a bucket during backward and its whole buffer is "
             "reused",
         "read this rank's chunks with reduced_gradient_chunk(), or compile with training{.bucket_bytes = "
         "0} to keep every whole Partial gradient");
  std::map<std::string, tensor_part> result;
  for_each_parameter([&](const std::string& name, const node& p, std::int64_t, buffer&, buffer* grad) {
    if (grad != nullptr) result.emplace(name, download_part(backend_, p, layout_.of(index_of(p)), *grad));
  });
  return result;
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
template <class Fn>
void rank_program<Backend, Comm>::for_each_parameter(Fn&& fn) {
  const graph_view& g = program_.nodes;
  const std::int64_t saved_layer = layer_;
  for (const plan::held_parameter& held : held_.slices) {
    const int i = held.node;
    layer_ = std::max<std::int64_t>(held.layer, 0);
    buffer* grad = grad_of_[index(i)] >= 0 ? &value(grad_of_[index(i)]) : nullptr;
    fn(parameter_name(g, g[i], layer_), g[i], layer_, zero3_ ? zero3_.stored(i, layer_) : value(i), grad);
  }
  layer_ = saved_layer;
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
std::map<std::string, tensor_part> rank_program<Backend, Comm>::parameters() {
  std::map<std::string, tensor_part> result;
  for_each_parameter([&](const std::string& name, const node& p, std::int64_t, buffer& v, buffer*) {
    const int i = index_of(p);
    if (!zero3_) return void(result.emplace(name, download_part(backend_, p, layout_.of(i), v)));
    buffer whole = backend_.allocate(p.type, zero3_.plan().gathered(i));
    zero3_.gather(backend_, channels(), i, v, whole);
    result.emplace(name, download_part(backend_, p, layout_.of(i), whole));
  });
  return result;
}

}  // namespace shardgraph
