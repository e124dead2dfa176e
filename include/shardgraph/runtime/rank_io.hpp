#pragma once
// rank_io: a rank's program inputs in, as global host tensors by name, and its outputs and
// parameter slices out.
//
//   tensor_map inputs{{"input_ids", ids}, {"targets", targets}};   // whole, on every rank
//   host_tensor mine = local_input(g[i], layout.of(i), inputs);     // this rank's slice of input i
//   tensor_map out = download_outputs(backend, g, layout, unread, values, "loss");
//   tensor_part w = download_part(backend, g[p], layout.of(p), value);   // (slice, values)
//
// Every rank receives each input whole and keeps its own slice (local_dims: global shape, offset,
// local shape); every output is downloaded as this rank holds it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/core/weight_source.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph {

using tensor_map = std::map<std::string, host_tensor>;

// This rank's slice of input node n (local_dims d), from the global tensor of its name in `inputs`.
// Throws, naming the input, when it is missing or of another dtype or shape.
inline host_tensor local_input(const node& n, const local_dims& d, const tensor_map& inputs) {
  const std::string name(n.name.view());
  auto it = inputs.find(name);
  if (it == inputs.end())
    fail("forward", "input '" + name + "' is missing", "pass every input of the program by name");
  const host_tensor& global = it->second;
  if (global.type() != n.type || global.shape() != d.global) {
    std::string want, got;
    for (auto v : d.global) want += (want.empty() ? "" : ", ") + std::to_string(v);
    for (auto v : global.shape()) got += (got.empty() ? "" : ", ") + std::to_string(v);
    fail("forward: input '" + name + "'",
         "expected " + std::string(dtype_name(n.type)) + " (" + want + ") but got " +
             std::string(dtype_name(global.type())) + " (" + got + ")",
         "pass the whole global tensor; each rank takes its own slice");
  }
  host_tensor local(n.type, d.local);
  const std::size_t bytes = dtype_size(n.type);
  for_each_in_slice(tensor_slice{d.global, d.offset, d.local}, [&](std::int64_t g, std::int64_t l) {
    std::memcpy(local.bytes().data() + static_cast<std::size_t>(l) * bytes,
                global.bytes().data() + static_cast<std::size_t>(g) * bytes, bytes);
  });
  return local;
}

// The program's outputs as this rank holds them (`values`: per node); with `only`, just the one of
// that name. An output that bind's memory_options::outputs leaves out (`unread`) is skipped, or
// fails when it is the one asked for.
template <class Backend>
tensor_map download_outputs(Backend& backend, const graph& g, const local_layout& layout,
                            const std::vector<bool>& unread, std::span<typename Backend::buffer> values,
                            std::string_view only = {}) {
  tensor_map result;
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::output || (!only.empty() && g[i].name.view() != only)) continue;
    if (unread[static_cast<std::size_t>(i)]) {
      if (only.empty()) continue;
      fail("forward: output '" + std::string(only) + "'", "bind's memory_options.outputs leaves it out",
           "add \"" + std::string(only) +
               "\" to memory_options{.outputs}, or leave .outputs empty to keep all");
    }
    host_tensor t(g[i].type, layout.of(i).local);
    backend.download(values[static_cast<std::size_t>(i)], t.bytes().data());
    result.emplace(std::string(g[i].name.view()), std::move(t));
  }
  return result;
}

// A slice of a global tensor, as this rank holds it: where it lies, and its values.
struct tensor_part {
  tensor_slice slice;
  host_tensor values;
};

// Node n's slice (local_dims d) from buffer v, which holds at least the slice's elements (a ZeRO-3
// gather's is padded to whole chunks: its first elements are the slice).
template <class Backend>
tensor_part download_part(Backend& backend, const node& n, const local_dims& d,
                          const typename Backend::buffer& v) {
  host_tensor t(n.type, d.local);
  if (v.size_bytes() <= t.bytes().size()) {
    backend.download(v, t.bytes().data());
  } else {
    std::vector<std::byte> bytes(v.size_bytes());
    backend.download(v, bytes.data());
    std::memcpy(t.bytes().data(), bytes.data(), t.bytes().size());
  }
  return {tensor_slice{d.global, d.offset, d.local}, std::move(t)};
}

}  // namespace shardgraph
