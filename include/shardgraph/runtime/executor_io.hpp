#pragma once
// A rank's inputs in and outputs out, whole or as its own slices (io_options, rank_io.hpp): the
// checks and target counts a run starts with, and the uploads. Member definitions of rank_program
// (runtime/executor.hpp).
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "shardgraph/runtime/executor.hpp"
#include "shardgraph/runtime/kv_cache.hpp"

namespace shardgraph {

template <compute::ComputeBackend Backend, comm::Communicator Comm>
tensor_map rank_program<Backend, Comm>::forward(const tensor_map& inputs, io_options io,
                                                std::string_view only) {
  inputs_given_ = io.inputs;
  tensor_map result = pipelined() ? forward_through_stages(inputs, only) : run_forward(inputs, only);
  if (io.outputs == io_part::local) return local_outputs(program_.nodes, layout_, std::move(result));
  return result;
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
tensor_map rank_program<Backend, Comm>::run_forward(const tensor_map& inputs, std::string_view only) {
  begin_run(std::span<const tensor_map>(&inputs, 1));
  upload_inputs(inputs);
  // On a backend that records (cuda::backend), every op of the run is one CUDA graph from the
  // second run on, where nothing between the ops needs the host (runtime/step_recording.hpp).
  recorder_.run(backend_, recordable(), baked_values(), [&] {
    run_segment(segment{});
    buckets_.finish_all(backend_, channels(), gradient_at());
  });
  if (buckets_.half_full())
    fail("executor", "a gradient bucket was left half full after backward",
         "this is a bug in the bucket plan; please report it (training{.bucket_bytes = 0} avoids buckets)");
  return outputs(only);
}

// The loss scale, the divisors and, while dropout acts, its step.
template <compute::ComputeBackend Backend, comm::Communicator Comm>
std::vector<double> rank_program<Backend, Comm>::baked_values() const {
  std::vector<double> v{loss_scale_};
  for (std::int64_t d : loss_.current()) v.push_back(static_cast<double>(d));
  if (dropout_run_.active) v.push_back(static_cast<double>(dropout_run_.step) + 1.0);
  return v;
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
std::vector<std::int64_t> rank_program<Backend, Comm>::counted_local_targets(
    std::span<const tensor_map> batches) {
  return agree_on_local_inputs(program_.nodes, layout_, loss_, batches, std::span<Comm>(axis_comms_),
                               world_rank_);
}

// Whole inputs are checked and counted by each rank alone (every rank sees the same); slices by
// every rank together, unless the trainer gave the step's counts for slices it has checked.
template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::begin_run(std::span<const tensor_map> batches) {
  if (inputs_given_ == io_part::whole) return loss_.begin_run(loss_.counted_targets(program_.nodes, batches));
  loss_.begin_run(loss_.step_targets() ? *loss_.step_targets() : counted_local_targets(batches));
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::upload_inputs(const tensor_map& inputs) {
  const graph_view& g = program_.nodes;
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::input) continue;
    buffer& v = storage_.values()[index(i)];
    if (inputs_given_ == io_part::local)
      backend_.upload(v, given_local_input(g[i], layout_.of(i), inputs).bytes().data());
    else
      backend_.upload(v, local_input(g[i], layout_.of(i), inputs).bytes().data());
    if (inputs_given_ == io_part::whole && g[i].name.view() == kv_context_name)  // its dtype and shape checked above
      check_kv_context_input(g, layout_, i, detail::named_input(g[i], inputs), sizes_.get(size_symbol::seq));
  }
}

}  // namespace shardgraph
