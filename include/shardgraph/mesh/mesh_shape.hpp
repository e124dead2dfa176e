#pragma once
// Sizes of the mesh axes at run time, e.g. parsed from "dp=2,tp=2", and rank coordinates.
// Rank r's coordinates are row-major over the axes (last axis fastest).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/mesh/mesh.hpp"

namespace shardgraph {

class mesh_shape {
 public:
  mesh_shape() = default;
  mesh_shape(std::initializer_list<std::pair<std::string_view, int>> axes) {
    for (auto [name, size] : axes) add(name, size);
  }

  // "dp=2,tp=2" (spaces not allowed); every size >= 1.
  static mesh_shape parse(std::string_view text) {
    mesh_shape m;
    while (!text.empty()) {
      std::size_t comma = text.find(',');
      std::string_view item = text.substr(0, comma);
      std::size_t eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0)
        fail("mesh '" + std::string(text) + "'", "expected axis=size items separated by commas", "write e.g. --mesh dp=2,tp=2");
      int size = 0;
      for (char c : item.substr(eq + 1)) {
        if (c < '0' || c > '9' || size > 1'000'000)
          fail("mesh '" + std::string(item) + "'", "the size is not a positive integer", "write e.g. --mesh dp=2,tp=2");
        size = size * 10 + (c - '0');
      }
      m.add(item.substr(0, eq), size);
      text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    }
    return m;
  }

  void add(std::string_view name, int size) {
    if (size < 1) fail("mesh axis '" + std::string(name) + "'", "size " + std::to_string(size) + " is not positive", "give every axis a size of at least 1");
    for (auto& a : axes_)
      if (a.first == name) fail("mesh axis '" + std::string(name) + "'", "given twice", "name each axis once");
    axes_.emplace_back(std::string(name), size);
  }

  // Size of `name`; axes of the program's mesh that are not given have size 1.
  int size(std::string_view name) const {
    for (auto& a : axes_)
      if (a.first == name) return a.second;
    return 1;
  }
  const std::vector<std::pair<std::string, int>>& axes() const { return axes_; }

  // The world size of `axes`, after checking that every given axis exists in them.
  int world_size(const mesh_axes& axes) const {
    for (auto& a : axes_)
      if (axes.index_of(a.first) < 0) {
        std::string names;
        for (int i = 0; i < axes.size(); ++i) names += (i ? ", " : "") + std::string(axes.name(i));
        fail("mesh axis '" + a.first + "'", "the program's mesh has no such axis (it has " + names + ")",
             "use the program's axis names");
      }
    int total = 1;
    for (int i = 0; i < axes.size(); ++i) total *= size(axes.name(i));
    return total;
  }

  // Coordinates of `rank` on every axis of `axes`, row-major (last axis fastest).
  std::vector<int> coordinates(const mesh_axes& axes, int rank) const {
    std::vector<int> c(static_cast<std::size_t>(axes.size()));
    for (int i = axes.size() - 1; i >= 0; --i) {
      int s = size(axes.name(i));
      c[static_cast<std::size_t>(i)] = rank % s;
      rank /= s;
    }
    return c;
  }

  std::string to_string() const {
    std::string s;
    for (auto& a : axes_) s += (s.empty() ? "" : ",") + a.first + "=" + std::to_string(a.second);
    return s;
  }

 private:
  std::vector<std::pair<std::string, int>> axes_;
};

}  // namespace shardgraph
