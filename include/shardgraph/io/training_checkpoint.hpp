#pragma once
// Training checkpoints: everything a run needs to continue as if it had never stopped.
//
//   save_training_checkpoint("ckpt/step-400", trainer, comm, {.position = 400});
//   ... kill -9 ...
//   auto rank = sg::bind(program, sizes, comm, backend, mesh, sg::io::sharded_weights("ckpt/step-400"));
//   sg::trainer t(rank, options);
//   const auto resumed = sg::io::resume_training("ckpt/step-400", t);  // AdamW, counters, scaler
//   for (std::int64_t s = resumed.position; ...)                    // the next batch
//
// A checkpoint is a save_weights directory: the weights, AdamW's m and v (and the f32 master weights
// of a mixed-precision model) as "<name>#m", "<name>#v", "<name>#master" slices, so that all of them
// load under any other layout or ZeRO stage; its manifest's "state" holds the step counters, the f16
// loss scaler and the data position. The data order is a pure function of (seed, epoch, position)
// (data/distributed_sampler.hpp), so the position and the sampler's seed are the whole data state; the
// models draw no random numbers in training (no dropout), so there is no other generator to save.
#include <charconv>
#include <cstdint>
#include <string>
#include <system_error>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/io/sharded_weights.hpp"
#include "shardgraph/optim/loss_scaler.hpp"

namespace shardgraph::io {

// Where the data loader stands, kept with a checkpoint; the caller's own meaning (a batch or
// sample index, an epoch) is carried as it is.
struct data_state {
  std::int64_t position = 0;  // e.g. batches consumed: the resumed run starts at this one
  std::int64_t epoch = 0;
  std::int64_t sampler_seed = 0;
};

namespace detail {

inline std::string exact_number(double x) {  // the shortest text that reads back as the same double
  char text[32];
  const auto r = std::to_chars(text, text + sizeof text, x);
  return std::string(text, r.ptr);
}

}  // namespace detail

// Every rank calls it: this rank's weights and AdamW state, and (rank 0) the counters, into `directory`.
template <class Trainer, class Comm>
void save_training_checkpoint(const std::string& directory, Trainer& trainer, Comm& comm,
                              const data_state& data) {
  auto parts = trainer.rank().parameters();
  parts.merge(trainer.optimizer_state());
  const dynamic_loss_scaler& s = trainer.loss_scaler();
  const std::string state = "{\"steps\": " + std::to_string(trainer.steps_done()) +
                            ", \"updates\": " + std::to_string(trainer.updates_done()) +
                            ", \"data_position\": " + std::to_string(data.position) +
                            ", \"epoch\": " + std::to_string(data.epoch) +
                            ", \"sampler_seed\": " + std::to_string(data.sampler_seed) +
                            ", \"loss_scaler\": {\"scale\": " + detail::exact_number(s.scale) +
                            ", \"growth_factor\": " + detail::exact_number(s.growth_factor) +
                            ", \"backoff_factor\": " + detail::exact_number(s.backoff_factor) +
                            ", \"growth_interval\": " + std::to_string(s.growth_interval) +
                            ", \"growth_tracker\": " + std::to_string(s.growth_tracker) + "}}";
  save_weights(directory, parts, comm, state);
}

// Restores AdamW's state, the step counters and the loss scaler of a training checkpoint into a
// trainer whose rank was bound with sharded_weights(directory); returns where the data loader stood.
// Every rank calls it, before the first step.
template <class Trainer>
data_state resume_training(const std::string& directory, Trainer& trainer) {
  const json::value state = checkpoint_state(directory);
  if (state.type() != json::kind::object || !state.contains("steps"))
    fail(directory, "is a weights checkpoint without training state (no step counters in its manifest)",
         "resume from a checkpoint written by save_training_checkpoint, or load it for inference only");
  const json::value& scaler = state.at("loss_scaler");
  const dynamic_loss_scaler restored{.scale = scaler.at("scale").as_double(),
                                     .growth_factor = scaler.at("growth_factor").as_double(),
                                     .backoff_factor = scaler.at("backoff_factor").as_double(),
                                     .growth_interval = scaler.at("growth_interval").as_int(),
                                     .growth_tracker = scaler.at("growth_tracker").as_int()};
  trainer.load_optimizer_state(sharded_weights(directory));
  trainer.restore_counters(state.at("steps").as_int(), state.at("updates").as_int(), restored);
  return {.position = state.at("data_position").as_int(),
          .epoch = state.at("epoch").as_int(),
          .sampler_seed = state.at("sampler_seed").as_int()};
}

}  // namespace shardgraph::io
