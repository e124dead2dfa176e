#pragma once
// The cpu kernels: plain functions over row-major buffers, templated on the scalar type (float,
// double). They know nothing of graphs or sharding: every size is the LOCAL size on this rank.
// They are the numerical reference of the project.
#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/along_dimension.hpp"
#include "shardgraph/cpu/activations.hpp"
#include "shardgraph/cpu/attention.hpp"
#include "shardgraph/cpu/cross_entropy.hpp"
#include "shardgraph/cpu/dropout.hpp"
#include "shardgraph/cpu/embedding.hpp"
#include "shardgraph/cpu/gemm.hpp"
#include "shardgraph/cpu/layout.hpp"
#include "shardgraph/cpu/norms.hpp"
#include "shardgraph/cpu/permute.hpp"
#include "shardgraph/cpu/rope.hpp"
#include "shardgraph/cpu/softmax.hpp"
#include "shardgraph/cpu/unfold.hpp"
#include "shardgraph/cpu/vocab_parallel_loss.hpp"
