#pragma once
// step_recorder: runs a program's ops through a backend that can record its queued work and launch
// it again (cuda::backend: one CUDA graph), so that a step of hundreds of kernels costs the host one
// launch. Between runs only the inputs' bytes change (uploaded into the same buffers), so the
// second run is recorded and every later one replays it:
//
//   run 1      op by op: the backend allocates its scratch and plans its products
//   run 2      recorded, then replayed (nothing runs while recording)
//   run 3 ...  replayed, unless the recording is stale: what it baked in changed (the loss scale, the
//              number of targets a mean loss divides by), or the backend's scratch memory moved;
//              then that run goes op by op and the next records
//
// A call that cannot be recorded (a synchronization, an allocation) makes the recorder give up
// for good: it says so once on stderr, runs that step op by op, and never records again.
#include <concepts>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace shardgraph {

// A backend that records its queued work and replays it (cuda::backend).
template <class B>
concept RecordingBackend = requires(B& b, const typename B::recording& r) {
  { b.records() } -> std::convertible_to<bool>;
  b.begin_recording();
  { b.end_recording() } -> std::same_as<std::optional<typename B::recording>>;
  { b.recording_failure() } -> std::convertible_to<std::string>;
  { b.replay(r) } -> std::convertible_to<bool>;
};

// A backend that does not record: the ops run as they are queued.
template <class Backend>
class step_recorder {
 public:
  template <class Ops>
  void run(Backend&, bool, const std::vector<double>&, Ops&& ops) {
    ops();
  }
  int replays() const { return 0; }
  int recordings() const { return 0; }
};

template <RecordingBackend Backend>
class step_recorder<Backend> {
 public:
  // Runs `ops` (every op of one run, queued on the backend) or replays their recording. `allowed`:
  // the run has no host-side work between its ops (no communication, no finite checks, ...).
  // `baked` is what the ops take from the host by value (the loss scale, the loss's divisors):
  // other values record anew.
  template <class Ops>
  void run(Backend& backend, bool allowed, const std::vector<double>& baked, Ops&& ops) {
    if (!allowed || given_up_ || !backend.records()) return ops();
    if (recorded_ && baked_ == baked && backend.replay(*recorded_)) {
      ++replays_;
      return;
    }
    const bool stale = recorded_.has_value();
    recorded_.reset();
    if (!warmed_ || stale) {  // op by op: sizes the scratch the recording will use
      warmed_ = true;
      return ops();
    }
    backend.begin_recording();
    try {
      ops();
    } catch (...) {
      // A call the backend could not record ends the recording unusable: run op by op instead. A
      // usable one means the run itself failed, as it would have without recording.
      if (backend.end_recording()) throw;
      give_up(backend);
      return ops();
    }
    recorded_ = backend.end_recording();
    if (!recorded_) {  // not recordable after all: nothing of this run has run yet
      give_up(backend);
      return ops();
    }
    ++recordings_;
    baked_ = baked;
    if (!backend.replay(*recorded_)) {  // (cannot happen: nothing allocates between these calls)
      recorded_.reset();
      return ops();
    }
    ++replays_;
  }

  int replays() const { return replays_; }        // runs that launched the recording
  int recordings() const { return recordings_; }  // recordings made (more than one: some went stale)

 private:
  void give_up(Backend& backend) {
    given_up_ = true;
    std::fprintf(
        stderr,
        "shardgraph: step recording: a call could not be recorded as a CUDA graph (%s); every step runs "
        "op by op\n",
        std::string(backend.recording_failure()).c_str());
  }

  std::optional<typename Backend::recording> recorded_{};
  std::vector<double> baked_;
  bool warmed_ = false, given_up_ = false;
  int replays_ = 0, recordings_ = 0;
};

}  // namespace shardgraph
