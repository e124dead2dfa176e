#pragma once
// A static_vector of any capacity, by reference: what code that appends to a vector needs without
// being a template over the capacity. Valid while the vector lives.
#include <cstddef>

#include "shardgraph/core/constexpr_fail.hpp"
#include "shardgraph/core/static_vector.hpp"

namespace shardgraph {

template <class T>
class vector_ref {
 public:
  template <std::size_t Capacity>
  constexpr vector_ref(static_vector<T, Capacity>& v)  // NOLINT(google-explicit-constructor): a view
      : items_(v.items), count_(&v.count), capacity_(Capacity) {}

  constexpr std::size_t capacity() const { return capacity_; }
  constexpr std::size_t size() const { return *count_; }
  constexpr bool empty() const { return *count_ == 0; }
  constexpr T& operator[](std::size_t i) const { return items_[i]; }
  constexpr T& back() const { return items_[*count_ - 1]; }
  constexpr T* begin() const { return items_; }
  constexpr T* end() const { return items_ + *count_; }
  constexpr void push_back(const T& value) const {
    if (*count_ == capacity_)
      constexpr_fail("shardgraph: static_vector: capacity exceeded. raise the capacity constant named in the error trace");
    items_[(*count_)++] = value;
  }
  constexpr void pop_back() const { --*count_; }

 private:
  T* items_;
  std::size_t* count_;
  std::size_t capacity_;
};

}  // namespace shardgraph
