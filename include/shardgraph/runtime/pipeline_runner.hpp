#pragma once
// pipeline_runner: runs one rank's part of a pipeline (plan/pipeline_stages.hpp), driving the rank's
// executor through a narrow set of calls and moving boundary values over the pipeline axis.
//
//   run_pipeline_step(stage, pp, stages, idx, micro_batches, inbox, observed)   // a training step
//   forward_stage_by_stage(stage, pp, stages, idx, nodes, inputs)             // one batch, for evaluation
//   forward_micro_batches(stage, pp, stages, idx, nodes, micro_batches, only) // forward only, overlapped
//
// `Stage` is the executor seen through these calls (rank_program::pipeline_calls):
//   Stage::buffer                          the backend's buffer type
//   select_bank(k)                         makes micro-batch slot k's values the running ones
//   value(i), value_at(i, layer)           node i's running buffer (of block layer `layer`)
//   output_value(i)                        output node i's buffer
//   upload_inputs(batch), outputs(name)    the program's inputs in, its outputs out (host tensors)
//   restore_outputs(outputs)               outputs(name)'s host tensors back into the output buffers
//   run_segment(step_segment)              runs the steps of the phases and layers named
//   copy(from, to)                         a device copy
//   with_span(b, fn)                       fn(std::span<T>) over b's memory (T: b's element type)
//   gather_unlayered_parameters(), release_unlayered_parameters()   ZeRO-3's weights outside the block
//
// Boundary values go to the neighbouring virtual stage with tags unique per (micro-batch, stage,
// direction): forward j's output to j + 1, backward j's input gradient to j - 1.
#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/pipeline/schedule.hpp"
#include "shardgraph/plan/pipeline_stages.hpp"
#include "shardgraph/plan/step_index.hpp"
#include "shardgraph/runtime/step_segment.hpp"

namespace shardgraph {

// Virtual stage j's forward over layers [first, end) of `total` stages: the embeddings on the
// first stage, the head, loss and the head's backward on the last; the block's input received
// from stage j - 1 on the others.
inline step_segment stage_forward_segment(int j, int total, std::int64_t first, std::int64_t end) {
  step_segment sg;
  sg.pre = j == 0;
  sg.receive_forward_input = j > 0;
  sg.post = j == total - 1;
  sg.backward_block = sg.tail = false;
  sg.first_layer = first;
  sg.end_layer = end;
  return sg;
}

// Virtual stage j's backward over layers [first, end): its input gradient received from stage
// j + 1 (but on the last stage, whose forward action ran the head's backward); the first stage's
// tail takes the embeddings' gradients.
inline step_segment stage_backward_segment(int j, int total, std::int64_t first, std::int64_t end) {
  step_segment sg;
  sg.pre = sg.forward_block = sg.post = false;
  sg.receive_backward_input = j < total - 1;
  sg.tail = j == 0;
  sg.first_layer = first;
  sg.end_layer = end;
  return sg;
}

// One boundary value to or from the neighbouring stage on the pipeline axis.
template <class Stage, class Comm>
void transfer_boundary(Stage& stage, Comm& pp, typename Stage::buffer& b, int peer, int tag, bool send) {
  stage.with_span(b, [&](auto values) {
    using T = typename decltype(values)::element_type;
    if (send)
      pp.send(std::span<const T>(values), peer, tag);
    else
      pp.recv(values, peer, tag);
  });
}

// One training step's run of this rank's action list. Each micro-batch takes a free slot (bank)
// at its first action and gives it back after its last backward; activations received ahead of
// their forward wait in the inbox, since the slot they go to may still hold an earlier micro-batch.
template <class Stage, class Comm>
class pipeline_step_run {
 public:
  using buffer = typename Stage::buffer;

  pipeline_step_run(Stage& stage, Comm& pp, const plan::pipeline_stages& stages, const plan::step_index& idx,
                    std::vector<buffer>& inbox, int& observed_in_flight, int micro_batches)
      : stage_(stage),
        pp_(pp),
        stages_(stages),
        idx_(idx),
        inbox_(inbox),
        observed_in_flight_(observed_in_flight),
        slot_of_(at(micro_batches), -1),
        backwards_left_(at(micro_batches), stages.schedule.virtual_stages) {
    for (int k = stages.banks - 1; k >= 0; --k) free_slots_.push_back(k);
    for (int k = static_cast<int>(inbox.size()) - 1; k >= 0; --k) free_inbox_.push_back(k);
  }

  // Runs every action; returns each micro-batch's loss (computed on the last stage; 0 elsewhere).
  template <class Batch>
  std::vector<double> run(std::span<const Batch> micro_batches) {
    const pipeline::schedule& s = stages_.schedule;
    const int r = stages_.coordinate, total = s.stages();
    std::vector<double> losses(micro_batches.size(), 0.0);
    for (const pipeline::action& a : s.per_rank[at(r)]) {
      const int j = s.virtual_stage(r, a.chunk);
      const auto [first, end] = stages_.chunks[at(a.chunk)];
      const int tag_base = (a.micro_batch * total + j) * 2;
      switch (a.kind) {
        case pipeline::action_kind::recv_activation:
          receive_activation(a, tag_base);
          break;
        case pipeline::action_kind::forward:
          enter(a.micro_batch);
          if (j > 0) take_received_input(a, first);
          stage_.upload_inputs(micro_batches[at(a.micro_batch)]);
          stage_.run_segment(stage_forward_segment(j, total, first, end));
          if (j == total - 1) losses[at(a.micro_batch)] = stage_.outputs("loss").at("loss").at(0);
          if (j == total - 1 && j != 0 && stages_.tied) run_tied_tail();
          break;
        case pipeline::action_kind::send_activation:  // to virtual stage j + 1
          enter(a.micro_batch);
          transfer_boundary(stage_, pp_, stage_.value(idx_.forward_end_node), a.peer, tag_base + 2, true);
          break;
        case pipeline::action_kind::recv_gradient:
          enter(a.micro_batch);
          transfer_boundary(stage_, pp_, stage_.value(idx_.backward_begin_node), a.peer, tag_base + 1, false);
          break;
        case pipeline::action_kind::backward:
          enter(a.micro_batch);
          stage_.run_segment(stage_backward_segment(j, total, first, end));
          break;
        case pipeline::action_kind::send_gradient:  // to virtual stage j - 1
          enter(a.micro_batch);
          transfer_boundary(stage_, pp_, stage_.value(idx_.backward_end_node), a.peer, tag_base - 1, true);
          break;
      }
      if (a.kind == pipeline::action_kind::backward && --backwards_left_[at(a.micro_batch)] == 0)
        free_slots_.push_back(slot_of_[at(a.micro_batch)]);
    }
    return losses;
  }

 private:
  static std::size_t at(int i) { return static_cast<std::size_t>(i); }

  // Makes micro-batch m's slot the running one, giving it a free slot at its first action.
  void enter(int m) {
    if (slot_of_[at(m)] < 0) {
      if (free_slots_.empty())
        fail("executor: pipeline", "micro-batch " + std::to_string(m) + " found no free activation slot",
             "this is a bug in the slot count of the schedule; please report it");
      slot_of_[at(m)] = free_slots_.back();
      free_slots_.pop_back();
      observed_in_flight_ =
          std::max(observed_in_flight_, stages_.banks - static_cast<int>(free_slots_.size()));
    }
    stage_.select_bank(slot_of_[at(m)]);
  }

  void receive_activation(const pipeline::action& a, int tag_base) {
    if (free_inbox_.empty())
      fail("executor: pipeline", "no free buffer to receive micro-batch " + std::to_string(a.micro_batch),
           "this is a bug in the inbox count of the schedule; please report it");
    const int k = free_inbox_.back();
    free_inbox_.pop_back();
    waiting_[{a.micro_batch, a.chunk}] = k;
    transfer_boundary(stage_, pp_, inbox_[at(k)], a.peer, tag_base, false);
  }

  // Moves the activation received for this forward into the block's input of layer `first`.
  void take_received_input(const pipeline::action& a, std::int64_t first) {
    const auto w = waiting_.find({a.micro_batch, a.chunk});
    if (w == waiting_.end())
      fail("executor: pipeline",
           "forward of micro-batch " + std::to_string(a.micro_batch) + " before its input arrived",
           "this is a bug in the schedule; please report it (pipeline::verify should have caught it)");
    stage_.copy(inbox_[at(w->second)], stage_.value_at(idx_.forward_begin_node, first));
    free_inbox_.push_back(w->second);
    waiting_.erase(w);
  }

  // The last stage's tail, from a zero gradient, adds the head's part of a weight tied to the
  // embedding (the tied group sums it with the first stage's). It needs nothing from the backward,
  // so it runs in the forward action, and the head's weight-sized gradient is not kept per
  // micro-batch in flight.
  void run_tied_tail() {
    step_segment tail;
    tail.pre = tail.forward_block = tail.post = tail.backward_block = false;
    tail.zero_tail_input = true;
    stage_.run_segment(tail);
  }

  Stage& stage_;
  Comm& pp_;
  const plan::pipeline_stages& stages_;
  const plan::step_index& idx_;
  std::vector<buffer>& inbox_;
  int& observed_in_flight_;
  std::vector<int> slot_of_;                    // per micro-batch: its slot (-1: none yet)
  std::vector<int> free_slots_;                 // taken from the back
  std::vector<int> backwards_left_;             // per micro-batch: backward actions still to run
  std::map<std::pair<int, int>, int> waiting_;  // (micro-batch, chunk) -> inbox buffer received into
  std::vector<int> free_inbox_;
};

// Runs one optimizer step's micro-batches through the schedule: forward and backward of every
// chunk this rank holds, activations and their gradients sent to the neighbouring stages. Returns
// each micro-batch's loss, on every rank (broadcast from the last stage). `observed_in_flight`
// rises to the most micro-batches whose slots were taken at once.
template <class Stage, class Comm, class Batch>
std::vector<double> run_pipeline_step(Stage& stage, Comm& pp, const plan::pipeline_stages& stages,
                                      const plan::step_index& idx, std::span<const Batch> micro_batches,
                                      std::vector<typename Stage::buffer>& inbox, int& observed_in_flight) {
  stage.gather_unlayered_parameters();  // the weights outside the block this stage holds
  pipeline_step_run<Stage, Comm> step(stage, pp, stages, idx, inbox, observed_in_flight,
                                      static_cast<int>(micro_batches.size()));
  std::vector<double> losses = step.run(micro_batches);
  stage.release_unlayered_parameters();
  pp.broadcast(std::span<double>(losses), stages.schedule.ranks - 1);
  return losses;
}

// Runs this rank's virtual stages of one forward in order: a stage's block input received from the
// stage before it (tag tag_base + j for virtual stage j), its result sent to the next. Tags differ
// per micro-batch when tag_base steps by the number of virtual stages.
template <class Stage, class Comm>
void run_forward_stages(Stage& stage, Comm& pp, const plan::pipeline_stages& stages,
                        const plan::step_index& idx, int tag_base) {
  const int p = stages.schedule.ranks, r = stages.coordinate;
  const int total = stages.schedule.stages();
  for (int j = r; j < total; j += p) {
    const auto [first, end] = stages.chunks[static_cast<std::size_t>(j / p)];
    if (j > 0)
      transfer_boundary(stage, pp, stage.value_at(idx.forward_begin_node, first), (j - 1) % p, tag_base + j,
                        false);
    stage.run_segment(stage_forward_segment(j, total, first, end));
    if (j < total - 1)
      transfer_boundary(stage, pp, stage.value(idx.forward_end_node), (j + 1) % p, tag_base + j + 1, true);
  }
}

// Sends every output buffer from the last stage to every rank of the pipeline axis.
template <class Stage, class Comm>
void broadcast_outputs(Stage& stage, Comm& pp, const plan::pipeline_stages& stages, const graph_view& nodes) {
  for (int i = 0; i < nodes.size(); ++i)
    if (nodes[i].kind == op::output)
      stage.with_span(stage.output_value(i),
                      [&](auto values) { pp.broadcast(values, stages.schedule.ranks - 1); });
}

// One batch through the stages in order (no schedule, no overlap), for evaluation; the outputs are
// sent from the last stage to every rank. It also runs the head's backward, which the last stage's
// phase holds. Runs in slot 0.
template <class Stage, class Comm, class Batch>
void forward_stage_by_stage(Stage& stage, Comm& pp, const plan::pipeline_stages& stages,
                            const plan::step_index& idx, const graph_view& nodes, const Batch& inputs) {
  stage.select_bank(0);
  stage.upload_inputs(inputs);
  stage.gather_unlayered_parameters();
  run_forward_stages(stage, pp, stages, idx, 0);
  stage.release_unlayered_parameters();
  broadcast_outputs(stage, pp, stages, nodes);
}

// A forward-only pipeline (inference): micro-batch m runs through this rank's stages after m - 1,
// so stage 0 runs micro-batch 1 while stage 1 runs micro-batch 0 (GPipe's forward half). A stage
// is done with a micro-batch when it has sent its result, so one slot (slot 0) serves them all.
// The last stage keeps each micro-batch's outputs (`only`, or all) on the host; once every
// micro-batch has run, they are sent to every rank in order, so that no stage waits for the last
// one before its own work is done. Returns each micro-batch's outputs, on every rank.
template <class Stage, class Comm, class Batch>
auto forward_micro_batches(Stage& stage, Comm& pp, const plan::pipeline_stages& stages,
                           const plan::step_index& idx, const graph_view& nodes,
                           std::span<const Batch> micro_batches, std::string_view only) {
  const int total = stages.schedule.stages();
  std::vector<decltype(stage.outputs(only))> outputs(micro_batches.size());
  stage.select_bank(0);
  stage.gather_unlayered_parameters();
  for (std::size_t m = 0; m < micro_batches.size(); ++m) {
    stage.upload_inputs(micro_batches[m]);
    run_forward_stages(stage, pp, stages, idx, static_cast<int>(m) * total);
    if (stages.holds_last) outputs[m] = stage.outputs(only);
  }
  stage.release_unlayered_parameters();
  for (auto& kept : outputs) {
    if (stages.holds_last) stage.restore_outputs(kept);
    broadcast_outputs(stage, pp, stages, nodes);
    kept = stage.outputs(only);
  }
  return outputs;
}

}  // namespace shardgraph
