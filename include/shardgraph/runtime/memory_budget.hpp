#pragma once
// memory_budget: the bytes bind may allocate on this rank's device, and what it has asked for.
//
// bind sends every allocation of the per-rank program through admit() before the backend makes
// it. While the total fits, admit() says yes and the allocation is made; once a request would pass
// what the device has, admit() says no from then on: bind makes empty buffers instead and goes on
// counting, so that it can then fail with the whole plan's bytes (needed, available, and which
// value was the first not to fit) before the device runs out, rather than after an out-of-memory
// kill part way through.
//
// What the device has is the backend's free_bytes() (compute_backend.hpp: the cpu backend's
// MemAvailable, a GPU's free memory), read once when bind starts allocating, or
// memory_options::available_bytes where given (tests; a share of a device held by several ranks).
// A backend without free_bytes() and no option: no limit.
// What bind counts is the program's own values; the trainer's optimizer state and a GPU backend's
// scratch come on top, so the bytes reported needed are a lower bound.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "shardgraph/core/bytes_text.hpp"
#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/error.hpp"

namespace shardgraph {

class memory_budget {
 public:
  memory_budget() = default;  // no limit
  memory_budget(std::size_t available, std::string source)
      : available_(available), source_(std::move(source)) {}

  // Counts `bytes` for `what`; false when the total asked for so far passes what is available
  // (then and for every later request: the caller allocates nothing for them).
  bool admit(std::size_t bytes, std::string_view what) {
    requested_ = checked_add_bytes(requested_, bytes, "bind: memory: the bytes of this rank's values");
    if (!exceeded() && requested_ > available_) first_over_ = std::string(what);
    return !exceeded();
  }
  bool exceeded() const { return !first_over_.empty(); }
  std::size_t requested() const { return requested_; }
  std::size_t available() const { return available_; }

  // After the last request: the error saying how much the plan needs, if it does not fit.
  void check(int rank) const {
    if (!exceeded()) return;
    fail("bind: memory (rank " + std::to_string(rank) + ")",
         "this rank's program needs at least " + bytes_text(requested_) + " but the device has " +
             bytes_text(available_) + " available (" + source_ + "); " + first_over_ +
             " is the first value that does not fit",
         "use a smaller batch or sequence, more ranks (tp, pp, or dp with ZeRO-3), or activation "
         "recomputation; memory() of a smaller configuration shows what each kind of value takes");
  }

 private:
  std::size_t available_ = std::numeric_limits<std::size_t>::max();
  std::string source_;
  std::size_t requested_ = 0;
  std::string first_over_;  // the request that passed the limit (empty: none has)
};

// The budget of a backend: `available_bytes` where given, else the backend's free_bytes() if it
// has one, else no limit.
template <class Backend>
memory_budget memory_budget_for(Backend& backend, std::optional<std::size_t> available_bytes) {
  if (available_bytes) return {*available_bytes, "memory_options::available_bytes"};
  if constexpr (requires(Backend & b) {
                  { b.free_bytes() } -> std::convertible_to<std::size_t>;
                })
    return {static_cast<std::size_t>(backend.free_bytes()), "what the backend reports free"};
  else
    return {};
}

}  // namespace shardgraph
