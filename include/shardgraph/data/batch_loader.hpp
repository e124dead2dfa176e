#pragma once
// batch_loader: the "input_ids" and "targets" of each training step, read from a token source in the
// order a distributed_sampler gives (data/distributed_sampler.hpp: windows of seq + 1 tokens).
//
//   token_file train("train.bin", vocab);
//   batch_loader loader(train, distributed_sampler(window_count(train.size(), seq), r, dp, seed), batch,
//   seq); rank.forward(loader.global_batch(step));   // {"input_ids", "targets"}: (batch * dp, seq) i64 each
//
// Step s of an epoch uses, on rank r, the windows s * batch ... s * batch + batch - 1 of
// sampler.epoch_indices(epoch) (a trailing part of fewer than `batch` windows is dropped);
// local_batch() gives those rows, (batch, seq). global_batch() gives every rank's rows,
// (batch * dp_size, seq), rank r's in rows [r * batch, (r + 1) * batch): so local_batch on rank r equals
// that block of global_batch, which is the slice the executor takes when the batch is Shard<0> on dp.
// Every rank computes the same global batch; the executor currently takes global inputs and slices
// them itself, so global_batch() is what training passes today.
//
// A loader keeps a position (data_position: epoch and step within it), advanced by next_*_batch()
// and saved/restored with position()/restore() to resume from a checkpoint. A position means the same
// windows only for the same source, seq, batch, dp_size, seed and shuffle.
// A loader reads its source through a pointer: the source must outlive it. One thread at a time may
// use a loader (it caches the current epoch's order).
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/data/distributed_sampler.hpp"

namespace shardgraph::data {

// Anything that holds size() token ids and reads id i with token(i): a token_file, or a test's vector.
template <class T>
concept token_source = requires(const T& source, std::int64_t i) {
  { source.size() } -> std::convertible_to<std::int64_t>;
  { source.token(i) } -> std::convertible_to<std::int64_t>;
};

// Where a loader stands: the next step it yields is step `step` (0-based) of epoch `epoch`.
struct data_position {
  std::int64_t epoch = 0;
  std::int64_t step = 0;  // within the epoch: [0, steps_per_epoch())
  friend bool operator==(const data_position&, const data_position&) = default;
};

template <token_source Source>
class batch_loader {
 public:
  // batch: this rank's rows per step (the micro-batch); seq: tokens per row.
  batch_loader(const Source& source, distributed_sampler sampler, std::int64_t batch, std::int64_t seq)
      : source_(&source), sampler_(sampler), batch_(batch), seq_(seq) {
    if (batch < 1 || seq < 1)
      fail("batch_loader",
           "batch " + std::to_string(batch) + " and seq " + std::to_string(seq) + " must be positive",
           "Pass the per-rank batch size and the sequence length of the model");
    const std::int64_t available = window_count(static_cast<std::int64_t>(source.size()), seq);
    if (sampler.windows() > available)
      fail("batch_loader",
           "the sampler covers " + std::to_string(sampler.windows()) + " windows but " +
               std::to_string(static_cast<std::int64_t>(source.size())) + " tokens hold only " +
               std::to_string(available) + " windows of seq + 1 = " + std::to_string(seq + 1) + " tokens",
           "Build the sampler with window_count(source.size(), seq)");
    if (steps_per_epoch() < 1)
      fail("batch_loader",
           "each rank gets " + std::to_string(sampler.windows_per_rank()) +
               " windows per epoch, fewer than batch " + std::to_string(batch),
           "Use more tokens, a shorter sequence, a smaller batch, or fewer data-parallel ranks");
  }
  batch_loader(const Source&&, distributed_sampler, std::int64_t, std::int64_t) = delete;  // would dangle

  std::int64_t batch() const { return batch_; }
  std::int64_t seq() const { return seq_; }
  std::int64_t global_batch_size() const { return batch_ * sampler_.dp_size(); }
  std::int64_t steps_per_epoch() const { return sampler_.windows_per_rank() / batch_; }
  const distributed_sampler& sampler() const { return sampler_; }

  // The position of step `step`, counted from the start of training over all epochs.
  data_position position_of(std::int64_t step) const {
    if (step < 0) fail("batch_loader", "step " + std::to_string(step) + " is negative", "Count steps from 0");
    return {step / steps_per_epoch(), step % steps_per_epoch()};
  }

  // This rank's rows: {"input_ids", "targets"}, (batch, seq) i64 each.
  std::map<std::string, host_tensor> local_batch(data_position at) const {
    return rows(at, sampler_.dp_rank(), sampler_.dp_rank() + 1);
  }
  std::map<std::string, host_tensor> local_batch(std::int64_t step) const {
    return local_batch(position_of(step));
  }
  // Every rank's rows in rank order: {"input_ids", "targets"}, (batch * dp_size, seq) i64 each.
  std::map<std::string, host_tensor> global_batch(data_position at) const {
    return rows(at, 0, sampler_.dp_size());
  }
  std::map<std::string, host_tensor> global_batch(std::int64_t step) const {
    return global_batch(position_of(step));
  }

  data_position position() const { return position_; }
  void restore(data_position at) {
    check(at);
    position_ = at;
  }
  // The batch at position(), then position() moves to the next step (the next epoch after the last).
  std::map<std::string, host_tensor> next_local_batch() { return advance_after(local_batch(position_)); }
  std::map<std::string, host_tensor> next_global_batch() { return advance_after(global_batch(position_)); }

 private:
  const Source* source_;
  distributed_sampler sampler_;
  std::int64_t batch_, seq_;
  data_position position_{};
  mutable std::int64_t cached_epoch_ = -1;
  mutable std::vector<std::int64_t> cached_order_;

  void check(data_position at) const {
    if (at.epoch < 0 || at.step < 0 || at.step >= steps_per_epoch())
      fail("batch_loader",
           "position (epoch " + std::to_string(at.epoch) + ", step " + std::to_string(at.step) +
               ") is outside the epochs of " + std::to_string(steps_per_epoch()) + " steps",
           "Restore a position saved by a loader with the same data, seq, batch and dp size");
  }

  const std::vector<std::int64_t>& order_of(std::int64_t epoch) const {
    if (epoch != cached_epoch_) {
      cached_order_ = sampler_.epoch_order(epoch);
      cached_epoch_ = epoch;
    }
    return cached_order_;
  }

  // Rows of ranks [first_rank, last_rank), rank-major: (batch * (last_rank - first_rank), seq) each.
  std::map<std::string, host_tensor> rows(data_position at, int first_rank, int last_rank) const {
    check(at);
    const std::vector<std::int64_t>& order = order_of(at.epoch);
    const std::int64_t dp = sampler_.dp_size();
    const std::int64_t row_count = batch_ * (last_rank - first_rank);
    std::vector<std::int64_t> inputs, targets;
    inputs.reserve(static_cast<std::size_t>(row_count * seq_));
    targets.reserve(static_cast<std::size_t>(row_count * seq_));
    for (int r = first_rank; r < last_rank; ++r) {
      for (std::int64_t j = 0; j < batch_; ++j) {
        const std::int64_t window = order[static_cast<std::size_t>((at.step * batch_ + j) * dp + r)];
        const std::int64_t start = window_start(window, seq_);
        std::int64_t previous = static_cast<std::int64_t>(source_->token(start));
        for (std::int64_t t = 1; t <= seq_; ++t) {
          const auto next = static_cast<std::int64_t>(source_->token(start + t));
          inputs.push_back(previous);
          targets.push_back(next);
          previous = next;
        }
      }
    }
    std::map<std::string, host_tensor> out;
    out.emplace("input_ids", host_tensor::from<std::int64_t>({row_count, seq_}, inputs));
    out.emplace("targets", host_tensor::from<std::int64_t>({row_count, seq_}, targets));
    return out;
  }

  std::map<std::string, host_tensor> advance_after(std::map<std::string, host_tensor> batch) {
    if (++position_.step == steps_per_epoch()) position_ = {position_.epoch + 1, 0};
    return batch;
  }
};

}  // namespace shardgraph::data
