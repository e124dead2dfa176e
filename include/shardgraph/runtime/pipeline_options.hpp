#pragma once
// pipeline_options: how bind() splits a training program's layers over the pipeline axis and which
// schedule runs the micro-batches (pipeline/partition.hpp, pipeline/schedule.hpp).
//
//   auto rank = shardgraph::bind(program, config.sizes(micro_batch_rows, seq), comm, cpu::backend{},
//                                mesh_shape::parse("dp=2,pp=4"), weights,
//                                {.schedule = pipeline::schedule_kind::one_f_one_b, .micro_batches = 8});
//   trainer.step(eight_micro_batches);
//
// Sizes given to bind are one micro-batch's; trainer::step then takes exactly `micro_batches` of them.
#include <cstdint>
#include <vector>

#include "shardgraph/pipeline/schedule.hpp"

namespace shardgraph {

struct pipeline_options {
  pipeline::schedule_kind schedule = pipeline::schedule_kind::one_f_one_b;
  int micro_batches = 1;   // per optimizer step
  int virtual_stages = 1;  // model chunks per rank (interleaved 1F1B: 2 or more)
  std::vector<std::int64_t>
      stage_layers{};  // layers per virtual stage; empty: balanced (embedding and head counted)
};

}  // namespace shardgraph
