#pragma once
// The one include for everything of shardgraph that is not a backend: the mesh, the DSL, the passes,
// the program and its printers, the bound plan and its printer, the models, bind and the trainer,
// the optimizer math, data, pipeline schedules, io (HF checkpoints, sharded and training
// checkpoints) and the launcher's placement.
// Backends come with their own headers: <shardgraph/cpu.hpp>, <shardgraph/threads.hpp>,
// <shardgraph/mpi.hpp>, <shardgraph/cuda.hpp>, <shardgraph/nccl.hpp>, <shardgraph/kokkos.hpp>.
//
//   #include <shardgraph/shardgraph.hpp>
//   #include <shardgraph/cpu.hpp>
//   #include <shardgraph/threads.hpp>
#include "shardgraph/comm/collectives.hpp"
#include "shardgraph/comm/communicator.hpp"
#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/core/weight_source.hpp"
#include "shardgraph/data/batch_loader.hpp"
#include "shardgraph/data/distributed_sampler.hpp"
#include "shardgraph/data/micro_batches.hpp"
#include "shardgraph/data/token_accuracy.hpp"
#include "shardgraph/data/token_file.hpp"
#include "shardgraph/dsl/custom.hpp"
#include "shardgraph/dsl/convolution.hpp"
#include "shardgraph/dsl/ops.hpp"
#include "shardgraph/dsl/repeat.hpp"
#include "shardgraph/io/hf_config.hpp"
#include "shardgraph/io/hf_export.hpp"
#include "shardgraph/io/hf_model.hpp"
#include "shardgraph/io/hf_vit.hpp"
#include "shardgraph/io/hf_weights.hpp"
#include "shardgraph/io/safetensors.hpp"
#include "shardgraph/io/safetensors_checkpoint.hpp"
#include "shardgraph/io/sharded_weights.hpp"
#include "shardgraph/io/training_checkpoint.hpp"
#include "shardgraph/launch/device_limits.hpp"
#include "shardgraph/launch/placement.hpp"
#include "shardgraph/mesh/mesh.hpp"
#include "shardgraph/mesh/mesh_shape.hpp"
#include "shardgraph/mesh/shard_spec.hpp"
#include "shardgraph/models/gpt2.hpp"
#include "shardgraph/models/llama.hpp"
#include "shardgraph/models/llava.hpp"
#include "shardgraph/models/vit.hpp"
#include "shardgraph/optim.hpp"
#include "shardgraph/passes/compile.hpp"
#include "shardgraph/pipeline/partition.hpp"
#include "shardgraph/pipeline/print_timeline.hpp"
#include "shardgraph/pipeline/schedule.hpp"
#include "shardgraph/pipeline/timeline.hpp"
#include "shardgraph/plan/print_bound_plan.hpp"
#include "shardgraph/program/print_graphviz.hpp"
#include "shardgraph/program/print_text.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/executor.hpp"
#include "shardgraph/runtime/local_layout.hpp"
#include "shardgraph/runtime/trainer.hpp"
