#pragma once
// repeat: one block, run `layers` times (a size fixed at bind), over per-layer weights.
// The IR holds the block once between repeat_begin and repeat_end, so graph size and compile time
// do not grow with depth. Parameters declared inside get the block's name as prefix
// ("h.attn.q.weight"), and layer i's copy is loaded as "h.<i>.attn.q.weight".
#include <string_view>

#include "shardgraph/ir/builder.hpp"

namespace shardgraph {

// body: (graph_builder&, tensor x) -> tensor of x's shape.
template <class Body>
constexpr tensor repeat(std::string_view name, tensor x, Body body) {
  graph_builder& g = *x.builder;
  if (g.region() >= 0) {
    if (diagnostic* d = g.value().report(x.id))
      *d << "repeat '" << name << "' is nested inside another repeat. flatten the blocks into one repeat";
    return x;
  }
  node begin;
  begin.kind = op::repeat_begin;
  begin.inputs[0] = x.id;
  begin.input_count = 1;
  begin.type = g.value()[x.id].type;
  tensor b = g.make(begin, name);
  g.set_region(b.id);
  g.push_scope(name);
  tensor y = body(g, b);
  g.pop_scope();
  node end;
  end.kind = op::repeat_end;
  end.inputs[0] = y.id;
  end.input_count = 1;
  end.region = b.id;
  end.type = g.value()[y.id].type;
  g.set_region(-1);
  return g.make(end, name);
}

}  // namespace shardgraph
