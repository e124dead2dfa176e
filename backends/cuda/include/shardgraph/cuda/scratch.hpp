#pragma once
// scratch_space: the backend's temporary device memory, one grow-only region per use (attention's
// scores, column-sum partials, ...), so that regions needed at the same time never alias. A region
// only grows; growing frees the old one (cudaFree waits for the GPU, so no kernel still reads it)
// and counts in generation(), so that a recorded stream (stream_recording.hpp) that used the old
// one is known to be stale. A region's first allocation does not count: no recording can have used
// it (the optimizer's tables, first made after the step's first recording, leave it valid).
#include <shardgraph/cuda/device_buffer.hpp>

#include <array>
#include <cstddef>
#include <cstdint>

namespace shardgraph::cuda {

enum class scratch_use : int {
  scores,           // attention: S, then dP (the inputs' dtype)
  probabilities,    // attention: P (the inputs' dtype)
  score_gradients,  // attention: dS (the inputs' dtype)
  attention_dq,
  attention_dk,
  attention_dv,
  attention_output,      // flash attention's backward: the forward's output, recomputed
  attention_statistics,  // flash attention's backward: lse and delta per query row (f32)
  attention_workspace,   // cuDNN's attention: its workspace, row sums and dq in f32
  partials,              // column sums: (splits, n)
  row_statistics,
  row_losses,
  token_order,      // embedding_grad: the tokens sorted by table row, each row's range, the sort's own
  optimizer_tasks,  // adamw_many: its tasks and chunks
  count
};

class scratch_space {
 public:
  void* get(scratch_use use, std::size_t bytes) {
    device_buffer& b = regions_[static_cast<std::size_t>(use)];
    if (b.size_bytes() < bytes) {
      if (b.size_bytes() != 0) ++generation_;
      b = device_buffer();
      b = device_buffer(bytes);
    }
    return b.data();
  }
  template <class T>
  T* get(scratch_use use, std::size_t count) {
    return static_cast<T*>(get(use, count * sizeof(T)));
  }
  std::uint64_t generation() const { return generation_; }
  std::size_t bytes() const {
    std::size_t total = 0;
    for (const device_buffer& b : regions_) total += b.size_bytes();
    return total;
  }

 private:
  std::array<device_buffer, static_cast<std::size_t>(scratch_use::count)> regions_;
  std::uint64_t generation_ = 0;
};

}  // namespace shardgraph::cuda
