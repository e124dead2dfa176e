#pragma once
// One node of the IR: a plain value (its one pointer names a static constexpr descriptor), so graphs are constexpr values and can be
// copied, compared and printed. Inputs refer to earlier nodes by index (the graph is in
// topological order by construction).
#include <cstdint>

#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/fixed_string.hpp"
#include "shardgraph/core/shape.hpp"
#include "shardgraph/ir/along_dimension.hpp"
#include "shardgraph/ir/attention_masking.hpp"
#include "shardgraph/ir/op.hpp"
#include "shardgraph/ir/rope_scaling.hpp"
#include "shardgraph/mesh/shard_spec.hpp"

namespace shardgraph {

inline constexpr int max_inputs = 5;  // a masked attention's gradients read q, k, v, the output's
                                      // gradient and the mask

// How cross_entropy reduces its rows' losses (torch's `reduction`): the mean over the targets that
// count (not ignore_index), or their sum.
struct custom_op;  // ir/custom_op.hpp

enum class loss_reduction : std::uint8_t { mean, sum };

struct node {
  op kind = op::input;
  name_buffer name;
  int inputs[max_inputs]{-1, -1, -1, -1, -1};
  int input_count = 0;
  std::int32_t slice_offset = 0;  // slice, slice_grad: where the slice starts (plus slice_after's size)
  shardgraph::shape shape;
  dtype type = dtype::f32;

  shard_spec spec;                  // placement of this node's value on every mesh axis
  shard_spec required[max_inputs];  // placement each input must have when this op reads it
  bool annotated = false;           // spec was written by the user (leaves, redistribute)
  std::uint8_t named_axes = 0;      // redistribute: bit a set where the user named mesh axis a; on
                                    // the others the value keeps its input's placement

  double scalar = 0.0;       // layer_norm / rms_norm: eps
  rope_scaling rope;         // rope and rope_grad: theta and the scaling kind
  bool transpose_b = false;  // linear: the weight is stored (out, in) instead of (in, out)
  int axis = -1;             // collectives and local_slice: the mesh axis
  int from_dim = -1;         // all_gather, all_to_all: the dimension that was sharded
  int to_dim = -1;           // reduce_scatter, local_slice, all_to_all: the dimension that becomes sharded
  int reason = -1;           // redistribution: the node whose input placement required it
  int region = -1;           // index of the repeat_begin whose body holds this node (repeat_end: its begin)
  int group = -1;            // fusion group: index of the group's first node; -1 if not fused
  int origin = -1;           // param_grad: the parameter; a backward repeat_begin: the forward block's begin
  bool reverse = false;      // repeat_begin of a backward block: runs the layers last to first
  along_dimension along;     // concat, slice, slice_grad, sum, mean, broadcast (ir/along_dimension.hpp)
  int deferred_axis = -1;    // param_grad under ZeRO-2: on this (data-parallel) axis a Partial gradient
                             // stays Partial; the optimizer reduce-scatters it
  std::int64_t ignore_index = -100;                // cross_entropy (and its gradient): targets that do not count
  loss_reduction reduction = loss_reduction::mean;  // cross_entropy (and its gradient)
  int vocab_axis = -1;  // cross_entropy and its gradient: the mesh axis that shards the logits'
                        // vocabulary (passes/vocab_parallel_loss.hpp); -1: the vocabulary is whole
  attention_masking masking;  // attention and its gradients: causal, and what the mask input holds
  // permute: the result's dimension k is the input's dimension permutation[k], for k below the
  // input's rank; -1 past the dimensions given
  std::int8_t permutation[max_rank]{-1, -1, -1, -1};
  // unfold1d and fold1d: the window's step along the length, and the zeros padded on each end
  std::int8_t stride = 1, padding = 0;
  const dimension* slice_after = nullptr;  // slice, slice_grad: a dimension the slice starts after
                                           // (ir/along_dimension.hpp)
  const custom_op* custom = nullptr;               // op::custom: the user's op (its name, rules, kernels);
                                                   // scalar carries its attribute
  // patchify and unpatchify: the side of a square patch (also its stride); unfold1d and fold1d:
  // the kernel's length. Sized at bind like any dimension.
  const dimension* window = nullptr;
  std::uint64_t seed = 0;  // dropout: its mask's seed (scalar: the probability p of dropping)
  bool kv_cache = false;   // parameter: a KV cache (passes/attach_kv_cache.hpp), state the program
                           // writes; not loaded from weights, zero at bind

  constexpr int input(int i) const { return inputs[i]; }
  // The repeat block whose body computes this value (-1: outside any block). repeat_end's own
  // value lives after its block, though its `region` names the block.
  constexpr int body() const { return kind == op::repeat_end ? -1 : region; }
};

}  // namespace shardgraph
