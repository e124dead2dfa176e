#pragma once
// accumulator_t<T>: the type in which the cpu kernels accumulate sums over a row (means, variances,
// softmax denominators, log-sum-exp). The cpu backend is the numerical reference, so every scalar
// type accumulates in double; elementwise arithmetic stays in T.
namespace shardgraph::cpu {

template <class T>
using accumulator_t = double;

}  // namespace shardgraph::cpu
