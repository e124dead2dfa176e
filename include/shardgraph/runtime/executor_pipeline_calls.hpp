#pragma once
// rank_pipeline_calls (rank_program::pipeline_calls): what the pipeline runner (runtime/pipeline_runner.hpp) asks of a
// rank, as its `Stage`: the running bank, values and outputs, segments of steps, device copies and
// host spans, ZeRO-3's gathers. A friend of rank_program (runtime/executor.hpp).
#include <string>
#include <string_view>

#include "shardgraph/runtime/executor.hpp"

namespace shardgraph {

template <class Backend, class Comm>
struct rank_pipeline_calls {
  using buffer = typename Backend::buffer;
  rank_program<Backend, Comm>& rank;

  void select_bank(int k) { rank.select_bank(k); }
  buffer& value(int i) { return rank.value(i); }
  buffer& value_at(int i, std::int64_t layer) { return rank.value_at(i, layer); }
  buffer& output_value(int i) { return rank.storage_.values()[static_cast<std::size_t>(i)]; }
  void upload_inputs(const tensor_map& inputs) { rank.upload_inputs(inputs); }
  tensor_map outputs(std::string_view only) { return rank.outputs(only); }
  void restore_outputs(const tensor_map& kept) {
    const graph_view& g = rank.program_.nodes;
    for (int i = 0; i < g.size(); ++i)
      if (auto it = kept.find(std::string(g[i].name.view())); g[i].kind == op::output && it != kept.end())
        rank.backend_.upload(output_value(i), it->second.bytes().data());
  }
  void run_segment(const step_segment& sg) { rank.run_segment(sg); }
  void copy(buffer& from, buffer& to) { rank.backend_.copy(from, to); }
  template <class Fn>
  void with_span(buffer& b, Fn&& fn) {
    detail::with_element_type(b.type(), [&](auto zero) {
      using T = decltype(zero);
      fn(rank.template span_of<T>(b, b.numel()));
    });
  }
  void gather_unlayered_parameters() {
    if (rank.zero3_) rank.gather_unlayered_parameters();
  }
  void release_unlayered_parameters() {
    if (rank.zero3_) rank.release_unlayered_parameters();
  }
};

}  // namespace shardgraph
