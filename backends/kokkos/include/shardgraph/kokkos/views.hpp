#pragma once
// Kokkos::View in and out: how an HPC code that holds its data in Views hands it to a program and
// takes results back.
//
//   host_tensor to_host_tensor(v)      a copy of v, row-major, shape = v's extents
//   void copy_to_view(t, v)            the reverse; dtype and shape must match exactly
//   weight_source view_weights(...)    parameters served from Views, by name or by label
//
// A View is read by its logical indices, never by its memory order: element (i, j) of a
// LayoutLeft, LayoutRight or LayoutStride view is row-major element (i, j) of the tensor.
// Views in other memory spaces go through a host mirror (Kokkos::create_mirror_view_and_copy);
// views already in host memory are read and written in place.
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/core/weight_source.hpp"

namespace shardgraph::kokkos {

// The element types that a host_tensor holds and a View may carry. std::int64_t is `long` here:
// a View of `long long` is not one of them.
template <class T>
concept tensor_element = std::same_as<T, double> || std::same_as<T, float> ||
                         std::same_as<T, std::int64_t> || std::same_as<T, std::int32_t>;

// What to_host_tensor and view_weights need of a View: a Kokkos::View (not a DynRankView) of rank
// 1 to 4, whose element type a host_tensor can hold, in a memory space that Kokkos can mirror
// into HostSpace.
// clang-format off
template <class View>
concept readable_view =
    Kokkos::is_view<View>::value &&
    static_cast<std::size_t>(View::rank) >= 1 && static_cast<std::size_t>(View::rank) <= 4 &&
    tensor_element<typename View::non_const_value_type> &&
    requires(const View& v) { Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, v); };
// clang-format on

// What copy_to_view needs: a readable_view whose elements are not const.
template <class View>
concept writable_view = readable_view<View> && !std::is_const_v<typename View::value_type>;

namespace detail {

template <class View>
inline constexpr std::size_t rank_of = static_cast<std::size_t>(View::rank);

template <class View>
using extents_array = std::array<std::size_t, rank_of<View>>;

template <class View>
extents_array<View> extents_of(const View& v) {
  extents_array<View> e{};
  for (std::size_t d = 0; d < e.size(); ++d) e[d] = static_cast<std::size_t>(v.extent(d));
  return e;
}

template <class View>
std::vector<std::int64_t> shape_of(const View& v) {
  std::vector<std::int64_t> shape;
  for (std::size_t e : extents_of(v)) shape.push_back(static_cast<std::int64_t>(e));
  return shape;
}

inline std::string shape_text(std::span<const std::int64_t> shape) {  // "(2, 3)", "(4,)"
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// "view 'velocity'", or "an unlabelled view"
template <class View>
std::string view_name(const View& v) {
  return v.label().empty() ? std::string("an unlabelled view") : "view '" + v.label() + "'";
}

// "f64 (4, 6)"
inline std::string typed_shape_text(dtype type, std::span<const std::int64_t> shape) {
  return std::string(dtype_name(type)) + " " + shape_text(shape);
}

// Calls fn(local, element) for every element of the block [offset, offset + count) of `host`, a
// host-accessible View, in the block's row-major order: local = 0, 1, ..., numel(count) - 1.
// `element` is the View's reference to it, so fn may read or assign it.
template <class HostView, class Fn>
void for_each_in_block(const HostView& host, const extents_array<HostView>& offset,
                       const extents_array<HostView>& count, Fn&& fn) {
  constexpr std::size_t rank = rank_of<HostView>;
  const auto& o = offset;
  const auto& c = count;
  std::size_t local = 0;
  if constexpr (rank == 1) {
    for (std::size_t i = 0; i < c[0]; ++i) fn(local++, host(o[0] + i));
  } else if constexpr (rank == 2) {
    for (std::size_t i = 0; i < c[0]; ++i)
      for (std::size_t j = 0; j < c[1]; ++j) fn(local++, host(o[0] + i, o[1] + j));
  } else if constexpr (rank == 3) {
    for (std::size_t i = 0; i < c[0]; ++i)
      for (std::size_t j = 0; j < c[1]; ++j)
        for (std::size_t k = 0; k < c[2]; ++k) fn(local++, host(o[0] + i, o[1] + j, o[2] + k));
  } else {
    for (std::size_t i = 0; i < c[0]; ++i)
      for (std::size_t j = 0; j < c[1]; ++j)
        for (std::size_t k = 0; k < c[2]; ++k)
          for (std::size_t l = 0; l < c[3]; ++l) fn(local++, host(o[0] + i, o[1] + j, o[2] + k, o[3] + l));
  }
}

// A contiguous LayoutRight view's memory is already the row-major tensor: one memcpy suffices.
template <class HostView>
bool is_row_major_contiguous(const HostView& host) {
  return std::is_same_v<typename HostView::array_layout, Kokkos::LayoutRight> && host.span_is_contiguous();
}

// Whether a View of `from` may fill an output of `to`: f64 and f32 convert either way (as
// random_weights and the checkpoint readers fill both); integers must match exactly.
inline bool convertible_for_weights(dtype from, dtype to) {
  const auto floating = [](dtype t) { return t == dtype::f64 || t == dtype::f32; };
  return from == to || (floating(from) && floating(to));
}

template <class Fn>
void with_tensor_element(dtype t, Fn&& fn) {
  if (!visit_host_element(t, fn))
    fail("kokkos::view_weights",
         "dtype " + std::string(dtype_name(t)) + " cannot be filled from a Kokkos::View",
         "serve the parameter in f64, f32, i64 or i32");
}

// Copies `slice` of parameter `name`, held in `v` (extents = the parameter's global shape), into
// `out` (slice.count shape, row-major).
template <readable_view View>
void read_view_slice(const View& v, std::string_view name, const tensor_slice& slice, host_tensor& out) {
  using T = typename View::non_const_value_type;
  constexpr std::size_t rank = rank_of<View>;
  const std::string where = "kokkos::view_weights: parameter '" + std::string(name) + "'";
  const std::vector<std::int64_t> extents = shape_of(v);
  if (slice.global != extents)
    fail(where,
         "the model's global shape is " + shape_text(slice.global) + " but " + view_name(v) +
             " has extents " + shape_text(extents),
         "give the View the parameter's whole, unsharded shape in the model's dimension order; each rank "
         "reads only its own slice");
  if (slice.offset.size() != rank || slice.count.size() != rank)
    fail(where,
         "the slice has offset " + shape_text(slice.offset) + " and count " + shape_text(slice.count) +
             " for a " + std::to_string(rank) + "-dimensional view",
         "pass one offset and one count per dimension");
  for (std::size_t d = 0; d < rank; ++d)
    if (slice.offset[d] < 0 || slice.count[d] < 0 || slice.offset[d] > extents[d] ||
        slice.count[d] > extents[d] - slice.offset[d])
      fail(where,
           "the slice at offset " + shape_text(slice.offset) + " with count " + shape_text(slice.count) +
               " leaves the extents " + shape_text(extents) + " of " + view_name(v),
           "ask for a block inside the parameter's global shape");
  if (out.shape() != slice.count)
    fail(where,
         "the output tensor has shape " + shape_text(out.shape()) + " but the slice count is " +
             shape_text(slice.count),
         "allocate the output with the slice's count as its shape");
  if (!convertible_for_weights(dtype_of<T>(), out.type()))
    fail(where,
         std::string("the model wants ") + std::string(dtype_name(out.type())) + " but " + view_name(v) +
             " holds " + std::string(dtype_name(dtype_of<T>())),
         "hold the parameter in a View of the model's element type (f64 and f32 convert, integers do not)");

  extents_array<View> offset{}, count{};
  for (std::size_t d = 0; d < rank; ++d) {
    offset[d] = static_cast<std::size_t>(slice.offset[d]);
    count[d] = static_cast<std::size_t>(slice.count[d]);
  }
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, v);
  with_tensor_element(out.type(), [&]<class U>(U) {
    const std::span<U> values = out.values<U>();
    for_each_in_block(host, offset, count,
                      [&](std::size_t local, const T& x) { values[local] = static_cast<U>(x); });
  });
}

// One parameter's reader: the View stays captured, type-erased, so views of different types serve
// side by side.
using slice_reader = std::function<void(std::string_view name, const tensor_slice&, host_tensor&)>;

template <readable_view View>
slice_reader reader_of(View v) {
  return [v](std::string_view name, const tensor_slice& slice, host_tensor& out) {
    read_view_slice(v, name, slice, out);
  };
}

// Up to `limit` names, those sharing the longest prefix with `wanted` first (a misspelt layer
// index or suffix then shows its neighbours), quoted and joined: "'a', 'b' and 3 more".
inline std::string nearest_names(const std::map<std::string, slice_reader, std::less<>>& readers,
                                 std::string_view wanted, std::size_t limit = 5) {
  std::vector<std::pair<std::size_t, std::string_view>> ranked;
  for (const auto& [name, reader] : readers) {
    const auto mismatch = std::mismatch(name.begin(), name.end(), wanted.begin(), wanted.end());
    ranked.emplace_back(static_cast<std::size_t>(mismatch.first - name.begin()), name);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string text;
  const std::size_t shown = std::min(limit, ranked.size());
  for (std::size_t i = 0; i < shown; ++i) text += (i ? ", '" : "'") + std::string(ranked[i].second) + "'";
  if (ranked.size() > shown) text += " and " + std::to_string(ranked.size() - shown) + " more";
  return text;
}

// The weight_source over a set of readers. Ranks that run as threads call one source
// concurrently; Kokkos does not promise that concurrent deep copies from several host threads
// are safe on every backend, so reads are serialized (weights are loaded once, at bind).
inline weight_source serve(std::map<std::string, slice_reader, std::less<>> readers) {
  struct state {
    std::map<std::string, slice_reader, std::less<>> readers;
    std::mutex kokkos_calls;
  };
  auto shared = std::make_shared<state>();
  shared->readers = std::move(readers);
  return [shared](std::string_view name, const tensor_slice& slice, host_tensor& out) {
    const auto it = shared->readers.find(name);
    if (it == shared->readers.end())
      fail("kokkos::view_weights",
           "no View is named '" + std::string(name) + "'" +
               (shared->readers.empty() ? std::string("; it holds no Views")
                                        : "; it holds " + nearest_names(shared->readers, name)),
           "add a View under the parameter's name, as the model names it (repeated layers as \"h.0.<name>\", "
           "\"h.1.<name>\", ...)");
    const std::lock_guard lock(shared->kokkos_calls);
    it->second(name, slice, out);
  };
}

}  // namespace detail

// A row-major copy of `v`: dtype of its element type, shape = its extents. Element (i, j, ...) of
// the view is row-major element (i, j, ...) of the tensor, whatever the view's layout. Views
// outside host memory are copied to the host first.
template <class View>
  requires readable_view<View>
host_tensor to_host_tensor(const View& v) {
  using T = typename View::non_const_value_type;
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, v);
  host_tensor t(dtype_of<T>(), detail::shape_of(v));
  const std::span<T> values = t.values<T>();
  if (detail::is_row_major_contiguous(host)) {
    if (!values.empty()) std::memcpy(values.data(), host.data(), values.size_bytes());
    return t;
  }
  detail::for_each_in_block(host, detail::extents_array<View>{}, detail::extents_of(v),
                            [&](std::size_t local, const T& x) { values[local] = x; });
  return t;
}

// Copies the row-major `t` into `v`: row-major element (i, j, ...) of t becomes element
// (i, j, ...) of the view, whatever its layout. t's dtype must be the view's element type and its
// shape the view's extents; otherwise throws, naming the view's label and both shapes. Views
// outside host memory are written through a host mirror and one deep_copy.
template <class View>
  requires writable_view<View>
void copy_to_view(const host_tensor& t, const View& v) {
  using T = typename View::non_const_value_type;
  const std::vector<std::int64_t> extents = detail::shape_of(v);
  if (t.type() != dtype_of<T>() || t.shape() != extents)
    fail("kokkos::copy_to_view: " + detail::view_name(v),
         "the tensor is " + detail::typed_shape_text(t.type(), t.shape()) + " but the view is " +
             detail::typed_shape_text(dtype_of<T>(), extents),
         "copy a tensor of the view's element type and extents, or Kokkos::realloc the view to the "
         "tensor's shape first");
  // Kernels still writing v must finish before the host writes it (create_mirror_view_and_copy
  // fences for the same reason).
  Kokkos::fence();
  const auto host = Kokkos::create_mirror_view(Kokkos::HostSpace{}, v);
  const std::span<const T> values = t.values<T>();
  if (detail::is_row_major_contiguous(host)) {
    if (!values.empty()) std::memcpy(host.data(), values.data(), values.size_bytes());
  } else {
    detail::for_each_in_block(host, detail::extents_array<View>{}, detail::extents_of(v),
                              [&](std::size_t local, T& x) { x = values[local]; });
  }
  if (host.data() != v.data()) Kokkos::deep_copy(v, host);
}

// A weight_source that serves each parameter from the View held under its name. The View's
// extents must be the parameter's global (unsharded) shape; each call copies the block
// [slice.offset, slice.offset + slice.count) into `out`. f64 and f32 convert either way (as the
// other sources do); integer parameters need a View of their own type. Views are shallow handles:
// the source reads their contents when it is called (at bind), not when it is made, and keeps them
// alive, so destroy it before Kokkos::finalize.
//
//   std::map<std::string, Kokkos::View<double**>> params{{"mlp.c_fc.weight", w_in},
//                                                        {"mlp.c_proj.weight", w_out}};
//   auto rank = shardgraph::bind(program, sizes, comm, backend, mesh, kokkos::view_weights(params));
template <class View>
  requires readable_view<View>
weight_source view_weights(const std::map<std::string, View>& views) {
  std::map<std::string, detail::slice_reader, std::less<>> readers;
  for (const auto& [name, view] : views) readers.emplace(name, detail::reader_of(view));
  return detail::serve(std::move(readers));
}

// The same, with each View served under its label, so views of different ranks and element types
// mix:
//   Kokkos::View<double**> w("mlp.c_fc.weight", 768, 3072);
//   Kokkos::View<double*> b("mlp.c_fc.bias", 3072);
//   auto weights = shardgraph::kokkos::view_weights(w, b);
// Throws if a label is empty or appears twice.
template <class... Views>
  requires(sizeof...(Views) > 0 && (readable_view<Views> && ...))
weight_source view_weights(const Views&... views) {
  std::map<std::string, detail::slice_reader, std::less<>> readers;
  const auto add = [&](const auto& view) {
    if (view.label().empty())
      fail("kokkos::view_weights", "a View has no label, so it serves no parameter",
           "construct the View with the parameter's name as its label, or pass a std::map from names to "
           "Views");
    if (!readers.emplace(view.label(), detail::reader_of(view)).second)
      fail("kokkos::view_weights", "two Views are labelled '" + view.label() + "'",
           "give each View the name of the one parameter it holds");
  };
  (add(views), ...);
  return detail::serve(std::move(readers));
}

}  // namespace shardgraph::kokkos
