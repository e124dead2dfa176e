#pragma once
// The run time's own copy of a compiled program, of whatever capacity it was built with: a rank
// keeps one, so the program it was bound from may go (a temporary compile_graph(...) result).
#include <vector>

#include "shardgraph/program/program.hpp"

namespace shardgraph {

class owned_program {
 public:
  explicit owned_program(const program_view& p)
      : options_(p), axes_(p.nodes.axes), nodes_(p.nodes.nodes.begin(), p.nodes.nodes.end()),
        steps_(p.steps.begin(), p.steps.end()), error_() {
    error_ << p.error();
  }
  // Points at this object: valid while it lives and is not moved from (a rank holds it by pointer).
  program_view view() const { return {options_, graph_view(axes_, nodes_, error_), steps_}; }

 private:
  program_options options_;
  mesh_axes axes_;
  std::vector<node> nodes_;
  std::vector<step> steps_;
  diagnostic error_;
};

}  // namespace shardgraph
