#pragma once
// rank_io: a rank's program inputs in, as host tensors by name, and its outputs and parameter
// slices out.
//
//   tensor_map inputs{{"input_ids", ids}, {"targets", targets}};   // whole, on every rank
//   host_tensor mine = local_input(g[i], layout.of(i), inputs);     // this rank's slice of input i
//   const host_tensor& given = given_local_input(g[i], layout.of(i), slices);   // a slice given, checked
//   const local_dims& rows = input_slice(g, layout, "input_ids");   // where this rank's slice lies
//   tensor_map out = download_outputs(backend, g, layout, unread, values, "loss");
//   tensor_map part = local_outputs(g, layout, std::move(out));       // this rank's slice of each
//   tensor_part w = download_part(backend, g[p], layout.of(p), value);   // (slice, values)
//
// By default every rank receives each input whole and keeps its own slice (local_dims: global
// shape, offset, local shape). With io_options{.inputs = io_part::local} each rank is given its own
// slice instead (of shape local_dims::local), as an MPI code that holds its data distributed has
// it. Which one is given is stated, never guessed from the size; a size that is neither is an
// error naming both. Every output is downloaded as this rank holds it: whole, since outputs are
// Replicate; io_options{.outputs = io_part::local} cuts out this rank's slice (local_outputs).
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

// Which part of a sharded tensor crosses forward()'s (and the trainer's) boundary on each rank: the
// whole global tensor, or this rank's own slice of it (a replicated tensor's slice is the whole).
enum class io_part { whole, local };
struct io_options {
  io_part inputs = io_part::whole;   // local: each rank passes its slice of every input
  io_part outputs = io_part::whole;  // local: each rank receives its slice of every output
};

namespace detail {
// "f32 (4, 2, 3)"
inline std::string typed_shape(dtype t, const std::vector<std::int64_t>& shape) {
  std::string dims;
  for (auto v : shape) dims += (dims.empty() ? "" : ", ") + std::to_string(v);
  return std::string(dtype_name(t)) + " (" + dims + ")";
}
inline const host_tensor& named_input(const node& n, const tensor_map& inputs) {
  auto it = inputs.find(std::string(n.name.view()));
  if (it == inputs.end())
    fail("forward", "input '" + std::string(n.name.view()) + "' is missing",
         "pass every input of the program by name");
  return it->second;
}
}  // namespace detail

// This rank's slice of input node n (local_dims d), from the global tensor of its name in `inputs`.
// Throws, naming the input, when it is missing or of another dtype or shape.
inline host_tensor local_input(const node& n, const local_dims& d, const tensor_map& inputs) {
  const std::string name(n.name.view());
  const host_tensor& global = detail::named_input(n, inputs);
  if (global.type() != n.type || global.shape() != d.global) {
    const bool slice = global.type() == n.type && global.shape() == d.local;
    fail("forward: input '" + name + "'",
         "expected " + detail::typed_shape(n.type, d.global) + " but got " +
             detail::typed_shape(global.type(), global.shape()) +
             (d.local == d.global ? ""
                                  : " (this rank's slice is " + detail::typed_shape(n.type, d.local) + ")"),
         slice ? "this is this rank's slice: say so with io_options{.inputs = io_part::local}, or pass "
                 "the whole global tensor"
               : "pass the whole global tensor; each rank takes its own slice");
  }
  host_tensor local(n.type, d.local);
  const std::size_t bytes = dtype_size(n.type);
  for_each_in_slice(tensor_slice{d.global, d.offset, d.local}, [&](std::int64_t g, std::int64_t l) {
    std::memcpy(local.bytes().data() + static_cast<std::size_t>(l) * bytes,
                global.bytes().data() + static_cast<std::size_t>(g) * bytes, bytes);
  });
  return local;
}

// Input node n's slice (local_dims d) as this rank was given it in `inputs` (io_part::local).
// Throws, naming the input and both its local and global shapes, when it is missing, of another
// dtype, or of another shape (the whole tensor's included, when that differs from the slice).
inline const host_tensor& given_local_input(const node& n, const local_dims& d, const tensor_map& inputs) {
  const host_tensor& given = detail::named_input(n, inputs);
  if (given.type() == n.type && given.shape() == d.local) return given;
  const bool whole = given.type() == n.type && given.shape() == d.global;
  fail("forward: input '" + std::string(n.name.view()) + "'",
       "expected this rank's slice " + detail::typed_shape(n.type, d.local) + " of the global " +
           detail::typed_shape(n.type, d.global) + " but got " +
           (whole ? "the whole tensor" : detail::typed_shape(given.type(), given.shape())),
       whole ? "pass this rank's slice, or the whole tensor without io_options{.inputs = io_part::local}"
             : "give each rank its own slice of the global tensor (shardgraph::input_slice gives its "
               "offset and shape)");
}

// Where this rank's slice of the program's input `name` lies in the global tensor: global shape,
// offset and local shape (rows [offset[0], offset[0] + local[0]) of a batch sharded on dp).
// Throws when the program has no input of that name.
inline const local_dims& input_slice(const graph_view& g, const local_layout& layout, std::string_view name) {
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == op::input && g[i].name.view() == name) return layout.of(i);
  fail("input_slice", "the program has no input '" + std::string(name) + "'",
       "name one of the program's inputs");
}

namespace detail {
// The value an output's gathers start from: its input before the all_gathers and all_reduces that
// make it Replicate.
inline int gathered_from(const graph_view& g, int i) {
  while (g[i].kind == op::all_gather || g[i].kind == op::all_reduce) i = g[i].inputs[0];
  return i;
}
}  // namespace detail

// This rank's slice of each output in `whole` (outputs as download_outputs gives them): the block
// its value had before the program gathered it to every rank, on every axis it was sharded on; on an
// axis where it was Replicate or Partial (summed), the whole extent.
inline tensor_map local_outputs(const graph_view& g, const local_layout& layout, tensor_map whole) {
  for (int i = 0; i < g.size(); ++i) {
    auto it = g[i].kind == op::output ? whole.find(std::string(g[i].name.view())) : whole.end();
    if (it == whole.end()) continue;
    const local_dims& d = layout.of(detail::gathered_from(g, g[i].inputs[0]));
    if (d.local == d.global) continue;
    host_tensor part(g[i].type, d.local);
    const std::size_t bytes = dtype_size(g[i].type);
    for_each_in_slice(tensor_slice{d.global, d.offset, d.local}, [&](std::int64_t at, std::int64_t l) {
      std::memcpy(part.bytes().data() + static_cast<std::size_t>(l) * bytes,
                  it->second.bytes().data() + static_cast<std::size_t>(at) * bytes, bytes);
    });
    it->second = std::move(part);
  }
  return whole;
}

// The program's outputs as this rank holds them (`values`: per node); with `only`, just the one of
// that name. An output that bind's memory_options::outputs leaves out (`unread`) is skipped, or
// fails when it is the one asked for.
template <class Backend>
tensor_map download_outputs(Backend& backend, const graph_view& g, const local_layout& layout,
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
