#pragma once
// Parameters shared by several bindings of one inference program on one rank: the weights and the
// KV cache in one copy, read from the weight source once, whatever (batch, seq) each binding runs.
//
//   auto prefill = bind(generation, sizes(batch, prompt), comm, cpu::backend{}, mesh, weights);
//   auto decode = prefill.rebind(sizes(batch, 1));   // the same weight and cache buffers
//   auto other = bind(generation, sizes(4, 1), comm, cpu::backend{}, mesh, prefill.share_parameters());
//
// A binding of an inference program allocates its parameters in a parameter_memory (the weights,
// the KV cache: every allocation that holds one, layer blocks included) and its values are views
// into it. A binding made with shared_parameters makes its views into the same allocations instead
// of allocating and loading: it neither reads the weights nor counts their bytes as its own
// (memory_report::shared_parameters). The memory is owned jointly (std::shared_ptr) by every
// binding and handle that uses it, so it lives as long as the last of them, in any order.
//
// Sharing needs every parameter to have the same slice in both bindings: the same program, mesh
// coordinates, dtype, local shape and pipeline layers. bind checks this before any communication
// (batch and seq may differ; a size that changes a parameter's shape, such as kv_blocks, may not).
// Training programs do not share: each binding would hold its own gradients of one set of weights
// that its optimizer updates (refused by share_parameters() and by bind).
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/weight_source.hpp"
#include "shardgraph/plan/pipeline_stages.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph {

// What a parameter is on one rank, as two bindings sharing it must agree.
struct parameter_signature {
  int node = 0;
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> local;  // this rank's slice's shape
  std::vector<bool> held_layers;    // per block layer (one entry outside blocks): this stage holds it
};

// Every parameter of a binding (program node order) and where the rank stands on the mesh.
struct parameters_signature {
  int nodes = 0;  // the program's node count
  std::vector<int> coordinates;
  std::vector<parameter_signature> parameters;
};

inline parameters_signature sign_parameters(const graph_view& g, const local_layout& layout,
                                            const plan::pipeline_stages& stages, std::int64_t layers) {
  parameters_signature s{.nodes = g.size(), .coordinates = {}, .parameters = {}};
  for (int a = 0; a < g.axes.size(); ++a) s.coordinates.push_back(layout.coordinate(a));
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::parameter) continue;
    parameter_signature p{.node = i,
                          .name = std::string(g[i].name.view()),
                          .type = g[i].type,
                          .local = layout.of(i).local,
                          .held_layers = {}};
    for (std::int64_t l = 0; l < (g[i].region >= 0 ? layers : 1); ++l)
      p.held_layers.push_back(stages.holds(i, l));
    s.parameters.push_back(std::move(p));
  }
  return s;
}

namespace detail {

inline std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string t = "(";
  for (std::size_t d = 0; d < shape.size(); ++d) t += (d ? ", " : "") + std::to_string(shape[d]);
  return t + ")";
}

}  // namespace detail

// Fails, naming the first difference, unless a binding of signature `mine` can use the parameters
// of a binding of signature `theirs`.
inline void check_shared_parameters(const parameters_signature& mine, const parameters_signature& theirs) {
  const std::string where = "bind: shared parameters";
  const std::string how =
      "share parameters only between bindings of one program on one rank whose sizes give every "
      "parameter the same shape (batch and seq may differ; kv_blocks, model, heads, layers may "
      "not), or bind this one with the weights";
  if (mine.nodes != theirs.nodes || mine.parameters.size() != theirs.parameters.size())
    fail(where, "this program has other parameters than the binding that holds the shared ones", how);
  if (mine.coordinates != theirs.coordinates)
    fail(where, "this rank stands elsewhere on the mesh than the binding that holds the shared parameters",
         how);
  for (std::size_t k = 0; k < mine.parameters.size(); ++k) {
    const parameter_signature &a = mine.parameters[k], &b = theirs.parameters[k];
    const std::string named = "parameter '" + a.name + "'";
    if (a.node != b.node || a.name != b.name || a.type != b.type)
      fail(where, named + " is not the shared binding's parameter '" + b.name + "' of the same dtype", how);
    if (a.local != b.local)
      fail(where,
           named + " is " + detail::shape_text(a.local) + " on this rank at these sizes, " +
               detail::shape_text(b.local) + " in the binding that holds the shared parameters",
           how);
    if (a.held_layers != b.held_layers)
      fail(where,
           named + " is held for other pipeline layers than in the binding that holds the shared parameters",
           how);
  }
}

inline void refuse_training_share(const program_view& p, const std::string& where) {
  if (p.is_training())
    fail(where,
         "the program trains: each binding holds its own gradients, and an optimizer step updates the "
         "weights of "
         "one binding",
         "share parameters between bindings of an inference program (compile<model, inference{...}>()), or "
         "bind "
         "each training program with the weights");
}

// The allocations that hold one binding's parameters, and where each parameter's value lies in
// them, for the bindings that share them.
template <class Backend>
struct parameter_memory {
  using buffer = typename Backend::buffer;
  // Where parameter `node`'s value lies in layer `layer` (-1: its one value outside blocks).
  struct place {
    std::size_t allocation = 0;  // into allocations
    std::size_t offset = 0;      // bytes from the allocation's start
    std::int64_t numel = 0;
  };

  parameters_signature signature;
  std::deque<buffer> allocations;  // a deque: views into them stay valid as more are added
  std::map<std::pair<int, std::int64_t>, place> places;

  // Records `numel` elements of node's value in `layer` at `offset` of the last allocation.
  void record(int node, std::int64_t layer, std::size_t offset, std::int64_t numel) {
    places[{node, layer}] = {allocations.size() - 1, offset, numel};
  }
  const place* find(int node, std::int64_t layer) const {
    auto it = places.find({node, layer});
    return it == places.end() ? nullptr : &it->second;
  }
};

// A handle on a binding's parameters, for bind(..., shared_parameters) (rank_program::share_parameters()).
template <class Backend>
class shared_parameters {
 public:
  explicit shared_parameters(std::shared_ptr<parameter_memory<Backend>> memory)
      : memory_(std::move(memory)) {}
  const std::shared_ptr<parameter_memory<Backend>>& memory() const { return memory_; }

 private:
  std::shared_ptr<parameter_memory<Backend>> memory_;
};

// How a binding gets its parameters: read from `weights`, or those of `shared`.
template <class Backend>
struct parameter_origin {
  const weight_source* weights = nullptr;
  std::shared_ptr<parameter_memory<Backend>> shared;
};

}  // namespace shardgraph
