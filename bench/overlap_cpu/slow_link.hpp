#pragma once
// slow_link: a communicator that first waits as long as a link of the given bandwidth and latency
// would take to move a call's bytes, then makes the call on the communicator it wraps. The wait is
// a sleep, not CPU work, as a network card's transfer is: it shows how much of a step's
// communication the communication threads hide behind compute on a machine whose ranks talk
// through memory (bench/overlap_cpu). Time models (ring algorithms, n ranks, b bytes per rank):
//   all_reduce 2 (n-1)/n b;  all_gather, reduce_scatter (n-1)/n of the whole;  all_to_all (n-1)/n b;
//   broadcast, send, recv b;  barrier and split the latency only.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <thread>
#include <utility>

#include <shardgraph/comm/comm_worker.hpp>
#include <shardgraph/comm/communicator.hpp>

namespace shardgraph::bench {

struct link_model {
  double bytes_per_second = 1e9;
  std::chrono::microseconds latency{20};
};

template <comm::Communicator Inner>
class slow_link {
 public:
  slow_link(Inner inner, link_model link)
      : inner_(std::move(inner)), link_(link), waited_(std::make_shared<std::atomic<std::int64_t>>(0)) {}

  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  // Nanoseconds this rank's calls have waited for the link, on every thread, since it was made.
  std::int64_t waited_ns() const { return waited_->load(); }

  template <class T>
  void all_reduce(std::span<T> data) {
    wait(2 * ring_share(data.size_bytes()));
    inner_.all_reduce(data);
  }
  template <class T>
  void all_gather(std::span<const T> in, std::span<T> out) {
    wait(ring_share(out.size_bytes()));
    inner_.all_gather(in, out);
  }
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out) {
    wait(ring_share(in.size_bytes()));
    inner_.reduce_scatter(in, out);
  }
  template <class T>
  void all_to_all(std::span<const T> in, std::span<T> out) {
    wait(ring_share(in.size_bytes()));
    inner_.all_to_all(in, out);
  }
  template <class T>
  void broadcast(std::span<T> data, int root) {
    wait(static_cast<double>(data.size_bytes()));
    inner_.broadcast(data, root);
  }
  template <class T>
  void send(std::span<const T> data, int peer, int tag) {
    wait(static_cast<double>(data.size_bytes()));
    inner_.send(data, peer, tag);
  }
  template <class T>
  void recv(std::span<T> data, int peer, int tag) {
    wait(static_cast<double>(data.size_bytes()));
    inner_.recv(data, peer, tag);
  }
  void barrier() {
    wait(0);
    inner_.barrier();
  }
  slow_link split(int color, int key) const {
    wait(0);
    return slow_link(inner_.split(color, key), link_, waited_);
  }

  bool allows_concurrent_groups() const requires comm::ConcurrentGroups<Inner> {
    return inner_.allows_concurrent_groups();
  }
  void abort(std::string_view why) const requires requires(const Inner& c, std::string_view w) { c.abort(w); }
  { inner_.abort(why); }

 private:
  slow_link(Inner inner, link_model link, std::shared_ptr<std::atomic<std::int64_t>> waited)
      : inner_(std::move(inner)), link_(link), waited_(std::move(waited)) {}

  double ring_share(std::size_t bytes) const {
    const int n = inner_.size();
    return n <= 1 ? 0.0 : static_cast<double>(bytes) * (n - 1) / n;
  }
  void wait(double bytes) const {
    if (inner_.size() <= 1) return;  // nothing crosses a link
    const auto time = link_.latency + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::duration<double>(bytes / link_.bytes_per_second));
    std::this_thread::sleep_for(time);
    waited_->fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(time).count());
  }

  Inner inner_;
  link_model link_;
  std::shared_ptr<std::atomic<std::int64_t>> waited_;  // shared with the groups split from it
};

}  // namespace shardgraph::bench
