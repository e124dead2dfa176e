#pragma once
// bind() and the executor: turn a compiled program into what one rank runs.
//
//   auto rank = shardgraph::bind(program, config.sizes(batch, seq), comm, cpu::backend{}, mesh, weights);
//   auto outputs = rank.forward({{"input_ids", ids}, {"targets", targets}});   // global host tensors
//
// bind checks every size (divisibility, rank count, element counts within 64 bits) before any
// communication or compute, so a bad size throws the same shardgraph::error on every rank; then it
// plans (plan/), splits the communicator into one group per mesh axis (axis_groups.hpp), allocates
// every value where the memory plan puts it (value_storage.hpp: failing, with the bytes needed and
// available, when they do not fit the device) and loads this rank's weight slices
// (weight_loading.hpp).
// forward() slices the global inputs (rank_io.hpp), runs the steps in order (a repeat block once
// per layer, reading that layer's weights) and returns the outputs, whole on every rank.
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
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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
#include "shardgraph/plan/gradient_buckets.hpp"
#include "shardgraph/plan/held_parameters.hpp"
#include "shardgraph/plan/memory_layout.hpp"
#include "shardgraph/plan/micro_batch_banks.hpp"
#include "shardgraph/plan/overlapped_axes.hpp"
#include "shardgraph/plan/pipeline_stages.hpp"
#include "shardgraph/plan/plan_step_fusion.hpp"
#include "shardgraph/plan/step_index.hpp"
#include "shardgraph/plan/zero3_gathers.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/axis_channels.hpp"
#include "shardgraph/runtime/axis_groups.hpp"
#include "shardgraph/runtime/gradient_buckets.hpp"
#include "shardgraph/runtime/local_layout.hpp"
#include "shardgraph/runtime/loss_divisors.hpp"
#include "shardgraph/runtime/memory_budget.hpp"
#include "shardgraph/runtime/memory_options.hpp"
#include "shardgraph/runtime/memory_report.hpp"
#include "shardgraph/runtime/micro_batch_slots.hpp"
#include "shardgraph/runtime/pipeline_options.hpp"
#include "shardgraph/runtime/pipeline_runner.hpp"
#include "shardgraph/runtime/rank_io.hpp"
#include "shardgraph/runtime/rope_plan.hpp"
#include "shardgraph/runtime/step_recording.hpp"
#include "shardgraph/runtime/value_storage.hpp"
#include "shardgraph/runtime/weight_loading.hpp"
#include "shardgraph/runtime/zero3_gathers.hpp"

namespace shardgraph {

template <compute::ComputeBackend Backend, comm::Communicator Comm>
class rank_program {
 public:
  using buffer = typename Backend::buffer;

  rank_program(const program& p, const model_sizes& sizes, Comm& world, Backend backend,
               const mesh_shape& mesh, const weight_source& weights, const pipeline_options& pipe = {},
               const memory_options& memory = {})
      : program_(checked(p)),
        memory_options_(memory),
        sizes_(sizes),
        backend_(std::move(backend)),
        layout_(program_, sizes, mesh, mesh_coordinates(program_, mesh, world)),
        world_rank_(world.rank()) {
    const graph& g = program_.nodes;
    std::vector<int> coordinates;
    for (int a = 0; a < g.axes.size(); ++a) {
      axis_sizes_.push_back(mesh.size(g.axes.name(a)));
      coordinates.push_back(layout_.coordinate(a));
    }
    plan_stages(pipe);
    axis_comms_ = split_axes(world, std::span<const int>(axis_sizes_), std::span<const int>(coordinates));
    if (pipelined())
      tied_comm_.push_back(split_tied_group(axis_comms_[index(stages_.axis)],
                                            axis_sizes_[index(stages_.axis)], stages_.coordinate));
    fused_ = plan::plan_step_fusion(fusion_inputs(), plan::traits_of<Backend>());
    plan::apply_producer_moves(fused_, step_index_);
    loss_ = loss_divisors(g, layout_, sizes_);
    held_ = plan::plan_held_parameters(g, layout_, layers_, stages_);
    allocate();
    load_weights(weights, world.rank() == 0);
  }

  // This rank's slice of every parameter gradient of a training program, after forward(), keyed
  // by the parameter's name (block weights per layer: "h.3.attn.q.weight") -> (slice, values).
  using tensor_part = shardgraph::tensor_part;
  std::map<std::string, tensor_part> gradients() {
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

  // Visits this rank's slice of every parameter: fn(name, parameter node, layer, value, gradient)
  // where gradient is null in an inference program or for a parameter that gets none. Block
  // weights are visited once per layer ("h.3.attn.q.weight"). Under ZeRO-3 `value` is this rank's
  // chunk of the slice (zero_chunk() elements; local_numel() is the slice's). A gradient that a
  // ZeRO-2/3 bucket reduce-scattered has no whole buffer left (reduced_gradient_chunk has its
  // chunk): `gradient` then points at reused memory.
  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    const graph& g = program_.nodes;
    const std::int64_t saved_layer = layer_;
    for (const plan::held_parameter& held : held_.slices) {
      const int i = held.node;
      layer_ = std::max<std::int64_t>(held.layer, 0);
      buffer* grad = grad_of_[index(i)] >= 0 ? &value(grad_of_[index(i)]) : nullptr;
      fn(parameter_name(g, g[i], layer_), g[i], layer_, zero3_ ? zero3_.stored(i, layer_) : value(i), grad);
    }
    layer_ = saved_layer;
  }

  // This rank's slice of every parameter (for checks and checkpoints): name -> (slice, values).
  // Under ZeRO-3 the slices are all-gathered from the chunks, so every rank must call it.
  std::map<std::string, tensor_part> parameters() {
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
    loss_scale_ = scale;
  }
  double loss_scale() const { return loss_scale_; }

  // Checks the token ids and targets of `batch` against the vocabulary (runtime/token_inputs.hpp),
  // throwing the same error on every rank before any compute, and returns how many targets count
  // (are not the ignore index), per cross_entropy of the program that reads an input.
  std::vector<std::int64_t> counted_targets(const tensor_map& batch) const {
    return loss_.counted_targets(program_.nodes, batch);
  }
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
  const program& compiled() const { return program_; }

  // Runs the program and returns its outputs; with `only`, just the outputs of that name (a training
  // step reads the loss, not the logits: on a GPU their copy to the host would cost more than the step).
  tensor_map forward(const tensor_map& inputs, std::string_view only = {}) {
    if (pipelined()) return forward_through_stages(inputs, only);
    loss_.begin_run(counted_targets(inputs));
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

  // Runs of forward() that replayed a recording of the previous ones, and the recordings made
  // (runtime/step_recording.hpp; 0 on a backend that does not record).
  int replayed_runs() const { return recorder_.replays(); }
  int recordings() const { return recorder_.recordings(); }

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
  std::vector<double> run_pipeline(std::span<const tensor_map> micro_batches) {
    if (static_cast<int>(micro_batches.size()) != stages_.schedule.micro_batches)
      fail("trainer::step",
           std::to_string(micro_batches.size()) + " micro-batches for a pipeline bound for " +
               std::to_string(stages_.schedule.micro_batches),
           "pass as many micro-batches as pipeline_options::micro_batches, or bind again");
    loss_.begin_run(loss_.counted_targets(program_.nodes, micro_batches));  // every one checked first
    pipeline_calls stage{*this};
    return run_pipeline_step(stage, axis_comms_[index(stages_.axis)], stages_, step_index_, micro_batches,
                             slots_.inbox(), observed_in_flight_);
  }

  // forward() of a pipeline: one batch through the stages in order (no schedule, no overlap), for
  // evaluation; the outputs are sent from the last stage to every rank. It also runs the head's
  // backward, which the last stage's phase holds; the next training step starts its sums afresh.
  tensor_map forward_through_stages(const tensor_map& inputs, std::string_view only) {
    loss_.begin_run(counted_targets(inputs));
    pipeline_calls stage{*this};
    forward_stage_by_stage(stage, axis_comms_[index(stages_.axis)], stages_, step_index_, program_.nodes, inputs);
    return outputs(only);
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

  void upload_inputs(const tensor_map& inputs) {
    const graph& g = program_.nodes;
    for (int i = 0; i < g.size(); ++i)
      if (g[i].kind == op::input)
        backend_.upload(storage_.values()[index(i)], local_input(g[i], layout_.of(i), inputs).bytes().data());
  }
  tensor_map outputs(std::string_view only = {}) {
    return download_outputs(backend_, program_.nodes, layout_, memory_.unread,
                            std::span<buffer>(storage_.values()), only);
  }

  void run_segment(const segment& sg) {
    const graph& g = program_.nodes;
    const std::int64_t first = sg.first_layer, end = sg.end_layer < 0 ? layers_ : sg.end_layer;
    std::size_t loop_start = 0;
    layer_ = first;
    in_backward_ = !sg.pre && !sg.forward_block && !sg.post;
    if (sg.zero_tail_input) fill_zero_value(step_index_.backward_end_node);
    if (zero3_ && !pipelined()) gather_unlayered_parameters();  // a pipeline gathers once per step
    for (std::size_t s = 0; s < program_.steps.size(); ++s) {
      const phase ph = phase_of(s);
      if (!runs(sg, ph)) {
        if (ph == phase::forward_block) s = index(step_index_.forward_end_step);
        if (ph == phase::backward_block) s = index(step_index_.backward_end_step);
        continue;
      }
      const step& st = program_.steps[s];
      const node& n = g[st.node];
      switch (st.kind) {
        case step_kind::loop_begin: {
          loop_start = s;
          layer_ = n.reverse ? end - 1 : first;
          if (zero3_) zero3_.gather_layer(backend_, channels(), st.node, layer_, n.reverse, first, end);
          const bool received = n.reverse ? sg.receive_backward_input : sg.receive_forward_input;
          if (!received) {
            buffer& input = value(n.inputs[0]);
            if (&input != &value(st.node)) backend_.copy(input, value(st.node));  // else written there
          }
          if (n.reverse) recompute_layer();
          break;
        }
        case step_kind::loop_end: {
          buffer& result = value(n.inputs[0]);  // before the layer changes: it may be a per-layer value
          const bool reverse = g[n.region].reverse;
          const bool more = reverse ? layer_ > first : layer_ + 1 < end;
          if (more) {
            layer_ += reverse ? -1 : 1;
            if (zero3_) zero3_.wait_for_layer(channels(), layer_);
            if (zero3_)
              zero3_.prefetch(backend_, channels(), n.region, layer_ + (reverse ? -1 : 1), first, end);
            buffer& next_input = value(n.region);
            if (&next_input != &result) backend_.copy(result, next_input);  // else written there already
            s = loop_start;
            if (reverse) recompute_layer();
          } else if (&result != &value(st.node)) {  // else the last layer wrote it there
            backend_.copy(result, value(st.node));
          }
          break;
        }
        default:
          run_step(st);
      }
    }
    if (zero3_ && !pipelined()) release_unlayered_parameters();
  }

  void fill_zero_value(int i) { fill_zero(value(i)); }
  void fill_zero(buffer& b) {
    if constexpr (requires(Backend & be, buffer & x) { be.fill_zero(x); })
      backend_.fill_zero(b);
    else
      fail("executor: pipeline", "this backend has no fill_zero()",
           "use a TrainingBackend (compute/compute_backend.hpp) for pipeline stages");
  }

  void select_bank(int k) { slots_.select(k, storage_, program_.nodes); }

  // Indexes the steps and splits the layers over the pipeline axis (plan/pipeline_stages.hpp),
  // identically on every rank, before any communication.
  void plan_stages(const pipeline_options& pipe) {
    const graph& g = program_.nodes;
    std::int64_t layers = 1;
    for (int i = 0; i < g.size(); ++i)
      if (g[i].kind == op::repeat_begin) layers = sizes_.get(size_symbol::layers);
    step_index_ = plan::index_steps(program_, layers);
    layers_ = step_index_.layers;
    const int axis = program_.pipeline_axis;
    stages_ = plan::plan_pipeline_stages(program_, step_index_, pipe, axis < 0 ? 1 : axis_sizes_[index(axis)],
                                         axis < 0 ? 0 : layout_.coordinate(axis));
  }
  bool computed_here(int i) const { return stages_.computed_here(i); }
  bool needed_here(int i) const { return stages_.needed_here(i); }
  bool holds(int i, std::int64_t layer) const { return stages_.holds(i, layer); }

  // What the pipeline runner (runtime/pipeline_runner.hpp) asks of this rank.
  struct pipeline_calls {
    using buffer = typename Backend::buffer;
    rank_program& rank;

    void select_bank(int k) { rank.select_bank(k); }
    buffer& value(int i) { return rank.value(i); }
    buffer& value_at(int i, std::int64_t layer) { return rank.value_at(i, layer); }
    buffer& output_value(int i) { return rank.storage_.values()[index(i)]; }
    void upload_inputs(const tensor_map& inputs) { rank.upload_inputs(inputs); }
    tensor_map outputs(std::string_view only) { return rank.outputs(only); }
    void run_segment(const segment& sg) { rank.run_segment(sg); }
    void copy(buffer& from, buffer& to) { rank.backend_.copy(from, to); }
    template <class Fn>
    void with_span(buffer& b, Fn&& fn) {
      detail::with_element_type(b.type(), [&](auto zero) {
        using T = decltype(zero);
        fn(rank.template span_of<T>(b, b.numel()));
      });
    }
    void gather_unlayered_parameters() {
      if (rank.zero3_) rank.gather_unlayered_parameters();
    }
    void release_unlayered_parameters() {
      if (rank.zero3_) rank.release_unlayered_parameters();
    }
  };

  int index_of(const node& n) const { return static_cast<int>(&n - &program_.nodes[0]); }

  // Every step but the loop markers. An error from the backend or the communicator (a failed
  // kernel, a collective's timeout) leaves naming the op, its node, the layer and the rank; the
  // trainer adds the step.
  void run_step(const step& st) {
    try {
      run_step_here(st);
    } catch (const error& e) {
      const std::string_view prefix = "shardgraph: ", message = e.what();
      if (message.starts_with(std::string(prefix) + "forward: ")) throw;  // located already
      throw error(std::string(prefix) + located(st.node) + ": " +
                  std::string(message.starts_with(prefix) ? message.substr(prefix.size()) : message));
    }
  }
  // "forward: <op> '<name>' [in layer L] on rank R": where in forward() (which runs the backward
  // too) node i's step is.
  std::string located(int i) const {
    const node& n = program_.nodes[i];
    std::string where = "forward: " + std::string(op_name(n.kind)) + " '" + std::string(n.name.view()) + "'";
    if (n.body() >= 0) where += " in layer " + std::to_string(layer_);
    return where + " on rank " + std::to_string(world_rank_);
  }
  // Whether the loss's calls write the logits' gradients planned with them
  // (plan_cross_entropy_gradient_with_loss): for a seed of 1; under a loss scale the two run apart.
  bool loss_writes_gradient() const { return loss_scale_ == 1.0; }
  void run_step_here(const step& st) {
    const node& n = program_.nodes[st.node];
    if (memory_.unread[index(st.node)]) return;  // only outputs forward() does not return read it
    switch (st.kind) {
      case step_kind::compute:
        if (!fused_.runs(st.node, loss_writes_gradient())) return;  // another node's call wrote it
        run_compute(st.node);
        for (const plan::step_fusion::written_value& w : fused_.written_by(st.node, loss_writes_gradient()))
          check_finite(w.node, w.reported);
        return check_finite(st.node);
      case step_kind::fused:
        if (!fused_.runs(st.node, loss_writes_gradient())) return;  // a product's epilogue wrote it
        run_fused(st.first, st.node);
        return check_finite(st.node);
      case step_kind::communicate:
        if (buckets_.plan().bucketed_grad[index(st.node)] >= 0)
          return buckets_.add(backend_, channels(), st.node, layer_, value(n.inputs[0]), gradient_at());
        return run_collective(st.node);
      case step_kind::slice:
        return run_slice(st.node);
      case step_kind::copy:
        if (buckets_.plan().written_by_bucket[index(st.node)]) return;  // its gradient bucket writes it
        if (memory_.values[index(n.inputs[0])].written_into != st.node)
          run_copy(st.node);  // else its producer wrote it
        if (buckets_.plan().scattered_grad[index(st.node)])  // ZeRO-2, 3
          buckets_.add(backend_, channels(), st.node, layer_, value(st.node), gradient_at());
        return;
      case step_kind::output:  // one that memory_options::outputs leaves out is unread (above)
        return backend_.copy(value(n.inputs[0]), value(st.node));
      case step_kind::loop_begin:
      case step_kind::loop_end:
        return;
    }
  }
  // A copy step: a value into another's memory; a pipeline stage's param_grad is summed.
  void run_copy(int i) {
    const node& n = program_.nodes[i];
    if (pipelined() && n.kind == op::param_grad) {  // summed over the step's micro-batches
      if constexpr (requires(Backend & b, buffer & x) { b.add_scaled(x, x, 1.0); })
        return backend_.add_scaled(value(n.inputs[0]), value(i), 1.0);
      else
        fail("executor: pipeline", "this backend has no add_scaled() to sum gradients over micro-batches",
             "use a TrainingBackend (compute/compute_backend.hpp) for pipeline stages");
    }
    backend_.copy(value(n.inputs[0]), value(i));
  }

  // Activation recomputation (training{.recompute}): forward block values that are not kept per
  // layer are computed again, for layer_, at the start of each backward block iteration.
  bool recomputed(int i) const { return plan::recomputed(program_, i); }
  void recompute_layer() {
    for (std::size_t s : recompute_steps_) run_step(program_.steps[s]);
  }

  void check_finite(int i, int reported = -1) {  // reported: the node named (default i)
    if (!finite_check_ || !is_floating(program_.nodes[i].type) || (in_backward_ && loss_scale_ != 1.0))
      return;
    if constexpr (requires(Backend & b, const buffer& v) {
                    { b.all_finite(v) } -> std::convertible_to<bool>;
                  }) {
      if (backend_.all_finite(value(i))) return;
      fail(located(reported >= 0 ? reported : i),
           "produced a NaN or an infinity (the first op to do so on this rank)",
           "lower the learning rate, clip gradients, or check the inputs and weights feeding this op");
    }
  }

  static const program& checked(const program& p) {
    if (!p.ok()) throw error(std::string(p.error()));
    return p;
  }

  // ---- the memory plan (plan/memory_layout.hpp) ----
  // Values kept once per layer (plan/per_layer.hpp): step fusion asks before the buckets are planned.
  bool per_layer(int i) const {
    return plan::per_layer(program_, step_index_, buckets_.plan().scattered_grad, i);
  }
  // Where every value lives, planned once the buckets have decided which gradients they scatter.
  void plan_value_memory() {
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
  // A value's memory (or a part of it), counted against the device's (runtime/value_storage.hpp).
  buffer allocate_for(int i, dtype type, std::int64_t numel) {
    return storage_.allocate_for(backend_, program_.nodes[i], type, numel);
  }

  // Plans the gradient buckets, ZeRO-3's gathers and where every value lives, and allocates them:
  // every allocation counted against the device's memory, bind failing at its end when they do not fit.
  void allocate() {
    const graph& g = program_.nodes;
    storage_ = value_storage<Backend>(memory_budget_for(backend_, memory_options_.available_bytes));
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
    if (pipelined()) allocate_micro_batch_slots();
    storage_.check(world_rank_);
  }

  // ZeRO-3's chunks and gathers, and the gradient buckets (before the values: a reduce-scattered
  // gradient needs one buffer, not one per layer).
  void plan_gradient_reductions() {
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

  // A pipeline stage's micro-batch slots and its inbox of received block inputs.
  void allocate_micro_batch_slots() {
    const int received = step_index_.forward_begin_node;
    slots_ = micro_batch_slots<Backend>(
        plan::plan_micro_batch_banks(program_, step_index_, stages_, recompute_steps_), stages_.banks,
        stages_.inbox);
    slots_.allocate(storage_, program_.nodes, received,
                    value_at(received, stages_.chunks.front().first).numel(),
                    [&](int i, dtype type, std::int64_t n) { return allocate_for(i, type, n); });
  }

  // ---- gradient buckets and ZeRO-3 gathers (runtime/gradient_buckets.hpp, zero3_gathers.hpp) ----
  // A communication thread per mesh axis that has buckets or ZeRO-3's gathers, where the program
  // asks for them and the communicator allows it (runtime/axis_groups.hpp).
  void start_communication_threads() {
    if (!communication_threads(axis_comms_, program_.overlap_communication)) return;
    const std::vector<bool> used =
        plan::plan_overlapped_axes(buckets_.plan(), zero3_.plan(), static_cast<int>(axis_comms_.size()));
    comm_workers_ = start_comm_workers(axis_comms_, used);
    overlapping_ = std::find(used.begin(), used.end(), true) != used.end();
  }
  axis_channels<Comm> channels() { return {axis_comms_, comm_workers_}; }
  // A param_grad's buffer in a layer, where a bucket writes it.
  auto gradient_at() {
    return [this](int param_grad, std::int64_t layer) -> buffer& { return value_at(param_grad, layer); };
  }
  void gather_unlayered_parameters() { zero3_.gather_unlayered(backend_, channels(), storage_.values()); }
  void release_unlayered_parameters() { zero3_.release_unlayered(backend_, storage_.values()); }

  // Fills every parameter this rank holds from `weights`: its slice (a pipeline stage's layers
  // only), or under ZeRO-3 its chunk of the slice. Rank 0 shows progress for large loads.
  void load_weights(const weight_source& weights, bool reporting_rank) {
    const auto store = [&](int i, std::int64_t layer, const host_tensor& slice) {
      if (zero3_) return zero3_.upload(backend_, i, layer, slice.bytes(), layout_.of(i).numel());  // chunk r
      backend_.upload(storage_.at(i, layer), slice.bytes().data());  // a block weight's layer, or its one
    };
    shardgraph::load_weights(program_.nodes, layout_, held_, weights, reporting_rank, store);
  }

  buffer& value(int i) { return value_at(i, layer_); }
  // Node i's buffer for layer `layer` (where the memory plan puts it), then the node's own: a
  // ZeRO-3 block weight's gathered layer, a per-layer value's layer, or its one value.
  buffer& value_at(int i, std::int64_t layer) {
    const plan::value_place at = memory_.place_of(i, layer);
    if (buffer* gathered = zero3_.gathered_layer(at.node, at.layer)) return *gathered;  // ZeRO-3 block weights
    return storage_.at(at.node, at.layer);
  }

  static std::int64_t product(const std::vector<std::int64_t>& v, std::size_t from, std::size_t to) {
    return checked_product(std::span<const std::int64_t>(v).subspan(from, to - from),
                           "executor: kernel dims");
  }

  void run_compute(int i) {
    if (is_elementwise(program_.nodes[i].kind)) return run_fused(i, i);
    compute::kernel_call<buffer> call = call_for(i);
    if constexpr (requires { requires Backend::products_batched; }) {
      if (!fused_.batched_with[index(i)].empty()) return run_batched(i, call);
    }
    backend_.run(call);
  }

  // A product and those planned to run with it (plan_products_batched): one batched call where
  // each operand's products lie at one stride from the first's (bind places them so), else each
  // call in turn.
  void run_batched(int i, compute::kernel_call<buffer>& call) {
    std::vector<compute::kernel_call<buffer>> calls{call};
    for (int j : fused_.batched_with[index(i)]) calls.push_back(call_for(j));
    const auto operand = [](const compute::kernel_call<buffer>& c, int k) -> const buffer* {
      return k == 0 ? c.in[1] : k == 1 ? c.out : c.bias != nullptr ? c.bias : c.bias_grad;
    };
    bool strided = true;
    for (int k = 0; k < 3 && strided; ++k) {
      const buffer* first = operand(call, k);
      if (first == nullptr) continue;
      const std::ptrdiff_t element = static_cast<std::ptrdiff_t>(dtype_size(first->type()));
      const auto at = [&](std::size_t b) {
        return static_cast<const std::byte*>(Backend::address(*operand(calls[b], k)));
      };
      const std::ptrdiff_t stride = at(1) - at(0);
      strided =
          stride > 0 && stride % element == 0 && stride >= static_cast<std::ptrdiff_t>(first->size_bytes());
      for (std::size_t b = 2; b < calls.size() && strided; ++b) strided = at(b) - at(b - 1) == stride;
      call.batch_strides[k] = stride / element;
    }
    if (!strided) {
      for (const compute::kernel_call<buffer>& c : calls) backend_.run(c);
      return;
    }
    call.batch = static_cast<std::int64_t>(calls.size());
    backend_.run(call);
  }

  // What the fusion plan reads of this rank beyond its program: which values activation
  // recomputation computes again, and which activations are kept per layer (parameters and their
  // gradients are laid out later, by allocate(): the plan reads activations only).
  plan::step_fusion_inputs fusion_inputs() const {
    const graph& g = program_.nodes;
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

  // The divisor of cross_entropy (or its gradient) i in this run (runtime/loss_divisors.hpp).
  std::int64_t loss_divisor(int i) const { return loss_.of(program_.nodes, layout_, i); }
  // What a recording of forward() takes from the host by value: the loss scale and the divisors.
  std::vector<double> baked_values() const {
    std::vector<double> v{loss_scale_};
    for (std::int64_t d : loss_.current()) v.push_back(static_cast<double>(d));
    return v;
  }
  // dims of a cross_entropy or cross_entropy_grad call: {rows, vocab, classes, divisor, ignore_index}
  void set_loss_dims(int i, compute::kernel_call<buffer>& call) const {
    const node& n = program_.nodes[i];
    const local_dims& logits = layout_.of(n.inputs[0]);
    const shape& s = program_.nodes[n.inputs[0]].shape;
    const extent vocab = s[s.rank() - 1];
    call.dims[0] = product(logits.local, 0, 2);
    call.dims[1] = logits.local[2];
    call.dims[2] = sizes_.classes_of(vocab, logits.local[2]);
    call.dims[3] = loss_divisor(i);
    call.dims[4] = n.ignore_index;
  }

  // The kernel call of node i's step.
  compute::kernel_call<buffer> call_for(int i) {
    const node& n = program_.nodes[i];
    compute::kernel_call<buffer> call;
    call.kind = n.kind;
    call.type = n.type;
    call.out = &value(i);
    call.scalar = n.scalar;
    call.transpose_b = n.transpose_b;
    call.rope = rope_.of(i);
    for (int k = 0; k < n.input_count; ++k) call.in[k] = &value(n.inputs[k]);
    if (n.kind == op::linear && fused_.bias_epilogue_of[index(i)] >= 0) {
      const int j = fused_.bias_epilogue_of[index(i)];
      call.out = &value(j);
      call.bias = &value(program_.nodes[j].inputs[1]);
    }
    if (fused_.bias_grad_of[index(i)] >= 0) call.bias_grad = &value(fused_.bias_grad_of[index(i)]);
    if (fused_.key_grad_of[index(i)] >= 0) {
      call.key_grad = &value(fused_.key_grad_of[index(i)]);
      call.value_grad = &value(fused_.value_grad_of[index(i)]);
    }
    if (const int w = fused_.weight_grad_of[index(i)]; w >= 0) {  // and its bias gradient, if paired
      call.weight_grad = &value(w);
      if (fused_.bias_grad_of[index(w)] >= 0) call.bias_grad = &value(fused_.bias_grad_of[index(w)]);
    }
    call.token_major = fused_.token_major[index(i)];
    call.output_kept = fused_.output_kept[index(i)];
    if (loss_writes_gradient() && fused_.logits_grad_of[index(i)] >= 0)
      call.logits_grad = &value(fused_.logits_grad_of[index(i)]);
    if (fused_.forward_output_of[index(i)] >= 0) call.side = &value(fused_.forward_output_of[index(i)]);
    if (const plan::step_fusion::epilogue& e = fused_.epilogue_of[index(i)]; e.out >= 0) {
      call.epilogue = e.kind;
      call.out = &value(e.out);
      call.side = e.side >= 0 ? &value(e.side) : nullptr;
    }
    const std::vector<std::int64_t>& x = layout_.of(n.inputs[0]).local;
    const std::vector<std::int64_t>& out = layout_.of(i).local;
    auto set = [&](std::initializer_list<std::int64_t> dims) {
      std::size_t k = 0;
      for (auto d : dims) call.dims[k++] = d;
    };
    switch (n.kind) {
      case op::embedding: {
        const local_dims& table = layout_.of(n.inputs[1]);
        set({product(x, 0, x.size()), table.local[0], table.local[1], table.offset[0]});
        break;
      }
      case op::position_embedding:
        set({x[0], x[1], x[2]});
        break;
      case op::linear:
        set({product(x, 0, x.size() - 1), x.back(), out.back()});
        break;
      case op::matmul:
        set({product(x, 0, x.size() - 2), x[x.size() - 2], x.back(), out.back()});
        break;
      case op::layer_norm:
      case op::rms_norm:
      case op::softmax:
        set({product(x, 0, x.size() - 1), x.back()});
        break;
      case op::rope:
        set({x[0], x[1], x[2], x[3]});
        break;
      case op::split_heads:
        set({out[0], out[2], out[1], out[3]});
        break;
      case op::merge_heads:
        set({x[0], x[2], x[1], x[3]});
        break;
      case op::attention:
        set({x[0], x[1], layout_.of(n.inputs[1]).local[1], x[2], x[3]});
        break;
      case op::cross_entropy:
        set_loss_dims(i, call);
        break;
      case op::transpose:
        set({product(x, 0, x.size() - 2), x[x.size() - 2], x.back()});
        break;
      case op::linear_weight_grad: {
        const std::vector<std::int64_t>& dy = layout_.of(n.inputs[1]).local;
        set({product(x, 0, x.size() - 1), x.back(), dy.back()});
        break;
      }
      case op::bias_grad:
      case op::layer_norm_grad_x:
      case op::layer_norm_grad_w:
      case op::rms_norm_grad_x:
      case op::rms_norm_grad_w:
      case op::softmax_grad:
        set({product(x, 0, x.size() - 1), x.back()});
        break;
      case op::gelu_grad:
      case op::silu_grad:
        set({layout_.of(i).numel()});
        break;
      case op::ones:  // the seed of backward: d loss / d loss, times the loss scale
        set({layout_.of(i).numel()});
        call.scalar = loss_scale_;
        in_backward_ = true;
        break;
      case op::rope_grad:
        set({x[0], x[1], x[2], x[3]});
        break;
      case op::attention_grad_q:
      case op::attention_grad_k:
      case op::attention_grad_v:
        set({x[0], x[1], layout_.of(n.inputs[1]).local[1], x[2], x[3]});
        break;
      case op::embedding_grad: {
        const local_dims& table = layout_.of(i);
        set({product(x, 0, x.size()), table.local[0], table.local[1], table.offset[0]});
        break;
      }
      case op::position_embedding_grad:
        set({x[0], x[1], x[2], out[0]});
        break;
      case op::cross_entropy_grad:
        set_loss_dims(i, call);
        break;
      default:
        fail("executor: " + std::string(op_name(n.kind)) + " '" + std::string(n.name.view()) + "'",
             "this op has no kernel", "this is a bug in lower(); please report it");
    }
    return call;
  }

  // One kernel for the elementwise chain [first, last] (see compute::elementwise_step).
  void run_fused(int first, int last) {
    const graph& g = program_.nodes;
    compute::kernel_call<buffer> call;
    call.kind = g[last].kind;
    call.type = g[last].type;
    call.out = &value(last);
    call.dims[0] = layout_.of(last).numel();
    // The chain's start: its first node's input, or that node's own value when the product before
    // it has added the bias (plan_bias_epilogues).
    const bool bias_done = fused_.bias_done_by_product[index(first)];
    if (bias_done && first == last) return;
    call.operands[call.operand_count++] = bias_done ? &value(first) : &value(g[first].inputs[0]);
    for (int j = bias_done ? first + 1 : first; j <= last; ++j) {
      const node& n = g[j];
      compute::elementwise_step s{n.kind, -1, 0};
      int other = -1;
      if (j == first)
        other = n.input_count > 1 ? n.inputs[1] : -1;
      else if (n.input_count > 1)
        other = n.inputs[0] == j - 1 ? n.inputs[1] : n.inputs[0];
      if (other >= 0) {
        s.operand = call.operand_count;
        call.operands[call.operand_count++] = &value(other);
        if (n.kind == op::add_bias) s.period = layout_.of(other).numel();
      }
      call.chain[call.chain_length++] = s;
    }
    backend_.run(call);
  }

  compute::block_layout blocks_along(int node_index, int dim, int parts) const {
    const std::vector<std::int64_t>& d = layout_.of(node_index).local;
    compute::block_layout b;
    b.parts = parts;
    b.outer = product(d, 0, index(dim));
    b.mid = d[index(dim)];
    b.inner = product(d, index(dim) + 1, d.size());
    b.element_bytes = static_cast<std::int64_t>(dtype_size(program_.nodes[node_index].type));
    return b;
  }

  void run_slice(int i) {
    const node& n = program_.nodes[i];
    compute::block_layout b = blocks_along(i, n.to_dim, axis_sizes_[index(n.axis)]);
    backend_.slice(value(n.inputs[0]), value(i), b, layout_.coordinate(n.axis));
  }

  // The buffer's memory, for a communicator. It reads and writes that memory directly, so the work
  // a GPU backend has queued on its stream must be finished first.
  template <class T>
  std::span<T> span_of(buffer& b, std::int64_t numel) {
    if constexpr (requires(Backend & be) { be.synchronize(); }) backend_.synchronize();
    return {static_cast<T*>(backend_.data(b)), static_cast<std::size_t>(numel)};
  }

  void run_collective(int i) {
    const node& n = program_.nodes[i];
    const int parts = axis_sizes_[index(n.axis)];
    buffer& in = value(n.inputs[0]);
    buffer& out = value(i);
    if (parts == 1) return backend_.copy(in, out);
    Comm& group = axis_comms_[index(n.axis)];
    const std::int64_t in_numel = layout_.of(n.inputs[0]).numel();
    const std::int64_t out_numel = layout_.of(i).numel();
    detail::with_element_type(n.type, [&](auto zero) {
      using T = decltype(zero);
      switch (n.kind) {
        case op::all_reduce:
          backend_.copy(in, out);
          group.all_reduce(span_of<T>(out, out_numel));
          break;
        case op::all_gather: {
          buffer& staged = storage_.staging(i)[0];
          group.all_gather(std::span<const T>(span_of<T>(in, in_numel)),
                           span_of<T>(staged, in_numel * parts));
          backend_.interleave(staged, out, blocks_along(n.inputs[0], n.from_dim, parts));
          break;
        }
        case op::reduce_scatter: {
          buffer& staged = storage_.staging(i)[0];
          backend_.deinterleave(in, staged, blocks_along(i, n.to_dim, parts));
          group.reduce_scatter(std::span<const T>(span_of<T>(staged, in_numel)), span_of<T>(out, out_numel));
          break;
        }
        case op::all_to_all: {
          buffer& send = storage_.staging(i)[0];
          buffer& received = storage_.staging(i)[1];
          // split the whole to_dim of the input into one block per destination rank
          std::vector<std::int64_t> local_in = layout_.of(n.inputs[0]).local;
          compute::block_layout split;
          split.parts = parts;
          split.outer = product(local_in, 0, index(n.to_dim));
          split.mid = local_in[index(n.to_dim)] / parts;
          split.inner = product(local_in, index(n.to_dim) + 1, local_in.size());
          split.element_bytes = static_cast<std::int64_t>(sizeof(T));
          backend_.deinterleave(in, send, split);
          group.all_to_all(std::span<const T>(span_of<T>(send, in_numel)), span_of<T>(received, in_numel));
          // each received block is the sender's (.., from_dim local, .., to_dim local) piece
          std::vector<std::int64_t> block = layout_.of(i).local;
          block[index(n.from_dim)] /= parts;
          compute::block_layout b;
          b.parts = parts;
          b.outer = product(block, 0, index(n.from_dim));
          b.mid = block[index(n.from_dim)];
          b.inner = product(block, index(n.from_dim) + 1, block.size());
          b.element_bytes = static_cast<std::int64_t>(sizeof(T));
          backend_.interleave(received, out, b);
          break;
        }
        default:
          break;
      }
    });
  }

  program program_;
  memory_options memory_options_;
  model_sizes sizes_;
  Backend backend_;
  local_layout layout_;
  rope_plan rope_ = plan_rope_frequencies(program_, layout_);  // the rope steps' tables
  int world_rank_ = 0;  // errors name it
  std::vector<int> axis_sizes_;
  std::vector<Comm> axis_comms_;
  value_storage<Backend> storage_;  // every value's buffers, the arena and the layer blocks
  std::int64_t layers_ = 1;
  std::int64_t layer_ = 0;
  bool finite_check_ = false;
  double loss_scale_ = 1.0;
  loss_divisors loss_;          // the token inputs and what each mean loss divides by
  plan::held_parameters held_;  // the parameter slices this rank holds (plan/held_parameters.hpp)
  bool in_backward_ = false;                  // forward() has run the seed of backward
  std::vector<std::size_t> recompute_steps_;  // forward block steps run again in each backward iteration
  std::vector<int> grad_of_;                  // parameter node -> its param_grad node (-1: none)
  plan::step_fusion fused_;                   // the steps the backend's calls take over (plan_step_fusion)

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
rank_program<Backend, Comm> bind(const program& p, const model_sizes& sizes, Comm& world, Backend backend,
                                 const mesh_shape& mesh, const weight_source& weights,
                                 const pipeline_options& pipe = {}, const memory_options& memory = {}) {
  return rank_program<Backend, Comm>(p, sizes, world, std::move(backend), mesh, weights, pipe, memory);
}

}  // namespace shardgraph
