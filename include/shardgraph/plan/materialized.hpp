#pragma once
// materialized: which values some step writes, and which no step needs because only outputs that
// memory_options::outputs leaves out read them.
//
//   plan::check_output_names(p, options.outputs);        // throws on a name that is no output
//   const plan::materialized_values m = plan::plan_materialized(p, idx, fused, options.outputs);
//   m.materialized[i];   // some step writes value i
//   m.unread[i];         // only left-out outputs read value i: its step does not run
//
// A fused chain writes only its last node (the others stay in registers), a product whose bias is
// added in its epilogue writes the add_bias's value, a value a product's epilogue takes over stays
// inside the epilogue, and a split or merge of heads held in another's buffer has none of its own.
// A value that only outputs left out of forward() read, directly or through other such values, is
// not computed at all: a training step that returns the loss does not gather the logits over dp
// and tp.
#include <algorithm>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/plan/step_index.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/plan/step_fusion.hpp"

namespace shardgraph::plan {

// Whether forward() returns output i (`outputs` empty: every output).
inline bool kept_output(const program_view& p, const std::vector<std::string>& outputs, int i) {
  return outputs.empty() ||
         std::find(outputs.begin(), outputs.end(), p.nodes[i].name.view()) != outputs.end();
}

// Fails on a name in `outputs` that is no output of `p`, listing the program's outputs.
inline void check_output_names(const program_view& p, const std::vector<std::string>& outputs) {
  const graph_view& g = p.nodes;
  std::string all;
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == op::output) all += (all.empty() ? "" : ", ") + std::string(g[i].name.view());
  for (const std::string& name : outputs) {
    bool found = false;
    for (int i = 0; i < g.size(); ++i) found = found || (g[i].kind == op::output && g[i].name.view() == name);
    if (!found)
      fail("bind: memory_options.outputs",
           "'" + name + "' is not an output of the program (its outputs: " + all + ")",
           "name outputs of the program, or leave .outputs empty to keep all");
  }
}

struct materialized_values {
  std::vector<bool> materialized;  // per node: some step writes its value
  std::vector<bool> unread;        // per node: only outputs left out read it (its step does not run)
};

inline materialized_values plan_materialized(const program_view& p, const step_index& idx,
                                             const step_fusion& fused,
                                             const std::vector<std::string>& outputs) {
  const graph_view& g = p.nodes;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  materialized_values m;
  m.unread.assign(at(g.size()), false);
  for (int i = g.size() - 1; i >= 0; --i) {  // a node's readers come after it
    const op kind = g[i].kind;
    if (kind == op::output) {
      m.unread[at(i)] = !kept_output(p, outputs, i);
      continue;
    }
    const std::vector<int>& readers = idx.readers[at(i)];
    if (kind == op::parameter || kind == op::input || kind == op::param_grad || kind == op::repeat_begin ||
        kind == op::repeat_end || readers.empty())
      continue;
    m.unread[at(i)] = std::all_of(readers.begin(), readers.end(), [&](int r) { return m.unread[at(r)]; });
  }
  m.materialized.assign(at(g.size()), true);
  for (const step& st : p.steps)
    if (st.kind == step_kind::fused)
      for (int j = st.first; j < st.node; ++j)
        if (!(j == st.first && fused.bias_done_by_product[at(j)])) m.materialized[at(j)] = false;
  for (int i = 0; i < g.size(); ++i)
    if (fused.bias_epilogue_of[at(i)] >= 0 || fused.held_in_epilogue[at(i)] || m.unread[at(i)] ||
        fused.stored_in[at(i)] >= 0)
      m.materialized[at(i)] = false;
  return m;
}

}  // namespace shardgraph::plan
