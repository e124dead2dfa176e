#pragma once
// The one include for the shardgraph core: mesh, DSL, passes, programs, runtime, io and models.
// Backends come with their own headers: <shardgraph/cpu.hpp>, <shardgraph/threads.hpp>, ...
#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/dsl/ops.hpp"
#include "shardgraph/dsl/repeat.hpp"
#include "shardgraph/mesh/mesh.hpp"
#include "shardgraph/mesh/mesh_shape.hpp"
#include "shardgraph/mesh/shard_spec.hpp"
#include "shardgraph/models/gpt2.hpp"
#include "shardgraph/models/llama.hpp"
#include "shardgraph/passes/compile.hpp"
#include "shardgraph/program/program.hpp"
