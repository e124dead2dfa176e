#pragma once
// The Communicator concept: what the executor needs from a communication backend.
//
// Contract (every backend: threads, mpi, nccl):
//  - rank() in [0, size()); collectives are called by every rank of the group in the same order.
//  - all_reduce(span<T> data): in place, elementwise sum over ranks; every rank gets identical bits
//    (the sum is taken in rank order 0, 1, ..., size-1).
//  - all_gather(span<const T> in, span<T> out): out.size() == size()*in.size(); out holds rank r's
//    `in` at offset r*in.size().
//  - reduce_scatter(span<const T> in, span<T> out): in.size() == size()*out.size(); rank r gets the
//    sum over ranks of chunk r of `in`.
//  - all_to_all(span<const T> in, span<T> out): equal sizes, divisible by size(); chunk j of rank i's
//    `in` lands in chunk i of rank j's `out`.
//  - broadcast(span<T> data, int root); send(span<const T>, int peer, int tag); recv(span<T>, int peer, int tag);
//  - barrier(); split(color, key): a new communicator of the ranks that gave the same color, ordered by key.
// A failure on one rank makes every other rank's pending or next call throw shardgraph::error naming
// the first failure, instead of hanging.
//
// The members take spans; a communicator writes only these. Any other contiguous buffer (std::vector,
// std::array, a span of non-const elements as an input) goes through the function objects of
// collectives.hpp, written once for every communicator: comm::all_reduce(c, data),
// comm::all_gather(c, in, out), comm::reduce_scatter, comm::all_to_all, comm::broadcast(c, data, root),
// comm::send(c, data, peer, tag), comm::recv(c, data, peer, tag).
#include <concepts>
#include <span>

namespace shardgraph::comm {

template <class C>
concept Communicator = requires(C& c, const C& cc, std::span<double> d, std::span<const double> cd,
                                std::span<float> f, std::span<const float> cf, int i) {
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
  c.all_reduce(d);
  c.all_reduce(f);
  c.all_gather(cd, d);
  c.reduce_scatter(cd, d);
  c.all_to_all(cd, d);
  c.broadcast(d, i);
  c.send(cd, i, i);
  c.recv(d, i, i);
  c.barrier();
  { c.split(i, i) } -> std::same_as<C>;
};

}  // namespace shardgraph::comm
