#pragma once
// bind() and the executor: turn a compiled program into what one rank runs. The class is here;
// bind's planning and allocation are in executor_bind.hpp, the walk over the steps in executor_steps.hpp.
//
//   auto rank = shardgraph::bind(program, config.sizes(batch, seq), comm, cpu::backend{}, mesh, weights);
//   auto outputs = rank.forward({{"input_ids", ids}, {"targets", targets}});   // global host tensors
//   auto mine = rank.forward(slices, {.inputs = io_part::local});   // each rank's own slices
//   auto decode = rank.rebind(config.sizes(batch, 1));   // the same weights (shared_parameters.hpp)
//
// bind checks every size (divisibility, rank count, element counts within 64 bits) before any
// communication or compute, so a bad size throws the same shardgraph::error on every rank; then it
// plans (plan/), splits the communicator into one group per mesh axis (axis_groups.hpp), allocates
// every value where the memory plan puts it (value_storage.hpp: failing, with the bytes needed and
// available, when they do not fit the device) and loads this rank's weight slices
// (weight_loading.hpp).
// forward() slices the global inputs (rank_io.hpp), runs the steps in order (a repeat block once
// per layer, reading that layer's weights) and returns the outputs, whole on every rank; with
// io_options it takes each rank's own slices (checked by every rank together, local_inputs.hpp)
// and returns this rank's slice of each output.
//
// Two things the program leaves to run time, because they depend on sizes:
//  - Gradient buckets (training{.bucket_bytes}): an all_reduce that feeds a param_grad directly is
//    not run where it stands; its input is packed into the bucket it was planned into at bind (in
//    the order backward produces gradients, layers last to first), and the bucket is all-reduced
//    by one collective when its last gradient arrives, writing each gradient to its param_grad.
//    With training{.overlap_communication} and a communicator that allows it, that collective
//    runs on the rank's communication thread for the axis (comm/comm_worker.hpp) while backward
//    goes on: two staging buffers take turns, and a bucket's gradients are written when its
//    reduction has finished (when its staging buffer is wanted again, or at the end of forward()).
//    Under ZeRO-2 and 3 the gradients are Partial on the zero axis (D ranks): a param_grad joins a
//    bucket once it is written, its chunk r (ceil(n / D) elements) into section r, and the bucket
//    is reduce-scattered, rank r receiving its chunk of each (reduced_gradient_chunk), as
//    DeepSpeed's ZeRO-2 and PyTorch's FSDP do. The trainer reads those chunks.
//  - ZeRO-3 (training{.zero_stage = 3}): each rank stores chunk r of ceil(n / D) elements of every
//    parameter slice (D ranks on the zero axis). A repeat block's weights are all-gathered into
//    one of two buffers when their layer starts, and the next layer's into the other (the
//    prefetch); weights outside blocks are gathered when forward() starts and dropped when it ends.
//    Overlapped, the next layer's gather runs on the communication thread while this layer computes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/comm/comm_worker.hpp"
#include "shardgraph/comm/communicator.hpp"
#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/core/weight_source.hpp"
#include "shardgraph/pipeline/partition.hpp"
#include "shardgraph/plan/backend_traits.hpp"
#include "shardgraph/plan/bound_plan.hpp"
#include "shardgraph/plan/call_count.hpp"
#include "shardgraph/plan/call_list.hpp"
#include "shardgraph/plan/gradient_buckets.hpp"
#include "shardgraph/plan/held_parameters.hpp"
#include "shardgraph/plan/memory_layout.hpp"
#include "shardgraph/plan/micro_batch_banks.hpp"
#include "shardgraph/plan/overlapped_axes.hpp"
#include "shardgraph/plan/pipeline_stages.hpp"
#include "shardgraph/plan/plan_step_fusion.hpp"
#include "shardgraph/plan/step_index.hpp"
#include "shardgraph/plan/zero3_gathers.hpp"
#include "shardgraph/program/owned_program.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/axis_channels.hpp"
#include "shardgraph/runtime/axis_groups.hpp"
#include "shardgraph/runtime/call_runner.hpp"
#include "shardgraph/runtime/gradient_buckets.hpp"
#include "shardgraph/runtime/local_inputs.hpp"
#include "shardgraph/runtime/local_layout.hpp"
#include "shardgraph/runtime/loss_divisors.hpp"
#include "shardgraph/runtime/memory_budget.hpp"
#include "shardgraph/runtime/memory_options.hpp"
#include "shardgraph/runtime/memory_report.hpp"
#include "shardgraph/runtime/micro_batch_rows.hpp"
#include "shardgraph/runtime/micro_batch_slots.hpp"
#include "shardgraph/runtime/pipeline_options.hpp"
#include "shardgraph/runtime/pipeline_runner.hpp"
#include "shardgraph/runtime/rank_io.hpp"
#include "shardgraph/runtime/rope_plan.hpp"
#include "shardgraph/runtime/shared_parameters.hpp"
#include "shardgraph/runtime/step_recording.hpp"
#include "shardgraph/runtime/value_storage.hpp"
#include "shardgraph/runtime/weight_loading.hpp"
#include "shardgraph/runtime/zero3_gathers.hpp"

namespace shardgraph {

template <class Backend, class Comm>
struct rank_pipeline_calls;  // executor_pipeline_calls.hpp

template <compute::ComputeBackend Backend, comm::Communicator Comm>
class rank_program {
 public:
  using buffer = typename Backend::buffer;
  using backend_type = Backend;

  // Reads this rank's slice of every parameter from `weights`.
  rank_program(const program_view& p, const model_sizes& sizes, Comm& world, Backend backend,
               const mesh_shape& mesh, const weight_source& weights, const pipeline_options& pipe = {},
               const memory_options& memory = {})
      : rank_program(p, sizes, world, std::move(backend), mesh,
                     parameter_origin<Backend>{.weights = &weights, .shared = nullptr}, pipe, memory) {}
  // Uses the parameters (weights, KV cache) of another binding of the program on this rank: the
  // same buffers, not copies (runtime/shared_parameters.hpp); inference programs only.
  rank_program(const program_view& p, const model_sizes& sizes, Comm& world, Backend backend,
               const mesh_shape& mesh, const shared_parameters<Backend>& shared,
               const pipeline_options& pipe = {}, const memory_options& memory = {})
      : rank_program(p, sizes, world, std::move(backend), mesh,
                     parameter_origin<Backend>{.weights = nullptr, .shared = shared.memory()}, pipe, memory) {
  }

  // This binding's parameters, for bind(..., share_parameters()) at other sizes. Refused for a
  // training program, or a backend without views.
  shared_parameters<Backend> share_parameters() const {
    refuse_training_share(program_, "share_parameters");
    if (!storage_.parameters())
      fail("share_parameters", "this backend has no view(), which shared parameters are",
           "bind each binding with the weights on this backend");
    return shared_parameters<Backend>(storage_.parameters());
  }
  // The program bound again at `sizes` (another batch or seq), on the same communicator, backend,
  // mesh and options, sharing this binding's parameters. Every rank of the mesh calls it together.
  rank_program rebind(const model_sizes& sizes) {
    return rank_program(program_, sizes, world_, backend_, mesh_, share_parameters(), pipe_, memory_options_);
  }
  // Whether this binding and `other` use one copy of the parameters.
  bool shares_parameters_with(const rank_program& other) const {
    return storage_.parameters() != nullptr && storage_.parameters() == other.storage_.parameters();
  }
  const model_sizes& sizes() const { return sizes_; }

  // This rank's slice of every parameter gradient of a training program, after forward(), keyed
  // by the parameter's name (block weights per layer: "h.3.attn.q.weight") -> (slice, values).
  using tensor_part = shardgraph::tensor_part;
  std::map<std::string, tensor_part> gradients();

  // Visits this rank's slice of every parameter: fn(name, parameter node, layer, value, gradient)
  // where gradient is null in an inference program or for a parameter that gets none. Block
  // weights are visited once per layer ("h.3.attn.q.weight"). Under ZeRO-3 `value` is this rank's
  // chunk of the slice (zero_chunk() elements; local_numel() is the slice's). A gradient that a
  // ZeRO-2/3 bucket reduce-scattered has no whole buffer left (reduced_gradient_chunk has its
  // chunk): `gradient` then points at reused memory.
  template <class Fn>
  void for_each_parameter(Fn&& fn);

  // This rank's slice of every parameter (for checks and checkpoints): name -> (slice, values).
  // Under ZeRO-3 the slices are all-gathered from the chunks, so every rank must call it.
  std::map<std::string, tensor_part> parameters();

  // Elements of this rank's slice of parameter p, and (ZeRO-3) of the chunk it stores.
  std::int64_t local_numel(const node& p) const { return layout_.of(index_of(p)).numel(); }
  std::int64_t zero_chunk(const node& p) const { return zero3_.plan().chunk[index(index_of(p))]; }

  // The gradient buckets planned at bind, in the order they are reduced.
  using bucket_report = shardgraph::bucket_report;
  std::vector<bucket_report> gradient_buckets() const { return report_buckets(buckets_.plan()); }

  // ZeRO-2 and 3: this rank's chunk of parameter p's gradient for `layer` (ceil(n / D) of the
  // slice's n elements, zero past n), reduce-scattered over the zero axis in a bucket as
  // backward produced it; null where the gradient was left whole and Partial for the trainer to
  // reduce-scatter (no buckets, pipelines, or a gradient a tensor-parallel bucket writes).
  const buffer* reduced_gradient_chunk(const node& p, std::int64_t layer) const {
    const int grad = grad_of_[index(index_of(p))];
    return grad < 0 ? nullptr : buckets_.reduced_chunk(grad, layer);
  }

  // With the finite check on, forward() stops at the first compute step whose value holds a NaN
  // or an infinity, naming the op, the node and the layer. It costs one pass over every value.
  void set_finite_check(bool on) {
    if constexpr (!requires(Backend & b, const buffer& v) {
                    { b.all_finite(v) } -> std::convertible_to<bool>;
                  })
      if (on)
        fail("set_finite_check", "this backend has no all_finite()", "add all_finite(buffer) to the backend");
    finite_check_ = on;
  }

  // Backward starts from d loss = scale instead of 1, so that every gradient is `scale` times its
  // value (dynamic loss scaling for f16: small gradients stay above f16's smallest number). With a
  // scale other than 1 the finite check covers the forward ops only: an overflow in backward is the
  // loss scaler's to handle, by skipping the step.
  void set_loss_scale(double scale) {
    if (!(scale > 0 && std::isfinite(scale)))
      fail("set_loss_scale", "scale " + std::to_string(scale) + " is not a positive finite number",
           "give a positive scale, or 1 for none");
    const bool seed_changes = (scale == 1.0) != (loss_scale_ == 1.0);
    loss_scale_ = scale;
    if (seed_changes) plan_step_calls();  // a loss's call writes its gradient for a seed of 1 only
  }
  double loss_scale() const { return loss_scale_; }
  // Dropout acts in the runs while run.active (trainer::step sets it per forward; docs/dsl.md).
  void set_dropout(compute::dropout_run run) { dropout_run_ = run; }

  // Checks the token ids and targets of `batch` against the vocabulary (runtime/token_inputs.hpp),
  // throwing the same error on every rank before any compute, and returns how many targets count
  // (are not the ignore index), per cross_entropy of the program that reads an input.
  std::vector<std::int64_t> counted_targets(const tensor_map& batch) const {
    return loss_.counted_targets(program_.nodes, batch);
  }
  // The same for batches of this rank's own slices (io_part::local), summed over the batches and
  // over every rank's slices: every rank calls it, and every rank throws when any rank's are wrong.
  std::vector<std::int64_t> counted_local_targets(std::span<const tensor_map> batches);
  // A mean cross_entropy divides its sum by the number of targets counted in the whole step: by
  // default, those of the batch forward() is given (of all micro-batches, in run_pipeline). The
  // trainer, running one step as several forward() calls, gives the step's counts (the sums of
  // counted_targets over its micro-batches) here, until it clears them.
  void set_step_targets(std::vector<std::int64_t> counts) { loss_.set_step_targets(std::move(counts)); }
  void clear_step_targets() { loss_.clear_step_targets(); }

  // Bytes this rank's program holds, by kind (what bind allocated; the trainer adds its own).
  using memory_report = shardgraph::memory_report;
  memory_report memory() const {
    return report_memory(program_.nodes, storage_, memory_, zero3_, buckets_, slots_);
  }

  // What bind planned for this rank (plan/bound_plan.hpp), for print(plan, out) and tests; valid
  // while this rank_program lives and is not moved.
  plan::bound_plan plan() const {
    return {.compiled = program_,
            .sizes = sizes_,
            .layout = layout_,
            .axis_sizes = axis_sizes_,
            .world_rank = world_rank_,
            .steps = step_index_,
            .stages = stages_,
            .banks = slots_.plan(),
            .fusion = fused_,
            .calls = calls_,
            .memory = memory_,
            .buckets = buckets_.plan(),
            .zero3 = zero3_.plan(),
            .recomputed_steps = recompute_steps_,
            .overlapped = overlapping_,
            .totals = memory()};
  }

  // Whether gradient buckets and ZeRO-3's prefetch run on communication threads while the main
  // thread computes (training{.overlap_communication}, a communicator that allows it, and a bucket
  // or a ZeRO-3 gather to run).
  bool overlaps_communication() const { return overlapping_; }

  // How many bias gradients their weight product or layer norm weight gradient writes
  // (plan_bias_grad_epilogues).
  int bias_gradients_with_weights() const {
    return static_cast<int>(std::count_if(fused_.bias_grad_of.begin(), fused_.bias_grad_of.end(),
                                          [](int bias_grad) { return bias_grad >= 0; }));
  }

  Backend& backend() { return backend_; }
  Comm& axis_communicator(int axis) { return axis_comms_[index(axis)]; }
  int axis_size(int axis) const { return axis_sizes_[index(axis)]; }

  int coordinate(std::string_view axis) const {
    return layout_.coordinate(program_.nodes.axes.index_of(axis));
  }
  const local_layout& layout() const { return layout_; }
  const program_view& compiled() const { return program_; }

  // Runs the program and returns its outputs; with `only`, just the outputs of that name (a training
  // step reads the loss, not the logits: on a GPU their copy to the host would cost more than the step).
  tensor_map forward(const tensor_map& inputs, std::string_view only = {}) {
    return forward(inputs, io_options{}, only);
  }
  // With io.inputs = io_part::local each rank passes its own slice of every input (of shape
  // layout().of(input).local); with io.outputs = io_part::local it receives its slice of each
  // output (local_outputs in rank_io.hpp).
  tensor_map forward(const tensor_map& inputs, io_options io, std::string_view only = {});

  // Runs of forward() that replayed a recording of the previous ones, and the recordings made
  // (runtime/step_recording.hpp; 0 on a backend that does not record).
  int replayed_runs() const { return recorder_.replays(); }
  int recordings() const { return recorder_.recordings(); }

  // The calls each step makes (plan/call_list.hpp), for the backward seed of the loss scale set.
  const plan::call_list& calls() const { return calls_; }
  // The compute-backend calls one forward() makes, read from the call list (plan/call_count.hpp):
  // for a rank that runs the whole program (not a pipeline stage), without ZeRO-3's gathers and
  // the buckets' packing.
  std::int64_t planned_backend_calls() const {
    return plan::count_backend_calls(program_, calls_, step_index_, memory_, recompute_steps_);
  }

  // ---- pipeline stages (pipeline_options at bind) ----
  bool pipelined() const { return stages_.pipelined(); }
  const pipeline::schedule& pipeline_schedule() const { return stages_.schedule; }
  const pipeline::stage_partition& pipeline_partition() const { return stages_.partition; }
  // The layers this rank runs, per model chunk: [first, end).
  std::vector<std::pair<std::int64_t, std::int64_t>> pipeline_chunks() const { return stages_.chunks; }
  // The most micro-batches whose activations were alive at once in the steps run so far (the
  // schedule's count, memory().micro_batches_in_flight, is what bind allocated for).
  int observed_micro_batches_in_flight() const { return observed_in_flight_; }

  // Runs one optimizer step's micro-batches through the schedule: forward and backward of every
  // chunk this rank holds, activations and their gradients sent to the neighbouring stages. The
  // parameter gradients this rank holds end as the sum over micro-batches (the caller zeroes them
  // first with zero_gradients()). Returns each micro-batch's loss, on every rank.
  std::vector<double> run_pipeline(std::span<const tensor_map> micro_batches, io_options io = {}) {
    inputs_given_ = io.inputs;
    if (static_cast<int>(micro_batches.size()) != stages_.schedule.micro_batches)
      fail("trainer::step",
           std::to_string(micro_batches.size()) + " micro-batches for a pipeline bound for " +
               std::to_string(stages_.schedule.micro_batches),
           "pass as many micro-batches as pipeline_options::micro_batches, or bind again");
    begin_run(micro_batches);  // every one checked first
    pipeline_calls stage{*this};
    return run_pipeline_step(stage, axis_comms_[index(stages_.axis)], stages_, step_index_, micro_batches,
                             slots_.inbox(), observed_in_flight_);
  }

  // forward() of a pipeline: one batch through the stages in order (no schedule, no overlap), for
  // evaluation; the outputs are sent from the last stage to every rank. It also runs the head's
  // backward, which the last stage's phase holds; the next training step starts its sums afresh.
  // Whole inputs of k times the bound batch's rows run as k micro-batches through a forward-only
  // pipeline, their outputs' rows joined (runtime/micro_batch_rows.hpp).
  tensor_map forward_through_stages(const tensor_map& inputs, std::string_view only) {
    const graph_view& g = program_.nodes;
    const std::int64_t count = inputs_given_ == io_part::whole ? micro_batch_count(g, layout_, inputs) : 1;
    pipeline_calls stage{*this};
    Comm& pp = axis_comms_[index(stages_.axis)];
    if (count == 1) {
      begin_run(std::span<const tensor_map>(&inputs, 1));
      forward_stage_by_stage(stage, pp, stages_, step_index_, g, inputs);
      return outputs(only);
    }
    const std::vector<tensor_map> parts = split_micro_batch_rows(g, layout_, inputs, count);
    begin_run(parts);  // every one checked first
    const std::vector<tensor_map> results =
        forward_micro_batches(stage, pp, stages_, step_index_, g, std::span<const tensor_map>(parts), only);
    return join_micro_batch_rows(g, results);
  }

  // Sets every parameter gradient this rank holds to zero (pipelines sum them over micro-batches).
  void zero_gradients() {
    for_each_parameter([&](const std::string&, const node&, std::int64_t, buffer&, buffer* grad) {
      if (grad != nullptr) fill_zero(*grad);
    });
  }

  // Whether this rank counts parameter p in the gradient norm on the pipeline axis: a weight on two
  // stages (tied to the embedding) is counted by the first.
  bool counts_on_pipeline(const node& p) const {
    const int i = index_of(p);
    return !pipelined() || p.region >= 0 || !stages_.reads_pre[index(i)] || stages_.holds_first;
  }
  // Parameters held by the first and the last stage at once (GPT-2's wte): their gradient sums
  // must be added over this group.
  bool tied(const node& p) const {
    const int i = index_of(p);
    return stages_.tied && p.region < 0 && stages_.reads_pre[index(i)] && stages_.reads_post[index(i)];
  }
  Comm& tied_communicator() { return tied_comm_.front(); }

 private:
  static std::size_t index(int i) { return static_cast<std::size_t>(i); }

  rank_program(const program_view& p, const model_sizes& sizes, Comm& world, Backend backend,
               const mesh_shape& mesh, const parameter_origin<Backend>& parameters,
               const pipeline_options& pipe, const memory_options& memory);

  using segment = step_segment;  // what one run over the steps executes

  using phase = plan::phase;
  phase phase_of(std::size_t s) const { return step_index_.phase_of(s); }
  static bool runs(const segment& sg, phase ph) {
    switch (ph) {
      case phase::pre:
        return sg.pre;
      case phase::forward_block:
        return sg.forward_block;
      case phase::post:
        return sg.post;
      case phase::backward_block:
        return sg.backward_block;
      case phase::tail:
        return sg.tail;
    }
    return false;
  }

  // A run whose ops need nothing from the host between them: one rank alone (no collective but
  // copies, no communication thread), no finite check reading values back, no ZeRO-3 gathers.
  bool recordable() const {
    const bool alone = std::all_of(axis_sizes_.begin(), axis_sizes_.end(), [](int n) { return n == 1; });
    return alone && !finite_check_ && !zero3_ && !overlapping_ && buckets_.plan().buckets.empty();
  }

  // A run starts: its inputs are checked and its targets counted (runtime/executor_io.hpp).
  void begin_run(std::span<const tensor_map> batches);
  tensor_map run_forward(const tensor_map& inputs, std::string_view only);  // not pipelined
  void upload_inputs(const tensor_map& inputs);
  tensor_map outputs(std::string_view only = {}) {
    return download_outputs(backend_, program_.nodes, layout_, memory_.unread,
                            std::span<buffer>(storage_.values()), only);
  }

  void run_segment(const segment& sg);

  void fill_zero_value(int i) { fill_zero(value(i)); }
  void fill_zero(buffer& b);

  void select_bank(int k) { slots_.select(k, storage_, program_.nodes); }

  // Indexes the steps and splits the layers over the pipeline axis (plan/pipeline_stages.hpp),
  // identically on every rank, before any communication.
  void plan_stages(const pipeline_options& pipe);
  bool computed_here(int i) const { return stages_.computed_here(i); }
  bool needed_here(int i) const { return stages_.needed_here(i); }
  bool holds(int i, std::int64_t layer) const { return stages_.holds(i, layer); }

  // What the pipeline runner (runtime/pipeline_runner.hpp) asks of this rank
  // (executor_pipeline_calls.hpp).
  using pipeline_calls = rank_pipeline_calls<Backend, Comm>;
  friend struct rank_pipeline_calls<Backend, Comm>;

  int index_of(const node& n) const { return static_cast<int>(&n - &program_.nodes[0]); }

  // Every step but the loop markers: the calls planned for it (plan/call_list.hpp). An error from
  // the backend or the communicator (a failed kernel, a collective's timeout) leaves naming the op,
  // its node, the layer and the rank; the trainer adds the step.
  void run_step(std::size_t s);
  // "forward: <op> '<name>' [in layer L] on rank R": where in forward() (which runs the backward
  // too) node i's step is.
  std::string located(int i) const;
  // Hands one call to the backend, the communicator or the bucket, then checks what it wrote.
  void run_call(const plan::bound_call& c);
  call_runner<Backend, Comm> runner() {
    return {backend_, lowering_, rope_, loss_.current(), loss_scale_, dropout_run_, layer_};
  }
  // A pipeline stage's param_grad, summed over the step's micro-batches.
  void sum_gradient(buffer& from, buffer& to);

  // Activation recomputation (training{.recompute}): forward block values that are not kept per
  // layer are computed again, for layer_, at the start of each backward block iteration.
  bool recomputed(int i) const { return plan::recomputed(program_, i); }
  void recompute_layer() {
    for (std::size_t s : recompute_steps_) run_step(s);
  }

  // reported: the node the error names (default i).
  void check_finite(int i, int reported = -1);

  static const program_view& checked(const program_view& p) { return runnable_on<Backend>(p); }

  // ---- the memory plan (plan/memory_layout.hpp) ----
  // Values kept once per layer (plan/per_layer.hpp): step fusion asks before the buckets are planned.
  bool per_layer(int i) const {
    return plan::per_layer(program_, step_index_, buckets_.plan().scattered_grad, i);
  }
  // Where every value lives, planned once the buckets have decided which gradients they scatter.
  void plan_value_memory();
  // A value's memory (or a part of it), counted against the device's (runtime/value_storage.hpp).
  buffer allocate_for(int i, dtype type, std::int64_t numel) {
    return storage_.allocate_for(backend_, program_.nodes[i], type, numel);
  }

  // Plans the gradient buckets, ZeRO-3's gathers and where every value lives, and allocates them:
  // every allocation counted against the device's memory, bind failing at its end when they do not
  // fit. The parameters are views into `shared` when it is given (allocated and filled already).
  void allocate(std::shared_ptr<parameter_memory<Backend>> shared);

  // ZeRO-3's chunks and gathers, and the gradient buckets (before the values: a reduce-scattered
  // gradient needs one buffer, not one per layer).
  void plan_gradient_reductions();

  // A pipeline stage's micro-batch slots and its inbox of received block inputs.
  void allocate_micro_batch_slots();

  // ---- gradient buckets and ZeRO-3 gathers (runtime/gradient_buckets.hpp, zero3_gathers.hpp) ----
  // A communication thread per mesh axis that has buckets or ZeRO-3's gathers, where the program
  // asks for them and the communicator allows it (runtime/axis_groups.hpp).
  void start_communication_threads();
  axis_channels<Comm> channels() { return {axis_comms_, comm_workers_}; }
  // A param_grad's buffer in a layer, where a bucket writes it.
  auto gradient_at() {
    return [this](int param_grad, std::int64_t layer) -> buffer& { return value_at(param_grad, layer); };
  }
  void gather_unlayered_parameters() { zero3_.gather_unlayered(backend_, channels(), storage_.values()); }
  void release_unlayered_parameters() { zero3_.release_unlayered(backend_, storage_.values()); }

  // Fills every parameter this rank holds from `weights`: its slice (a pipeline stage's layers
  // only), or under ZeRO-3 its chunk of the slice. Rank 0 shows progress for large loads.
  void load_weights(const weight_source& weights, bool reporting_rank);

  buffer& value(int i) { return value_at(i, layer_); }
  // Node i's buffer for layer `layer` (where the memory plan puts it), then the node's own: a
  // ZeRO-3 block weight's gathered layer, a per-layer value's layer, or its one value.
  buffer& value_at(int i, std::int64_t layer) {
    const plan::value_place at = memory_.place_of(i, layer);
    if (buffer* gathered = zero3_.gathered_layer(at.node, at.layer)) return *gathered;  // ZeRO-3 block weights
    return storage_.at(at.node, at.layer);
  }

  // Every step's calls, for the backward's seed of the current loss scale: a loss's call writes
  // the logits' gradient planned with it for a seed of 1 only (plan_cross_entropy_gradient_with_loss).
  void plan_step_calls();

  // What the fusion plan reads of this rank beyond its program: which values activation
  // recomputation computes again, and which activations are kept per layer (parameters and their
  // gradients are laid out later, by allocate(): the plan reads activations only).
  plan::step_fusion_inputs fusion_inputs() const;

  // What a recording of forward() takes from the host by value (runtime/executor_io.hpp).
  std::vector<double> baked_values() const;
  // The buffer's memory, for a communicator (runtime/call_runner.hpp).
  template <class T>
  std::span<T> span_of(buffer& b, std::int64_t numel) {
    return host_span<T>(backend_, b, numel);
  }

  std::unique_ptr<const owned_program> owned_program_;  // the rank's copy of the program it was bound from
  program_view program_;                                // into it
  memory_options memory_options_;
  model_sizes sizes_;
  Backend backend_;
  Comm world_;  // what the rank was bound on, and split into axis_comms_ (rebind splits it again)
  mesh_shape mesh_;
  pipeline_options pipe_;
  compute::fused_lowering<Backend> lowering_;  // the fused kinds the backend does not run, as their parts
  local_layout layout_;
  rope_plan rope_ = plan_rope_frequencies(program_, layout_);  // the rope steps' tables
  int world_rank_ = 0;  // errors name it
  std::vector<int> axis_sizes_;
  std::vector<Comm> axis_comms_;
  value_storage<Backend> storage_;  // every value's buffers, the arena and the layer blocks
  std::int64_t layers_ = 1;
  std::int64_t layer_ = 0;
  bool finite_check_ = false;
  io_part inputs_given_ = io_part::whole;  // this run's inputs: whole, or this rank's slices
  double loss_scale_ = 1.0;
  compute::dropout_run dropout_run_;  // dropout is the identity unless a training step sets it
  loss_divisors loss_;          // the token inputs and what each mean loss divides by
  plan::held_parameters held_;  // the parameter slices this rank holds (plan/held_parameters.hpp)
  bool in_backward_ = false;                  // forward() has run the seed of backward
  std::vector<std::size_t> recompute_steps_;  // forward block steps run again in each backward iteration
  std::vector<int> grad_of_;                  // parameter node -> its param_grad node (-1: none)
  plan::step_fusion fused_;                   // the steps the backend's calls take over (plan_step_fusion)
  plan::call_list calls_;                     // each step's calls (plan_calls)

  plan::memory_layout memory_;  // where every value lives (plan/memory_layout.hpp)

  bucket_reductions<Backend, Comm> buckets_;  // the bucket plan, its staging buffers and chunks
  zero3_parameters<Backend, Comm> zero3_;    // ZeRO-3: the stored chunks, gathered weights and their plan

  // Pipeline stages (pipeline_options): this rank's layers, its slots.
  plan::pipeline_stages stages_;  // plan/pipeline_stages.hpp
  std::vector<Comm> tied_comm_;  // the first and last stage (empty: none)
  micro_batch_slots<Backend> slots_;  // the values of the micro-batches in flight, and the inbox
  static constexpr std::size_t no_step = plan::step_index::no_step;
  plan::step_index step_index_;  // producers, readers and phases of the steps (plan/step_index.hpp)
  int observed_in_flight_ = 0;
  bool overlapping_ = false;                 // some axis has a communication thread
  // Last, so that they stop before the buffers their jobs read are freed: per mesh axis, the
  // communication thread of its buckets and ZeRO-3 gathers (null: none).
  std::vector<std::unique_ptr<comm::comm_worker<Comm>>> comm_workers_;
  step_recorder<Backend> recorder_;  // (its recording reads the buffers above: it goes first)
};

template <compute::ComputeBackend Backend, comm::Communicator Comm>
rank_program<Backend, Comm> bind(const program_view& p, const model_sizes& sizes, Comm& world, Backend backend,
                                 const mesh_shape& mesh, const weight_source& weights,
                                 const pipeline_options& pipe = {}, const memory_options& memory = {}) {
  return rank_program<Backend, Comm>(p, sizes, world, std::move(backend), mesh, weights, pipe, memory);
}

// Binds `p` at `sizes` with the parameters of another binding of it on this rank (its
// share_parameters()): no weights are read, and the KV cache is the same.
template <compute::ComputeBackend Backend, comm::Communicator Comm>
rank_program<Backend, Comm> bind(const program_view& p, const model_sizes& sizes, Comm& world,
                                 Backend backend, const mesh_shape& mesh,
                                 const shared_parameters<Backend>& shared, const pipeline_options& pipe = {},
                                 const memory_options& memory = {}) {
  return rank_program<Backend, Comm>(p, sizes, world, std::move(backend), mesh, shared, pipe, memory);
}

}  // namespace shardgraph

#include "shardgraph/runtime/executor_bind.hpp"   // IWYU pragma: export
#include "shardgraph/runtime/executor_io.hpp"     // IWYU pragma: export
#include "shardgraph/runtime/executor_parameters.hpp"  // IWYU pragma: export
#include "shardgraph/runtime/executor_pipeline_calls.hpp"  // IWYU pragma: export
#include "shardgraph/runtime/executor_steps.hpp"  // IWYU pragma: export
