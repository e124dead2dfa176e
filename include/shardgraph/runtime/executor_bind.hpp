#pragma once
// bind's planning and allocation, in the order rank_program's constructor runs them: the stages,
// the gradient reductions (ZeRO-3's gathers, the buckets), where every value lives, the buffers,
// the communication threads, each step's calls, and the weights. Member definitions of
// rank_program (runtime/executor.hpp); each reads the plan values before it and writes its own.
#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shardgraph/runtime/executor.hpp"

namespace shardgraph {

template <compute::ComputeBackend Backend, comm::Communicator Comm>
rank_program<Backend, Comm>::rank_program(const program_view& p, const model_sizes& sizes, Comm& world,
                                          Backend backend, const mesh_shape& mesh,
                                          const parameter_origin<Backend>& parameters,
                                          const pipeline_options& pipe, const memory_options& memory)
    : owned_program_(std::make_unique<const owned_program>(checked(p))),
      program_(owned_program_->view()),
      memory_options_(memory),
      sizes_(sizes),
      backend_(std::move(backend)),
      world_(world),
      mesh_(mesh),
      pipe_(pipe),
      layout_(program_, sizes, mesh, mesh_coordinates(program_, mesh, world)),
      world_rank_(world.rank()) {
  const graph_view& g = program_.nodes;
  std::vector<int> coordinates;
  for (int a = 0; a < g.axes.size(); ++a) {
    axis_sizes_.push_back(mesh.size(g.axes.name(a)));
    coordinates.push_back(layout_.coordinate(a));
  }
  plan_stages(pipe);
  if (parameters.shared) {  // before any communication: every rank fails alike
    refuse_training_share(program_, "bind: shared parameters");
    check_shared_parameters(sign_parameters(g, layout_, stages_, layers_), parameters.shared->signature);
  }
  axis_comms_ = split_axes(world, std::span<const int>(axis_sizes_), std::span<const int>(coordinates));
  if (pipelined())
    tied_comm_.push_back(split_tied_group(axis_comms_[index(stages_.axis)], axis_sizes_[index(stages_.axis)],
                                          stages_.coordinate));
  fused_ = plan::plan_step_fusion(fusion_inputs(), plan::traits_of<Backend>(memory_options_.fusion));
  plan::apply_producer_moves(fused_, step_index_);
  loss_ = loss_divisors(g, layout_, sizes_);
  held_ = plan::plan_held_parameters(g, layout_, layers_, stages_);
  allocate(parameters.shared);
  plan_step_calls();
  if (parameters.weights != nullptr) load_weights(*parameters.weights, world.rank() == 0);
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::plan_stages(const pipeline_options& pipe) {
  const graph_view& g = program_.nodes;
  std::int64_t layers = 1;
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == op::repeat_begin) layers = sizes_.get(size_symbol::layers);
  step_index_ = plan::index_steps(program_, layers);
  layers_ = step_index_.layers;
  const int axis = program_.pipeline_axis;
  stages_ = plan::plan_pipeline_stages(program_, step_index_, pipe, axis < 0 ? 1 : axis_sizes_[index(axis)],
                                       axis < 0 ? 0 : layout_.coordinate(axis));
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::plan_value_memory() {
  const plan::memory_inputs in{.program = program_,
                               .steps = step_index_,
                               .layout = layout_,
                               .fused = fused_,
                               .options = memory_options_,
                               .scattered_grad = buckets_.plan().scattered_grad,
                               .pipelined = pipelined(),
                               .views = plan::traits_of<Backend>().views};
  memory_ = plan::plan_memory(in);
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::allocate(std::shared_ptr<parameter_memory<Backend>> shared) {
  const graph_view& g = program_.nodes;
  const bool borrowed = shared != nullptr;
  if (!borrowed && plan::traits_of<Backend>().views && !program_.is_training()) {
    shared = std::make_shared<parameter_memory<Backend>>();  // this binding's, for others to share
    shared->signature = sign_parameters(g, layout_, stages_, layers_);
  }
  storage_ = value_storage<Backend>(memory_budget_for(backend_, memory_options_.available_bytes),
                                    std::move(shared), borrowed);
  recompute_steps_ = plan::recomputed_steps(program_);
  grad_of_.assign(index(g.size()), -1);
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == op::param_grad) grad_of_[index(g[i].origin)] = i;
  plan_gradient_reductions();
  buckets_.allocate_chunks(backend_,
                           [&](int i, dtype type, std::int64_t n) { return allocate_for(i, type, n); });
  plan_value_memory();
  const value_allocation placed{.nodes = g,
                                .layout = layout_,
                                .memory = memory_,
                                .stages = stages_,
                                .axis_sizes = axis_sizes_,
                                .layers = layers_,
                                .sharded_parameters = static_cast<bool>(zero3_)};
  storage_.allocate_values(backend_, placed, [&](int i) {  // ZeRO-3: the chunks this rank stores
    const node& n = g[i];
    zero3_.allocate(
        i, n.region >= 0 ? layers_ : 1, n.region >= 0, [&](std::int64_t l) { return holds(i, l); },
        [&](std::int64_t count) { return allocate_for(i, n.type, count); });
  });
  for (int i = 0; i < g.size(); ++i)  // read here, computed on another stage: zero (needed_here)
    if (g[i].kind != op::parameter && !computed_here(i) && needed_here(i) &&
        !memory_.values[index(i)].per_layer)
      fill_zero_value(i);
  start_communication_threads();
  storage_.allocate_layer_blocks(backend_, memory_, g, layers_, stages_);
  buckets_.allocate_staging(backend_, [&](const std::string& what, dtype type, std::int64_t n) {
    return storage_.allocate(backend_, what, type, n);
  });
  storage_.allocate_arena(backend_, memory_, g, layout_);
  storage_.allocate_saved(backend_, memory_, g, plan::plan_saved_statistics(program_, layout_, sizes_, fused_), layers_,
                          stages_);
  if (pipelined()) allocate_micro_batch_slots();
  storage_.check(world_rank_);
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::plan_gradient_reductions() {
  std::vector<std::int64_t> elements;  // every node's elements on this rank
  for (int i = 0; i < program_.nodes.size(); ++i) elements.push_back(layout_.of(i).numel());
  const int zero_coordinate = program_.zero_axis >= 0 ? layout_.coordinate(program_.zero_axis) : 0;
  const plan::zero3_inputs sharding{
      .compiled = program_,
      .elements = elements,
      .axis_sizes = axis_sizes_,
      .zero_coordinate = zero_coordinate,
      .holds = [&](int i, std::int64_t l) { return holds(i, l); },
  };
  zero3_ = zero3_parameters<Backend, Comm>(plan::plan_zero3_gathers(sharding));
  const plan::gradient_bucket_inputs bucketing{
      .compiled = program_,
      .steps = step_index_,
      .elements = elements,
      .axis_sizes = axis_sizes_,
      .bucket_bytes = program_.bucket_bytes,
      .zero_stage = program_.zero_stage,
      .zero_axis = program_.zero_axis,
      .zero_coordinate = zero_coordinate,
      .packs = plan::traits_of<Backend>().packs,
      .pipelined = pipelined(),
      .overlapped = communication_threads(axis_comms_, program_.overlap_communication),
  };
  buckets_ = bucket_reductions<Backend, Comm>(plan::plan_gradient_buckets(bucketing));
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::allocate_micro_batch_slots() {
  const int received = step_index_.forward_begin_node;
  slots_ = micro_batch_slots<Backend>(
      plan::plan_micro_batch_banks(program_, step_index_, stages_, recompute_steps_), stages_.banks,
      stages_.inbox);
  slots_.allocate(storage_, program_.nodes, received,
                  value_at(received, stages_.chunks.front().first).numel(),
                  [&](int i, dtype type, std::int64_t n) { return allocate_for(i, type, n); });
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::start_communication_threads() {
  if (!communication_threads(axis_comms_, program_.overlap_communication)) return;
  const std::vector<bool> used =
      plan::plan_overlapped_axes(buckets_.plan(), zero3_.plan(), static_cast<int>(axis_comms_.size()));
  comm_workers_ = start_comm_workers(axis_comms_, used);
  overlapping_ = std::find(used.begin(), used.end(), true) != used.end();
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::load_weights(const weight_source& weights, bool reporting_rank) {
  const auto store = [&](int i, std::int64_t layer, const host_tensor& slice) {
    if (zero3_) return zero3_.upload(backend_, i, layer, slice.bytes(), layout_.of(i).numel());  // chunk r
    backend_.upload(storage_.at(i, layer), slice.bytes().data());  // a block weight's layer, or its one
  };
  shardgraph::load_weights(program_.nodes, layout_, held_, weights, reporting_rank, store);
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::plan_step_calls() {
  calls_ = plan::plan_calls({.program = program_,
                             .layout = layout_,
                             .sizes = sizes_,
                             .fused = fused_,
                             .memory = memory_,
                             .buckets = buckets_.plan(),
                             .axis_sizes = axis_sizes_,
                             .divisor_entry = loss_.entries(),
                             .pipelined = pipelined(),
                             .seed_is_one = loss_scale_ == 1.0});
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
plan::step_fusion_inputs rank_program<Backend, Comm>::fusion_inputs() const {
  const graph_view& g = program_.nodes;
  std::vector<bool> again(index(g.size()), false), kept(index(g.size()), false);
  for (int i = 0; i < g.size(); ++i) {
    again[index(i)] = recomputed(i);
    kept[index(i)] = g[i].kind != op::parameter && g[i].kind != op::param_grad && per_layer(i);
  }
  return {.program = program_,
          .steps = step_index_,
          .layout = layout_,
          .recomputed = std::move(again),
          .kept_per_layer = std::move(kept),
          .pipelined = pipelined()};
}
}  // namespace shardgraph
