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
//
// Inference (forward() of a pipeline) needs no micro_batches, and a program without backward keeps
// one activation slot whatever it says: given k times the bound batch's rows, forward() runs them
// as k micro-batches, one after another on each stage, through a forward-only pipeline
// (runtime/micro_batch_rows.hpp).
// pipeline_micro_batches(rows, stages) is a k for a step of `rows` rows: bind for rows / k.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/pipeline/schedule.hpp"

namespace shardgraph {

struct pipeline_options {
  pipeline::schedule_kind schedule = pipeline::schedule_kind::one_f_one_b;
  int micro_batches = 1;   // per optimizer step
  int virtual_stages = 1;  // model chunks per rank (interleaved 1F1B: 2 or more)
  std::vector<std::int64_t>
      stage_layers{};  // layers per virtual stage; empty: balanced (embedding and head counted)
};

// The micro-batches a forward of `rows` rows runs as on `stages` pipeline stages: the fewest that
// divide the rows and keep every stage busy (at least `stages`), or one a row when no fewer divide
// them; 1 on one stage. 6 rows on 4 stages: 6 micro-batches of 1 row; 8 rows: 4 of 2.
inline std::int64_t pipeline_micro_batches(std::int64_t rows, int stages) {
  if (rows < 1 || stages < 1)
    fail("pipeline_micro_batches", std::to_string(rows) + " rows on " + std::to_string(stages) + " stages",
         "give at least one row and one stage");
  for (std::int64_t k = std::min<std::int64_t>(stages, rows); k < rows; ++k)
    if (rows % k == 0) return k;
  return rows;
}

}  // namespace shardgraph
