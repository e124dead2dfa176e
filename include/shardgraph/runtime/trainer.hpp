#pragma once
// trainer: one optimizer step of a training program on one rank.
//
//   shardgraph::trainer t(rank, {.adamw = {.lr = 1e-3}, .max_grad_norm = 1.0});
//   auto report = t.step({micro_batch_0, micro_batch_1});   // gradient accumulation over micro-batches
//   t.step(my_slices, {.inputs = io_part::local});          // each rank's own slices of the batch
//
// A step runs forward and backward once per micro-batch and sums the gradients: a mean loss divides
// by the number of targets counted (not the ignore index) in the whole step, over every micro-batch
// and data-parallel rank, so the step's loss and gradients are torch's over the step's tokens
// however they are split (given whole or as each rank's slices: rank_program::forward). It then clips by the
// global gradient norm, and applies AdamW to this rank's slice of every parameter. The norm is correct under
// every sharding: a rank counts a gradient slice only if it owns it (Shard on an axis: every rank owns its
// slice; Replicate: only coordinate 0 does; optim/grad_clip.hpp), and the sums are all-reduced over every
// mesh axis. Weight decay follows nanoGPT: parameters of two or more dimensions decay, biases and norm
// weights do not.
//
// Sharded data parallelism (ZeRO), from the program's zero_stage and zero_axis (training{} at compile
// time; D ranks; each local parameter slice of N elements is cut into D chunks of ceil(N / D), rank r
// owning chunk r):
//   stage 1  gradients arrive all-reduced; rank r keeps AdamW's moments for its chunk only, updates
//            its chunk, and all-gathers the parameter from every rank's chunk.
//   stage 2  gradients stay Partial (the program leaves out their all-reduce); each micro-batch's
//            gradient is reduce-scattered, so rank r accumulates only its chunk; then as stage 1.
//            The executor reduce-scatters them in buckets during backward (on the communication
//            thread when overlapped); a gradient it leaves whole is reduce-scattered here.
//   stage 3  as stage 2, but the executor stores only chunk r of each parameter (it gathers whole
//            weights per layer while they are used): AdamW updates the chunk in place, no gather.
//
// Mixed precision, from the parameters' dtype: a model built in bf16 or f16 computes in it (and
// communicates in it: gradient all-reduces, reduce-scatters, parameter gathers), while the trainer
// keeps f32 master weights (this rank's chunk under ZeRO), f32 gradient sums and f32 AdamW moments,
// as Megatron-LM's distributed optimizer does. After each update the model's weights are the master
// rounded to nearest even. The master starts from the model's weights as loaded.
// f16 adds dynamic loss scaling (optim/loss_scaler.hpp, torch's GradScaler): backward starts from
// d loss = scale; gradients are unscaled as they are summed; if any rank's sum holds an infinity or a
// NaN (seen as a non-finite global norm, which every rank computes alike) the step is skipped on
// every rank, AdamW's step count does not advance, and the scale is backed off.
// Dropout (dsl dropout()) acts only in a step's forward runs, with a new mask each micro-batch and
// step (dropout_in_step); forward() outside a step passes x through (docs/dsl.md).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/optim/adamw.hpp"
#include "shardgraph/optim/grad_clip.hpp"
#include "shardgraph/optim/loss_scaler.hpp"
#include "shardgraph/optim/lr_schedule.hpp"
#include "shardgraph/runtime/executor.hpp"

namespace shardgraph {

struct training_options {
  adamw_config adamw;                     // adamw.lr is the rate when no schedule is given
  std::optional<warmup_cosine> schedule;  // learning rate per step
  double max_grad_norm = 1.0;             // 0 or infinity: no clipping
  bool check_finite = false;              // stop at the first op that produces a NaN or an infinity
  dynamic_loss_scaler loss_scaler{};      // f16 models: the starting scale and how it moves
};

// Bytes this rank's trainer holds beyond the program's own values.
struct optimizer_memory {
  std::int64_t optimizer_states = 0;  // AdamW's m and v
  std::int64_t gradient_sums = 0;     // the step's accumulated gradients (a chunk under ZeRO-2)
  std::int64_t master_weights = 0;    // mixed precision: the f32 weights (a chunk under ZeRO-1/2/3)
};

struct step_report {
  std::int64_t step = 0;
  double loss = 0;       // over the whole step: the mean over its counted targets (or their sum)
  double grad_norm = 0;  // before clipping
  double lr = 0;
  bool skipped = false;   // f16: a gradient overflowed, the update was not applied
  double loss_scale = 1;  // the scale backward started from (1 without loss scaling)
};

template <compute::TrainingBackend Backend, comm::Communicator Comm>
class trainer {
 public:
  using buffer = typename Backend::buffer;

  trainer(rank_program<Backend, Comm>& rank, training_options options) : rank_(rank), options_(options) {
    if (!rank.compiled().is_training())
      fail("trainer", "the program has no backward pass", "compile the model with shardgraph::training{}");
    if (options_.schedule) options_.schedule->check();
    if (!(options_.max_grad_norm >= 0))
      fail("trainer", "max_grad_norm is " + std::to_string(options_.max_grad_norm),
           "give a positive norm, or 0 (or infinity) for no clipping");
    rank.set_finite_check(options_.check_finite);
    zero_stage_ = rank.compiled().zero_stage;
    zero_axis_ = rank.compiled().zero_axis;
    const graph_view& g = rank.compiled().nodes;
    for (int i = 0; i < g.size(); ++i)
      if (g[i].kind == op::parameter && (g[i].type == dtype::bf16 || g[i].type == dtype::f16)) {
        mixed_ = true;
        scaling_ = scaling_ || g[i].type == dtype::f16;
      }
    if (scaling_) options_.loss_scaler.check();
    dropout_ = rank.compiled().count(op::dropout) > 0;
  }

  // The loss scaler's state (f16 models), to inspect or save.
  const dynamic_loss_scaler& loss_scaler() const { return options_.loss_scaler; }

  optimizer_memory memory() const {
    optimizer_memory m;
    for (const auto& [name, s] : states_) {
      m.optimizer_states += static_cast<std::int64_t>(s.m.size_bytes() + s.v.size_bytes());
      m.gradient_sums += static_cast<std::int64_t>(s.sum.size_bytes());
      m.master_weights += static_cast<std::int64_t>(s.master.size_bytes());
    }
    return m;
  }

  // io.inputs: the micro-batches are whole, or this rank's slices of them (io.outputs is not read:
  // the step returns the loss, a scalar).
  step_report step(std::span<const tensor_map> micro_batches, io_options io = {}) {
    if (micro_batches.empty()) fail("trainer::step", "no micro-batch was given", "pass at least one batch");
    const step_targets counted(rank_, step_targets_of(micro_batches, io.inputs));
    const double loss_scale = scaling_ ? options_.loss_scaler.scale : 1.0;
    rank_.set_loss_scale(loss_scale);
    direct_ = reads_gradients_directly(micro_batches.size(), loss_scale);
    double loss = 0;
    const dropout_in_step dropout(*this, micro_batches.size());
    if (rank_.pipelined()) {
      loss = pipelined_micro_batches(micro_batches, 1.0 / loss_scale, io.inputs);
    } else {
      for (std::size_t k = 0; k < micro_batches.size(); ++k) {
        tensor_map out;
        dropout.enter(k);
        try {
          out = rank_.forward(micro_batches[k], {.inputs = io.inputs}, "loss");
        } catch (const error& e) {  // the op, layer and rank are named by forward(); the step here
          throw in_step(e, ", micro-batch " + std::to_string(k));
        }
        loss += out.at("loss").at(0);  // each micro-batch's part of the step's loss (and gradients)
        if (!direct_) accumulate_gradients(1.0 / loss_scale, k == 0);
      }
    }
    ++step_;
    const double norm = global_norm(owned_sum_of_squares());
    const double lr = options_.schedule ? (*options_.schedule)(step_) : options_.adamw.lr;
    step_report report{step_, loss, norm, lr, false, loss_scale};
    if (scaling_ && !options_.loss_scaler.update(!std::isfinite(norm))) {
      report.skipped = true;  // every rank saw the same norm, so every rank skips
      return report;
    }
    const double coefficient =
        options_.max_grad_norm > 0 ? clip_coefficient(norm * norm, options_.max_grad_norm) : 1.0;
    ++updates_;
    apply_adamw(coefficient, lr);
    return report;
  }
  step_report step(const tensor_map& batch, io_options io = {}) {
    return step(std::span<const tensor_map>(&batch, 1), io);
  }

  std::int64_t steps_done() const { return step_; }
  std::int64_t updates_done() const { return updates_; }

  // ---- checkpoints (io/sharded_weights.hpp saves and loads these) ---------------------------------
  using tensor_part = typename rank_program<Backend, Comm>::tensor_part;

  // AdamW's state of this rank's parameter slices, whole slices whatever the ZeRO stage (chunks are
  // all-gathered over the zero axis, so every rank must call it): "<name>#m", "<name>#v" and, under
  // mixed precision, "<name>#master", each with its parameter's slice. Saved with save_weights, they
  // load under any other layout or ZeRO stage.
  std::map<std::string, tensor_part> optimizer_state() {
    if (states_.empty())
      fail("trainer: optimizer_state", "no step has been taken, so there is no optimizer state yet",
           "save after the first step (or save only the weights)");
    std::map<std::string, tensor_part> out;
    for (auto& [name, part] : rank_.parameters()) {
      const auto it = states_.find(name);
      if (it == states_.end()) continue;  // no gradient: no optimizer state
      state& s = it->second;
      const dtype t = s.m.type();
      for (const auto& [suffix, chunk] : {std::pair<const char*, buffer*>{"#m", &s.m},
                                          {"#v", &s.v},
                                          {"#master", s.master.numel() > 0 ? &s.master : nullptr}}) {
        if (chunk == nullptr) continue;
        host_tensor whole(t, part.slice.count);
        whole_slice(s, *chunk, whole);
        out.emplace(name + suffix, tensor_part{part.slice, std::move(whole)});
      }
    }
    return out;
  }

  // Restores AdamW's state from a source holding what optimizer_state() gave (under any layout);
  // call it, and restore_counters(), before the first step of the resumed run.
  void load_optimizer_state(const weight_source& source) {
    Backend& b = rank_.backend();
    std::map<std::string, tensor_part> parts = rank_.parameters();
    rank_.for_each_parameter(
        [&](const std::string& name, const node& p, std::int64_t, buffer& value, buffer* grad) {
          if (grad == nullptr) return;
          state& s = state_of(name, value, p);
          const tensor_slice& slice = parts.at(name).slice;
          for (const auto& [suffix, chunk] : {std::pair<const char*, buffer*>{"#m", &s.m},
                                              {"#v", &s.v},
                                              {"#master", s.master.numel() > 0 ? &s.master : nullptr}}) {
            if (chunk == nullptr) continue;
            host_tensor whole(chunk->type(), slice.count);
            source(name + suffix, slice, whole);
            // this rank's chunk [offset, offset + count) of the slice, zero-padded to the chunk
            const std::size_t e = dtype_size(chunk->type());
            std::vector<std::byte> bytes(static_cast<std::size_t>(s.chunk) * e, std::byte{0});
            std::memcpy(bytes.data(), whole.bytes().data() + static_cast<std::size_t>(s.offset) * e,
                        static_cast<std::size_t>(s.count) * e);
            b.upload(*chunk, bytes.data());
          }
        });
  }

  // Restores the step counters (steps taken; updates applied, which AdamW's bias correction counts)
  // and, for f16 models, the loss scaler's state, as a saved run had them.
  void restore_counters(std::int64_t steps, std::int64_t updates, const dynamic_loss_scaler& scaler) {
    if (steps < 0 || updates < 0 || updates > steps)
      fail("trainer: restore_counters",
           std::to_string(updates) + " updates in " + std::to_string(steps) + " steps is not possible",
           "restore both counters from the same checkpoint");
    scaler.check();
    step_ = steps;
    updates_ = updates;
    options_.loss_scaler = scaler;
  }

  // The rank this trainer trains (its parameters() are the weights a checkpoint saves).
  rank_program<Backend, Comm>& rank() { return rank_; }

 private:
  // Per parameter slice: the step's gradient sum and AdamW's moments; under ZeRO, this rank's
  // chunk [offset, offset + count) of the slice's n elements, and scratch for the collectives.
  // Under mixed precision `master` holds the f32 weights AdamW updates (the chunk under ZeRO);
  // sum, m, v, grad_chunk are f32 and gathered, chunk_value the model's dtype.
  struct state {
    buffer sum, m, v, master;
    std::int64_t n = 0, offset = 0, count = 0, chunk = 0;
    buffer gathered, chunk_value, grad_chunk;  // ZeRO: (parts * chunk) staging; this rank's chunks
  };

  int zero_parts() { return zero_stage_ >= 1 ? rank_.axis_size(zero_axis_) : 1; }

  // The whole slice (s.n elements) of a state buffer holding this rank's chunk: all-gathered over
  // the zero axis under ZeRO, else the buffer itself.
  void whole_slice(state& s, buffer& chunk, host_tensor& out) {
    Backend& b = rank_.backend();
    const std::size_t e = dtype_size(chunk.type());
    if (zero_stage_ == 0) {
      b.download(chunk, out.bytes().data());
      return;
    }
    buffer gathered = b.allocate(chunk.type(), s.chunk * zero_parts());
    detail::with_element_type(chunk.type(), [&](auto zero) {
      using T = decltype(zero);
      rank_.axis_communicator(zero_axis_)
          .all_gather(std::span<const T>(span_of<T>(b, chunk)), span_of<T>(b, gathered));
    });
    std::vector<std::byte> bytes(gathered.size_bytes());
    b.download(gathered, bytes.data());
    std::memcpy(out.bytes().data(), bytes.data(), static_cast<std::size_t>(s.n) * e);
  }

  // e, with this step (and `part` of it: ", micro-batch 2") before the place it names.
  error in_step(const error& e, const std::string& part = {}) const {
    return error("shardgraph: trainer step " + std::to_string(step_ + 1) + part + ": " +
                 std::string(e.what()).substr(std::string("shardgraph: ").size()));
  }

  // Sets the step's target counts on the rank for as long as it lives (the step, even one that throws).
  struct step_targets {
    rank_program<Backend, Comm>& rank;
    step_targets(rank_program<Backend, Comm>& r, std::vector<std::int64_t> counts) : rank(r) {
      rank.set_step_targets(std::move(counts));
    }
    ~step_targets() { rank.clear_step_targets(); }
    step_targets(const step_targets&) = delete;
    step_targets& operator=(const step_targets&) = delete;
  };

  // Makes dropout act in the step's forward runs, for as long as it lives: micro-batch k of step s
  // (counted from 0) of M draws the mask of step number s * M + k; a pipeline's micro-batches run
  // in one schedule and share the step's first. Outside a step dropout passes x through.
  struct dropout_in_step {
    trainer& t;
    std::uint64_t first = 0;
    dropout_in_step(trainer& owner, std::size_t micro_batches)
        : t(owner), first(static_cast<std::uint64_t>(owner.step_) * micro_batches) {
      enter(0);
    }
    void enter(std::size_t k) const {
      if (t.dropout_) t.rank_.set_dropout({.active = true, .step = first + k});
    }
    ~dropout_in_step() {
      if (t.dropout_) t.rank_.set_dropout({});
    }
    dropout_in_step(const dropout_in_step&) = delete;
    dropout_in_step& operator=(const dropout_in_step&) = delete;
  };

  // Checks every micro-batch's ids and targets before any compute (the same error on every rank)
  // and sums, per loss, the targets that count. A step in which a loss counts none is an error: its
  // mean would be 0 / 0. Slices (io_part::local) are checked and counted by every rank together.
  std::vector<std::int64_t> step_targets_of(std::span<const tensor_map> micro_batches, io_part given) {
    std::vector<std::int64_t> total;
    if (given == io_part::local) {
      try {
        total = rank_.counted_local_targets(micro_batches);
      } catch (const error& e) {
        throw in_step(e);
      }
    }
    for (std::size_t k = 0; given == io_part::whole && k < micro_batches.size(); ++k) {
      std::vector<std::int64_t> c;
      try {
        c = rank_.counted_targets(micro_batches[k]);
      } catch (const error& e) {
        throw in_step(e, ", micro-batch " + std::to_string(k));
      }
      total.resize(c.size(), 0);
      for (std::size_t j = 0; j < c.size(); ++j) total[j] += c[j];
    }
    for (std::int64_t t : total)
      if (t == 0)
        fail("trainer step " + std::to_string(step_ + 1),
             "every target of the step is the ignore index, so the loss has no target to average over",
             "give each step at least one target that is not the ignore index (-100)");
    return total;
  }

  // Pipeline stages: the schedule runs every micro-batch, summing each held gradient over them;
  // then one accumulation, and the first and last stage add their parts of a tied weight's sum.
  double pipelined_micro_batches(std::span<const tensor_map> micro_batches, double share, io_part given) {
    rank_.zero_gradients();
    std::vector<double> losses;
    try {
      losses = rank_.run_pipeline(micro_batches, {.inputs = given});
    } catch (const error& e) {
      throw in_step(e);
    }
    accumulate_gradients(share, true);
    Backend& b = rank_.backend();
    rank_.for_each_parameter(
        [&](const std::string& name, const node& p, std::int64_t, buffer&, buffer* grad) {
          if (grad == nullptr || !rank_.tied(p)) return;
          buffer& sum = states_.at(name).sum;
          detail::with_element_type(optimizer_type(p), [&](auto zero) {
            using T = decltype(zero);
            rank_.tied_communicator().all_reduce(span_of<T>(b, sum));
          });
        });
    double loss = 0;  // each micro-batch's part of the step's loss
    for (double l : losses) loss += l;
    return loss;
  }

  // The dtype the optimizer works in: f32 for a 16-bit model, else the model's.
  dtype optimizer_type(const node& p) const { return mixed_ && p.type != dtype::f64 ? dtype::f32 : p.type; }

  state& state_of(const std::string& name, const buffer& value, const node& p) {
    auto it = states_.find(name);
    if (it != states_.end()) return it->second;
    Backend& b = rank_.backend();
    const dtype t = optimizer_type(p);
    state s;
    s.n = zero_stage_ >= 3 ? rank_.local_numel(p) : static_cast<std::int64_t>(value.numel());
    const int parts = zero_parts();
    if (zero_stage_ >= 1) {
      const std::int64_t r = rank_.coordinate(rank_.compiled().nodes.axes.name(zero_axis_));
      s.chunk = (s.n + parts - 1) / parts;
      s.offset = std::min(s.n, r * s.chunk);
      s.count = std::min(s.n, s.offset + s.chunk) - s.offset;
      s.gathered = b.allocate(p.type, s.chunk * parts);
      s.chunk_value = b.allocate(p.type, s.chunk);
      s.grad_chunk = b.allocate(t, s.chunk);
      b.fill_zero(s.gathered);
      b.fill_zero(s.chunk_value);
    } else {
      s.chunk = s.count = s.n;
    }
    s.m = b.allocate(t, s.chunk);
    s.v = b.allocate(t, s.chunk);
    b.fill_zero(s.m);
    b.fill_zero(s.v);
    if (t != p.type) {  // the f32 master of what this rank updates, from the weights as loaded
      s.master = b.allocate(t, s.chunk);
      if (zero_stage_ == 0 || zero_stage_ >= 3) {
        b.convert(value, s.master);
      } else {
        b.copy_range(value, s.offset, s.chunk_value, 0, s.count);
        b.convert(s.chunk_value, s.master);
      }
    }
    return states_.emplace(name, std::move(s)).first->second;
  }

  // The buffer's memory, for a communicator; a GPU backend's queued work is finished first.
  template <class T>
  static std::span<T> span_of(Backend& b, buffer& buf) {
    if constexpr (requires { b.synchronize(); }) b.synchronize();
    return {static_cast<T*>(b.data(buf)), static_cast<std::size_t>(buf.numel())};
  }

  // Whether this step's norm and AdamW read the gradients themselves: one micro-batch, no loss
  // scale and no ZeRO, so the sum would hold exactly the gradients (widened to the optimizer's
  // dtype, which is exact); the backend's adamw_many widens them as it reads them. Saves the sum's
  // memory (4 bytes per parameter under bf16) and three passes over it (zero, add, clip scale).
  bool reads_gradients_directly(std::size_t micro_batches, double loss_scale) const {
    constexpr bool reads_any_dtype =
        requires(Backend & b, std::span<const compute::adamw_update<buffer>> all) {
      b.adamw_many(all);
    };
    return reads_any_dtype && micro_batches == 1 && loss_scale == 1.0 && zero_stage_ == 0 &&
           !rank_.pipelined();
  }

  // The step's gradient sum of a parameter (allocated at its first use: a step that reads the
  // gradients directly needs none).
  buffer& sum_of(state& s, const node& p) {
    if (s.sum.numel() == 0 && s.n > 0)
      s.sum = rank_.backend().allocate(optimizer_type(p), zero_stage_ >= 2 ? s.chunk : s.n);
    return s.sum;
  }

  // sum (+)= share * gradient, for each parameter; `share` includes 1 / loss scale.
  void accumulate_gradients(double share, bool first) {
    Backend& b = rank_.backend();
    rank_.for_each_parameter(
        [&](const std::string& name, const node& p, std::int64_t layer, buffer& value, buffer* grad) {
          if (grad == nullptr) return;
          state& s = state_of(name, value, p);
          sum_of(s, p);
          if (first) b.fill_zero(s.sum);
          if (zero_stage_ < 2) return b.add_scaled(*grad, s.sum, share);
          // ZeRO-2, 3: this rank's chunk of the gradient, reduce-scattered in a bucket during backward,
          // or else here from the Partial gradient.
          if (const buffer* chunk = rank_.reduced_gradient_chunk(p, layer))
            return b.add_scaled(*chunk, s.sum, share);
          b.fill_zero(s.gathered);
          b.copy_range(*grad, 0, s.gathered, 0, s.n);
          detail::with_element_type(p.type, [&](auto zero) {
            using T = decltype(zero);
            rank_.axis_communicator(zero_axis_)
                .reduce_scatter(std::span<const T>(span_of<T>(b, s.gathered)), span_of<T>(b, s.chunk_value));
          });
          b.add_scaled(s.chunk_value, s.sum, share);
        });
  }

  // Sum of squares of the gradient elements this rank owns, all-reduced over every mesh axis.
  // Under ZeRO each rank of the zero axis owns its chunk; elsewhere a Replicate slice is owned by
  // coordinate 0 of that axis.
  double owned_sum_of_squares() {
    Backend& b = rank_.backend();
    const graph_view& g = rank_.compiled().nodes;
    std::vector<const buffer*> owned;  // summed together below
    rank_.for_each_parameter(
        [&](const std::string& name, const node& p, std::int64_t, buffer& value, buffer* grad) {
          if (grad == nullptr) return;
          if (!rank_.counts_on_pipeline(p)) return;
          for (int a = 0; a < g.axes.size(); ++a)
            if (a != zero_axis_ && a != rank_.compiled().pipeline_axis && p.spec[a].is_replicate() &&
                rank_.coordinate(g.axes.name(a)) != 0)
              return;
          state& s = state_of(name, value, p);
          if (direct_) {
            owned.push_back(grad);
          } else if (zero_stage_ == 1) {  // the whole reduced gradient is here: count this rank's chunk
            b.fill_zero(s.grad_chunk);
            b.copy_range(s.sum, s.offset, s.grad_chunk, 0, s.count);
            owned.push_back(&s.grad_chunk);
          } else {
            owned.push_back(&s.sum);
          }
        });
    // A backend that sums many buffers at once (a GPU: one wait instead of one per parameter).
    double sum = 0;
    if constexpr (requires(std::span<const buffer* const> all) { b.sum_of_squares(all); }) {
      sum = b.sum_of_squares(std::span<const buffer* const>(owned));
    } else {
      for (const buffer* x : owned) sum += b.sum_of_squares(*x);
    }
    for (int a = 0; a < g.axes.size(); ++a) rank_.axis_communicator(a).all_reduce(std::span<double>(&sum, 1));
    return sum;
  }

  void apply_adamw(double coefficient, double lr) {
    Backend& b = rank_.backend();
    constexpr bool many = requires(std::span<const compute::adamw_update<buffer>> all) { b.adamw_many(all); };
    std::vector<compute::adamw_update<buffer>> updates;  // without ZeRO: all at once, below
    rank_.for_each_parameter(
        [&](const std::string& name, const node& p, std::int64_t, buffer& value, buffer* grad) {
          if (grad == nullptr) return;
          state& s = state_of(name, value, p);
          const bool mixed = s.master.numel() > 0;
          compute::adamw_arguments a{.lr = lr,
                                     .beta1 = options_.adamw.beta1,
                                     .beta2 = options_.adamw.beta2,
                                     .eps = options_.adamw.eps,
                                     .weight_decay = p.shape.rank() >= 2 ? options_.adamw.weight_decay : 0.0,
                                     .step = updates_};
          if (zero_stage_ == 0) {
            // adamw_many applies the clipping coefficient as it reads the gradient; else it is
            // applied to the sum here.
            if (!many && coefficient != 1.0) b.scale(s.sum, coefficient);
            updates.push_back({.param = mixed ? &s.master : &value,
                               .grad = direct_ ? grad : &s.sum,
                               .m = &s.m,
                               .v = &s.v,
                               .rounded = mixed ? &value : nullptr,
                               .arguments = a,
                               .grad_factor = many ? coefficient : 1.0});
            return;
          }
          // This rank's chunk of the gradient and of the parameter, updated, then gathered from all ranks.
          buffer& grad_chunk = s.grad_chunk;
          b.fill_zero(grad_chunk);
          if (zero_stage_ == 1)
            b.copy_range(s.sum, s.offset, grad_chunk, 0, s.count);
          else
            b.copy_range(s.sum, 0, grad_chunk, 0, s.chunk);
          if (coefficient != 1.0) b.scale(grad_chunk, coefficient);
          if (zero_stage_ >= 3) {  // value is this rank's chunk
            b.adamw(mixed ? s.master : value, grad_chunk, s.m, s.v, a);
            if (mixed) b.convert(s.master, value);
            return;
          }
          if (mixed) {
            b.adamw(s.master, grad_chunk, s.m, s.v, a);
            b.convert(s.master, s.chunk_value);
          } else {
            b.fill_zero(s.chunk_value);
            b.copy_range(value, s.offset, s.chunk_value, 0, s.count);
            b.adamw(s.chunk_value, grad_chunk, s.m, s.v, a);
          }
          detail::with_element_type(p.type, [&](auto zero) {
            using T = decltype(zero);
            rank_.axis_communicator(zero_axis_)
                .all_gather(std::span<const T>(span_of<T>(b, s.chunk_value)), span_of<T>(b, s.gathered));
          });
          b.copy_range(s.gathered, 0, value, 0, s.n);
        });
    // A backend that updates many parameters in one call (a GPU: one launch for them all).
    if constexpr (many) {
      if (!updates.empty()) b.adamw_many(std::span<const compute::adamw_update<buffer>>(updates));
    } else {
      for (const compute::adamw_update<buffer>& u : updates) {
        b.adamw(*u.param, *u.grad, *u.m, *u.v, u.arguments);
        if (u.rounded != nullptr) b.convert(*u.param, *u.rounded);
      }
    }
  }

  rank_program<Backend, Comm>& rank_;
  training_options options_;
  std::map<std::string, state> states_;
  std::int64_t step_ = 0;     // steps taken, skipped ones included (the schedule's clock)
  std::int64_t updates_ = 0;  // AdamW updates applied (its bias corrections' step)
  bool mixed_ = false;        // 16-bit parameters: f32 master weights
  bool scaling_ = false;      // f16 parameters: dynamic loss scaling
  bool direct_ = false;       // this step reads the gradients, not a sum (reads_gradients_directly)
  bool dropout_ = false;      // the program has dropout: the step sets its run (dropout_in_step)
  int zero_stage_ = 0;
  int zero_axis_ = -1;
};

}  // namespace shardgraph
