#pragma once
// token_funnel: tokens sampled on several replica threads, handed to one thread (the caller of
// llm::generate) that runs the user's streaming callback, so that the callback never runs on two
// threads at once nor on a rank thread (where a slow callback would stall the collectives).
//
//   producers: funnel.push({request, token}) ... funnel.producer_done()     (one done per producer)
//   consumer:  funnel.drain(producers, [](const sampled_token& t) { ... })  // until all are done
//
// funnel<Item> carries any item the same way (the engine's tokens and finished requests).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>

#include "shardgraph/generate/token_ids.hpp"

namespace shardgraph::generate {

struct sampled_token {
  std::int64_t request = 0;  // the caller's index of the prompt
  token_id token = 0;
};

template <class Item>
class funnel {
 public:
  void push(Item t) {
    {
      const std::lock_guard<std::mutex> guard(lock_);
      queue_.push_back(std::move(t));
    }
    ready_.notify_one();
  }
  // Each producer calls it once, last, also when it failed.
  void producer_done() {
    {
      const std::lock_guard<std::mutex> guard(lock_);
      ++done_;
    }
    ready_.notify_one();
  }
  // Calls consume(token) for every token, in the order pushed, until `producers` are done and the
  // queue is empty. consume runs without the lock held.
  template <class Consume>
  void drain(int producers, Consume&& consume) {
    std::unique_lock<std::mutex> guard(lock_);
    for (;;) {
      ready_.wait(guard, [&] { return !queue_.empty() || done_ >= producers; });
      if (queue_.empty()) return;
      std::deque<Item> batch = std::exchange(queue_, {});
      guard.unlock();
      for (Item& t : batch) consume(t);
      guard.lock();
    }
  }

 private:
  std::mutex lock_;
  std::condition_variable ready_;
  std::deque<Item> queue_;
  int done_ = 0;
};

using token_funnel = funnel<sampled_token>;

}  // namespace shardgraph::generate
