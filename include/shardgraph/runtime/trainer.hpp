#pragma once
// trainer: one optimizer step of a training program on one rank.
//
//   shardgraph::trainer t(rank, {.adamw = {.lr = 1e-3}, .max_grad_norm = 1.0});
//   auto report = t.step({micro_batch_0, micro_batch_1});   // gradient accumulation over micro-batches
//
// A step runs forward and backward once per micro-batch, averages the gradients (each micro-batch's
// loss is a mean over its tokens, so the step's loss is the mean of theirs), clips by the global
// gradient norm, and applies AdamW to this rank's slice of every parameter. The norm is correct
// under every sharding: a rank counts a gradient slice only if it owns it (Shard on an axis: every
// rank owns its slice; Replicate: only coordinate 0 does; optim/grad_clip.hpp), and the sums are
// all-reduced over every mesh axis. Weight decay follows nanoGPT: parameters of two or more
// dimensions decay, biases and norm weights do not.
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/optim/adamw.hpp"
#include "shardgraph/optim/grad_clip.hpp"
#include "shardgraph/optim/lr_schedule.hpp"
#include "shardgraph/runtime/executor.hpp"

namespace shardgraph {

struct training_options {
  adamw_config adamw;                     // adamw.lr is the rate when no schedule is given
  std::optional<warmup_cosine> schedule;  // learning rate per step
  double max_grad_norm = 1.0;             // 0 or infinity: no clipping
};

struct step_report {
  std::int64_t step = 0;
  double loss = 0;       // mean over the step's micro-batches
  double grad_norm = 0;  // before clipping
  double lr = 0;
};

template <compute::TrainingBackend Backend, comm::Communicator Comm>
class trainer {
 public:
  using buffer = typename Backend::buffer;

  trainer(rank_program<Backend, Comm>& rank, training_options options) : rank_(rank), options_(options) {
    if (!rank.compiled().is_training())
      fail("trainer", "the program has no backward pass", "compile the model with shardgraph::training{}");
    if (options_.schedule) options_.schedule->check();
  }

  step_report step(std::span<const tensor_map> micro_batches) {
    if (micro_batches.empty()) fail("trainer::step", "no micro-batch was given", "pass at least one batch");
    const double share = 1.0 / static_cast<double>(micro_batches.size());
    double loss = 0;
    for (std::size_t k = 0; k < micro_batches.size(); ++k) {
      tensor_map out = rank_.forward(micro_batches[k]);
      loss += share * out.at("loss").at(0);
      accumulate_gradients(share, k == 0);
    }
    ++step_;
    const double norm = global_norm(owned_sum_of_squares());
    const double coefficient = options_.max_grad_norm > 0 ? clip_coefficient(norm * norm, options_.max_grad_norm) : 1.0;
    const double lr = options_.schedule ? (*options_.schedule)(step_) : options_.adamw.lr;
    apply_adamw(coefficient, lr);
    return {step_, loss, norm, lr};
  }
  step_report step(const tensor_map& batch) { return step(std::span<const tensor_map>(&batch, 1)); }

  std::int64_t steps_done() const { return step_; }

 private:
  struct state {
    buffer sum, m, v;  // the step's averaged gradient and AdamW's moments
  };

  state& state_of(const std::string& name, const buffer& like, const node& p) {
    auto it = states_.find(name);
    if (it != states_.end()) return it->second;
    Backend& b = rank_.backend();
    const std::int64_t numel = static_cast<std::int64_t>(like.numel());
    state s{b.allocate(p.type, numel), b.allocate(p.type, numel), b.allocate(p.type, numel)};
    b.fill_zero(s.m);
    b.fill_zero(s.v);
    return states_.emplace(name, std::move(s)).first->second;
  }

  void accumulate_gradients(double share, bool first) {
    Backend& b = rank_.backend();
    rank_.for_each_parameter([&](const std::string& name, const node& p, std::int64_t, buffer& value, buffer* grad) {
      if (grad == nullptr) return;
      state& s = state_of(name, value, p);
      if (first) b.fill_zero(s.sum);
      b.add_scaled(*grad, s.sum, share);
    });
  }

  // Sum of squares of the gradient elements this rank owns, all-reduced over every mesh axis.
  double owned_sum_of_squares() {
    Backend& b = rank_.backend();
    const graph& g = rank_.compiled().nodes;
    double sum = 0;
    rank_.for_each_parameter([&](const std::string& name, const node& p, std::int64_t, buffer&, buffer* grad) {
      if (grad == nullptr) return;
      for (int a = 0; a < g.axes.size(); ++a)
        if (p.spec[a].is_replicate() && rank_.coordinate(g.axes.name(a)) != 0) return;
      sum += b.sum_of_squares(states_.at(name).sum);
    });
    for (int a = 0; a < g.axes.size(); ++a) rank_.axis_communicator(a).all_reduce(std::span<double>(&sum, 1));
    return sum;
  }

  void apply_adamw(double coefficient, double lr) {
    Backend& b = rank_.backend();
    rank_.for_each_parameter([&](const std::string& name, const node& p, std::int64_t, buffer& value, buffer* grad) {
      if (grad == nullptr) return;
      state& s = states_.at(name);
      if (coefficient != 1.0) b.scale(s.sum, coefficient);
      compute::adamw_arguments a{.lr = lr, .beta1 = options_.adamw.beta1, .beta2 = options_.adamw.beta2,
                                 .eps = options_.adamw.eps,
                                 .weight_decay = p.shape.rank() >= 2 ? options_.adamw.weight_decay : 0.0,
                                 .step = step_};
      b.adamw(value, s.sum, s.m, s.v, a);
    });
  }

  rank_program<Backend, Comm>& rank_;
  training_options options_;
  std::map<std::string, state> states_;
  std::int64_t step_ = 0;
};

}  // namespace shardgraph
