#pragma once
// A forward's rows as micro-batches of a forward-only pipeline (forward_micro_batches in
// runtime/pipeline_runner.hpp): forward() of a pipeline bound for `batch` rows may be given
// k * batch rows; micro-batch m takes rows [m * batch, (m + 1) * batch) of every input whose first
// dimension is the batch, the other inputs whole, and the outputs' rows are joined in order.
//
//   bound with batch = 2, given input_ids (6, seq) and kv_context (6, kv_table):
//     micro_batch_count(...) == 3; split_micro_batch_rows(...)[1]: rows 2 and 3 of each
//     join_micro_batch_rows(...): logits (6, seq, vocab), micro-batch m's rows at [2m, 2m + 2)
//
// Under dp the batch of each micro-batch is split over the data-parallel ranks as forward() splits
// one batch: row r of micro-batch m runs on dp rank r / (batch / dp).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"
#include "shardgraph/runtime/rank_io.hpp"

namespace shardgraph {

namespace detail {
inline bool batch_major(const node& n) { return n.shape.rank() > 0 && n.shape[0] == dim::batch; }

// Rows [first, first + count) of t (its first dimension).
inline host_tensor row_range(const host_tensor& t, std::int64_t first, std::int64_t count) {
  std::vector<std::int64_t> shape = t.shape();
  const std::size_t row_bytes = t.bytes().size() / static_cast<std::size_t>(shape[0]);
  shape[0] = count;
  host_tensor part(t.type(), shape);
  std::memcpy(part.bytes().data(), t.bytes().data() + static_cast<std::size_t>(first) * row_bytes,
              static_cast<std::size_t>(count) * row_bytes);
  return part;
}
}  // namespace detail

// How many micro-batches of the bound batch the inputs hold: the rows of the batch-major inputs
// over the bound batch. Fails, naming the input, when they are not a multiple of it or differ
// between inputs; 1 where no input is batch-major. The shapes themselves are checked later, per
// micro-batch, as forward() checks one batch.
inline std::int64_t micro_batch_count(const graph_view& g, const local_layout& layout,
                                      const tensor_map& inputs) {
  std::int64_t count = 0;
  std::string first_name;
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::input || !detail::batch_major(g[i])) continue;
    const host_tensor& given = detail::named_input(g[i], inputs);
    const std::int64_t batch = layout.of(i).global[0];
    const std::int64_t rows = given.shape().empty() ? 0 : given.shape()[0];
    const std::string name(g[i].name.view());
    if (rows < batch || rows % batch != 0)
      fail("forward: input '" + name + "'",
           std::to_string(rows) + " rows are not a multiple of the bound batch of " + std::to_string(batch),
           "give the bound batch's rows, or k times them to run k micro-batches through the pipeline");
    if (count != 0 && rows / batch != count)
      fail("forward: input '" + name + "'",
           "holds " + std::to_string(rows / batch) + " micro-batches of rows, but '" + first_name +
               "' holds " + std::to_string(count),
           "give every batch-major input the same rows");
    if (count == 0) first_name = name;
    count = rows / batch;
  }
  return count == 0 ? 1 : count;
}

// The inputs of each of `count` micro-batches (micro_batch_count).
inline std::vector<tensor_map> split_micro_batch_rows(const graph_view& g, const local_layout& layout,
                                                      const tensor_map& inputs, std::int64_t count) {
  std::vector<tensor_map> parts(static_cast<std::size_t>(count), inputs);
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::input || !detail::batch_major(g[i])) continue;
    const std::string name(g[i].name.view());
    const std::int64_t batch = layout.of(i).global[0];
    for (std::int64_t m = 0; m < count; ++m)
      parts[static_cast<std::size_t>(m)][name] = detail::row_range(inputs.at(name), m * batch, batch);
  }
  return parts;
}

// One tensor_map of the micro-batches' outputs, each batch-major output's rows joined in order.
// An output without the batch first (a loss) has nothing to join: it fails when there are several.
inline tensor_map join_micro_batch_rows(const graph_view& g, const std::vector<tensor_map>& parts) {
  if (parts.size() == 1) return parts.front();
  tensor_map joined;
  for (const auto& [name, first] : parts.front()) {
    int i = 0;
    while (i < g.size() && !(g[i].kind == op::output && g[i].name.view() == name)) ++i;
    if (i == g.size() || !detail::batch_major(g[i]))
      fail("forward: output '" + name + "'",
           "it has no batch dimension to join the outputs of " + std::to_string(parts.size()) +
               " micro-batches over",
           "read it from a forward of the bound batch's rows (one micro-batch)");
    std::vector<std::int64_t> shape = first.shape();
    shape[0] *= static_cast<std::int64_t>(parts.size());
    host_tensor whole(first.type(), shape);
    std::size_t at = 0;
    for (const tensor_map& part : parts) {
      const host_tensor& rows = part.at(name);
      std::memcpy(whole.bytes().data() + at, rows.bytes().data(), rows.bytes().size());
      at += rows.bytes().size();
    }
    joined.emplace(name, std::move(whole));
  }
  return joined;
}

}  // namespace shardgraph
