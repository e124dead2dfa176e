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
#include <filesystem>
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

[[noreturn]] inline void bad_training_state(const std::string& source, const std::string& why) {
  fail(source, "its training state " + why,
       "the checkpoint is corrupt or was not written by save_training_checkpoint; resume from another one");
}
inline const json::value& state_field(const json::value& object, std::string_view key, json::kind kind,
                                      const std::string& source) {
  const json::value* v = object.type() == json::kind::object ? object.find(key) : nullptr;
  const bool number = kind == json::kind::number && v != nullptr && v->type() == json::kind::integer;
  if (v == nullptr || (v->type() != kind && !number))
    bad_training_state(source,
                       "lacks \"" + std::string(key) + "\" as " +
                           std::string(kind == json::kind::number ? "a number" : json::kind_name(kind)));
  return *v;
}
inline std::int64_t state_count(const json::value& object, std::string_view key, const std::string& source) {
  const std::int64_t n = state_field(object, key, json::kind::integer, source).as_int();
  if (n < 0) bad_training_state(source, "has a negative \"" + std::string(key) + "\"");
  return n;
}

}  // namespace detail

// What a training checkpoint's manifest keeps besides the weights and AdamW's state.
struct training_state {
  std::int64_t steps = 0, updates = 0;
  data_state data;
  dynamic_loss_scaler loss_scaler;
};

// Reads the "state" object of a training checkpoint's manifest (`source` names it in errors):
// every field must be there with its type and a possible value, else shardgraph::error.
inline training_state parse_training_state(const json::value& state, const std::string& source) {
  if (state.type() != json::kind::object || !state.contains("steps"))
    fail(source, "is a weights checkpoint without training state (no step counters in its manifest)",
         "resume from a checkpoint written by save_training_checkpoint, or load it for inference only");
  using detail::state_count;
  training_state t;
  t.steps = state_count(state, "steps", source);
  t.updates = state_count(state, "updates", source);
  if (t.updates > t.steps) detail::bad_training_state(source, "has more updates than steps");
  t.data = {.position = state_count(state, "data_position", source),
            .epoch = state_count(state, "epoch", source),
            .sampler_seed = detail::state_field(state, "sampler_seed", json::kind::integer, source).as_int()};
  const json::value& scaler = detail::state_field(state, "loss_scaler", json::kind::object, source);
  const auto number = [&](std::string_view key) {
    return detail::state_field(scaler, key, json::kind::number, source).as_double();
  };
  t.loss_scaler = {.scale = number("scale"),
                   .growth_factor = number("growth_factor"),
                   .backoff_factor = number("backoff_factor"),
                   .growth_interval = state_count(scaler, "growth_interval", source),
                   .growth_tracker = state_count(scaler, "growth_tracker", source)};
  try {
    t.loss_scaler.check();
  } catch (const error& e) {
    detail::bad_training_state(source, std::string("holds an invalid loss scaler (") + e.what() + ")");
  }
  return t;
}

// Every rank calls it: this rank's weights and AdamW state, and (rank 0) the counters, into `directory`
// (replaced as a whole: save_weights; `hooks` as there).
template <class Trainer, class Comm>
void save_training_checkpoint(const std::string& directory, Trainer& trainer, Comm& comm,
                              const data_state& data, const save_hooks& hooks = {}) {
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
  save_weights(directory, parts, comm, state, hooks);
}

// Restores AdamW's state, the step counters and the loss scaler of a training checkpoint into a
// trainer whose rank was bound with sharded_weights(directory); returns where the data loader stood.
// Every rank calls it, before the first step.
template <class Trainer>
data_state resume_training(const std::string& directory, Trainer& trainer) {
  const std::string found = complete_checkpoint_directory(directory);
  const training_state t =
      parse_training_state(read_checkpoint_manifest(found).state,
                           (std::filesystem::path(found) / sharded_weights_manifest).string());
  trainer.load_optimizer_state(sharded_weights(directory));
  trainer.restore_counters(t.steps, t.updates, t.loss_scaler);
  return t.data;
}

}  // namespace shardgraph::io
