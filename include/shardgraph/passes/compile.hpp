#pragma once
// compile: the fixed pass pipeline, graph -> per-rank program (DESIGN §3):
//   verify -> [autodiff, for training] -> propagate_sharding -> split_vocab_parallel_loss
//     -> insert_collectives -> fuse -> lower
//
//   constexpr auto program = shardgraph::compile<my_model>();   // my_model: constexpr graph()
//
// A structural mistake stops compilation with the graph's diagnostic spelled out in the
// compiler's message, e.g.
//   error: invalid application of 'sizeof' to incomplete type 'shardgraph::shardgraph_compile_error<
//     shardgraph::diagnostic{"shardgraph: linear 'h.mlp.c_proj': on axis 'tp': conflicting ..."}>'
// compile_graph() runs the same pipeline at run time (printers, tests) and leaves the
// diagnostic in the result instead.
#include <utility>

#include "shardgraph/ir/compile_error.hpp"
#include "shardgraph/passes/attach_kv_cache.hpp"
#include "shardgraph/passes/autodiff.hpp"
#include "shardgraph/passes/fuse.hpp"
#include "shardgraph/passes/insert_collectives.hpp"
#include "shardgraph/passes/propagate_sharding.hpp"
#include "shardgraph/passes/verify.hpp"
#include "shardgraph/passes/vocab_parallel_loss.hpp"
#include "shardgraph/program/program.hpp"

namespace shardgraph {

// What the program computes: the forward pass only, or forward and backward (gradients of the
// output named "loss" for every parameter).
// training::zero_stage selects sharded data parallelism (ZeRO): 0 plain data parallel; 1 optimizer
// states sharded over data-parallel ranks; 2 also gradients (reduce-scattered instead of
// all-reduced); 3 also parameters (each rank keeps 1/D of every weight; the executor all-gathers a
// layer's weights before the layer runs, prefetching the next layer's, and drops them after).
// Stage 1 and 0 compile to the same program; stages 2 and 3 change the gradient reductions.
// training::bucket_bytes: the gradient all-reduces of a data-parallel program are packed, in the
// order backward makes them, into buckets of at most this many bytes; each bucket is reduced by
// one collective as soon as its last gradient is ready (PyTorch DDP's bucket_cap_mb, 25 MiB).
// training::overlap_communication: that collective runs on a communication thread of the rank, on
// a communicator of its own, while backward computes the next bucket's gradients (forward() waits
// for the last one before it returns); so does ZeRO-3's gather of the next layer's weights while
// this layer computes. Communicators that allow it: threads and nccl (not mpi, whose world is
// MPI_THREAD_FUNNELED). Off: each runs where it stands, as the main thread's call.
// training::pipeline_axis: a mesh axis of that name makes its ranks pipeline stages, each running a
// contiguous part of the repeat block's layers (bind's pipeline_options choose the split and the
// schedule). Nothing is sharded on it, so the program has no collective on it.
// inference::kv_cache: the program generates: its causal self-attentions write and read a KV cache
// that the bound rank keeps between calls, and its positions come from the kv_context input
// (passes/attach_kv_cache.hpp). Bound with seq = a prompt's length it is the prefill program, with
// seq = 1 the decode program; both compile from the one model. Off: the plain forward program.
struct inference {
  name_buffer pipeline_axis = "pp";  // if the mesh has this axis, its ranks are pipeline stages
  bool kv_cache = false;
};
struct training {
  int zero_stage = 0;
  name_buffer zero_axis = "dp";                        // the data-parallel axis ZeRO shards over
  shardgraph::recompute recompute = recompute::none;   // activation recomputation of repeat blocks
  std::int64_t bucket_bytes = std::int64_t{25} << 20;  // gradient bucket size; 0: one collective per gradient
  bool overlap_communication = true;                   // buckets and ZeRO-3 gathers overlap compute
  name_buffer pipeline_axis = "pp";  // if the mesh has this axis, its ranks are pipeline stages
};

// Every node's placement, with the cross-entropies over vocabulary-sharded logits split into their
// statistics (passes/vocab_parallel_loss.hpp).
template <std::size_t Capacity>
constexpr basic_graph<Capacity> placed(const basic_graph<Capacity>& g) {
  return passes::split_vocab_parallel_loss(passes::propagate_sharding(g));
}

template <std::size_t Capacity>
constexpr basic_program<Capacity> compile_graph(const basic_graph<Capacity>& g) {
  return lower(passes::fuse(passes::insert_collectives(placed(passes::verify(g)))));
}

namespace detail {
// Records in `checked` the first training option that cannot be met; returns the ZeRO axis.
constexpr int check_training_options(graph_ref checked, const training& t) {
  if (checked.ok() && (t.zero_stage < 0 || t.zero_stage > 3) && checked.size() > 0)
    if (diagnostic* d = checked.report(checked.size() - 1))
      *d << "ZeRO stage " << t.zero_stage << " does not exist (stages are 0 to 3). "
         << "choose zero_stage 0 (data parallel), 1 (optimizer states), 2 (and gradients) or 3 (and "
            "parameters)";
  if (checked.ok() && t.bucket_bytes < 0 && checked.size() > 0)
    if (diagnostic* d = checked.report(checked.size() - 1))
      *d << "bucket_bytes is negative. give the gradient bucket size in bytes, or 0 for one collective per "
            "gradient";
  const int zero_axis = checked.axes.index_of(t.zero_axis.view());
  if (checked.ok() && t.zero_stage >= 1 && zero_axis < 0 && checked.size() > 0)
    if (diagnostic* d = checked.report(checked.size() - 1))
      *d << "ZeRO shards over axis '" << t.zero_axis.view() << "', which the mesh does not have. "
         << "set training::zero_axis to the data-parallel axis";
  return zero_axis;
}
}  // namespace detail

// verify -> autodiff -> propagate_sharding -> ...: placements are derived once, over forward and
// backward together, so backward ops follow the same signatures as forward ones.
template <std::size_t Capacity>
constexpr basic_program<Capacity> compile_graph(const basic_graph<Capacity>& g, training t) {
  basic_graph<Capacity> checked = passes::verify(g);
  const int zero_axis = detail::check_training_options(checked, t);
  basic_program<Capacity> p = lower(passes::fuse(
      passes::insert_collectives(placed(passes::autodiff(checked, t.zero_stage >= 2 ? zero_axis : -1)))));
  p.zero_stage = t.zero_stage;
  p.zero_axis = t.zero_stage >= 1 ? zero_axis : -1;
  p.recompute = t.recompute;
  p.bucket_bytes = t.bucket_bytes;
  p.overlap_communication = t.overlap_communication;
  p.pipeline_axis = checked.axes.index_of(t.pipeline_axis.view());
  return p;
}
template <std::size_t Capacity>
constexpr basic_program<Capacity> compile_graph(const basic_graph<Capacity>& g, inference i) {
  basic_program<Capacity> p =
      i.kv_cache ? lower(passes::fuse(passes::insert_collectives(passes::attach_kv_cache(placed(passes::verify(g))))))
                 : compile_graph(g);
  p.pipeline_axis = p.nodes.axes.index_of(i.pipeline_axis.view());
  return p;
}

// Build: a constexpr function or captureless lambda returning the model's graph;
// Mode: inference{} (the default) or training{}.
// The program's capacity is the graph's: Build's builder<Mesh, Capacity>.
template <auto Build, auto Mode = inference{}>
consteval auto compile() {
  constexpr auto result = compile_graph(Build(), Mode);
  static_assert(report_compile_error<result.nodes.error>(),
                "shardgraph: compile: the model has an error, shown above");
  return result;
}

}  // namespace shardgraph
