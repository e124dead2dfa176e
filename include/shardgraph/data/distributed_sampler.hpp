#pragma once
// distributed_sampler: which windows of the token stream each data-parallel rank trains on, per epoch.
//
// Windows. A stream of n tokens is cut into windows of seq + 1 tokens; window w covers tokens
// [w * seq, w * seq + seq + 1). Its first seq tokens are the input, the last seq (the same tokens
// shifted by one) the next-token targets. Neighbouring windows share one token (the last target of
// one is the first input of the next), so every token is an input once: window_count(n, seq) =
// (n - 1) / seq windows, and a tail of fewer than seq + 1 tokens is not used.
//
// Epochs. Every rank computes the same permutation of [0, windows) from (seed, epoch) alone, with
// splitmix64 (data/splitmix64.hpp, written out there) and the Fisher-Yates shuffle:
//
//   splitmix64 rng(seed ^ mix64(epoch));
//   order = 0, 1, ..., windows - 1
//   for i = windows - 1 down to 1: swap(order[i], order[rng.below(i + 1)])
//
// (std::shuffle is not used: its algorithm is unspecified, so it would differ between standard
// libraries, and ranks built with different compilers would train on overlapping data.)
// Without shuffle the order is the identity. The order is cut to windows_per_rank() * dp_size entries
// (the remainder, windows % dp_size, is dropped, so every rank takes the same number of steps and no
// collective waits for a rank that has run out), and rank r takes entries r, r + dp_size,
// r + 2 dp_size, ... So within an epoch the ranks' windows are disjoint and together cover all but the
// dropped remainder; with shuffle a different remainder is dropped each epoch.
//
//   distributed_sampler sampler(window_count(tokens, 1024), rank, 8, /*seed=*/1234);
//   for (auto w : sampler.epoch_indices(0)) ...   // this rank's windows of epoch 0, in order
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/data/splitmix64.hpp"

namespace shardgraph::data {

// Windows of seq + 1 tokens in a stream of `tokens` tokens (see above); seq >= 1.
constexpr std::int64_t window_count(std::int64_t tokens, std::int64_t seq) {
  return tokens <= 1 ? 0 : (tokens - 1) / seq;
}
// The index of the first token of window w.
constexpr std::int64_t window_start(std::int64_t window, std::int64_t seq) { return window * seq; }

class distributed_sampler {
 public:
  distributed_sampler(std::int64_t windows, int dp_rank, int dp_size, std::uint64_t seed, bool shuffle = true)
      : windows_(windows), dp_rank_(dp_rank), dp_size_(dp_size), seed_(seed), shuffle_(shuffle) {
    if (dp_size < 1)
      fail("distributed_sampler", "dp_size is " + std::to_string(dp_size) + ", not positive",
           "Pass the number of data-parallel ranks (1 without data parallelism)");
    if (dp_rank < 0 || dp_rank >= dp_size)
      fail("distributed_sampler",
           "dp_rank " + std::to_string(dp_rank) + " is outside [0, " + std::to_string(dp_size) + ")",
           "Pass this rank's coordinate on the dp axis of the mesh");
    if (windows < dp_size)
      fail("distributed_sampler",
           std::to_string(windows) + " windows cannot give each of " + std::to_string(dp_size) +
               " data-parallel ranks one",
           "Use more tokens, a shorter sequence, or fewer data-parallel ranks");
  }

  std::int64_t windows() const { return windows_; }
  int dp_rank() const { return dp_rank_; }
  int dp_size() const { return dp_size_; }
  std::uint64_t seed() const { return seed_; }
  bool shuffle() const { return shuffle_; }
  // How many windows every rank takes per epoch.
  std::int64_t windows_per_rank() const { return windows_ / dp_size_; }

  // The epoch's order of windows for all ranks, cut to windows_per_rank() * dp_size() entries:
  // entry k belongs to rank k % dp_size(), as its (k / dp_size())-th window. The same on every rank.
  std::vector<std::int64_t> epoch_order(std::int64_t epoch) const {
    if (epoch < 0)
      fail("distributed_sampler", "epoch " + std::to_string(epoch) + " is negative", "Count epochs from 0");
    std::vector<std::int64_t> order(static_cast<std::size_t>(windows_));
    for (std::int64_t i = 0; i < windows_; ++i) order[static_cast<std::size_t>(i)] = i;
    if (shuffle_) {
      splitmix64 rng(seed_ ^ mix64(static_cast<std::uint64_t>(epoch)));
      for (std::int64_t i = windows_ - 1; i >= 1; --i)
        std::swap(order[static_cast<std::size_t>(i)],
                  order[static_cast<std::size_t>(rng.below(static_cast<std::uint64_t>(i + 1)))]);
    }
    order.resize(static_cast<std::size_t>(windows_per_rank() * dp_size_));
    return order;
  }

  // This rank's windows of the epoch, in training order: windows_per_rank() indices into [0, windows()).
  std::vector<std::int64_t> epoch_indices(std::int64_t epoch) const {
    const std::vector<std::int64_t> order = epoch_order(epoch);
    std::vector<std::int64_t> mine;
    mine.reserve(static_cast<std::size_t>(windows_per_rank()));
    for (std::size_t k = static_cast<std::size_t>(dp_rank_); k < order.size();
         k += static_cast<std::size_t>(dp_size_))
      mine.push_back(order[k]);
    return mine;
  }

 private:
  std::int64_t windows_;
  int dp_rank_, dp_size_;
  std::uint64_t seed_;
  bool shuffle_;
};

}  // namespace shardgraph::data
