// Special files are refused, not waited on (issue 31): a config.json, a manifest, a safetensors file
// or a token file that is a FIFO, a device or a directory gives an error naming it at once. A reader
// that opened a FIFO for reading would wait for a writer forever, one that read /dev/zero would
// never reach its end.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <shardgraph/data/token_file.hpp>
#include <shardgraph/io/hf_config.hpp>
#include <shardgraph/io/safetensors.hpp>
#include <shardgraph/io/sharded_weights.hpp>

#include "catch.hpp"

namespace sg = shardgraph;
namespace fs = std::filesystem;
using shardgraph::testing::contains;
using shardgraph::testing::error_of;

namespace {

// error_of(f), or "(hangs)" when f has not returned within a few seconds (its thread is then left
// behind, blocked: the test has failed anyway).
std::string error_within_seconds(std::function<void()> f) {
  struct shared {
    std::mutex m;
    std::condition_variable done;
    std::string error;
    bool finished = false;
  };
  auto s = std::make_shared<shared>();
  std::thread([s, f = std::move(f)] {
    std::string e = error_of(f);
    const std::lock_guard lock(s->m);
    s->error = std::move(e);
    s->finished = true;
    s->done.notify_all();
  }).detach();
  std::unique_lock lock(s->m);
  if (!s->done.wait_for(lock, std::chrono::seconds(5), [&] { return s->finished; })) return "(hangs)";
  return s->error;
}

fs::path scratch() {
  const fs::path dir = fs::temp_directory_path() / ("shardgraph-special-files-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("a FIFO, a device or a directory in place of a file is refused at once", "[io]") {
  const fs::path dir = scratch();
  const fs::path fifo = dir / "config.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string not_regular = "it is not a regular file";
  for (const std::string& path : {fifo.string(), std::string("/dev/zero"), dir.string()}) {
    CAPTURE(path);
    const std::string config = error_within_seconds([&] { sg::io::hf_gpt2_config(path); });
    CHECK(contains(config, path + ": cannot read the file: " + not_regular));
    CHECK(contains(error_within_seconds([&] { sg::io::read_json_file(path); }), not_regular));
    CHECK(contains(error_within_seconds([&] { sg::io::safetensors_file{path}; }), not_regular));
    CHECK(contains(error_within_seconds([&] { sg::data::token_file(path, 50257); }), not_regular));
  }

  // a checkpoint whose rank file is a FIFO
  const fs::path checkpoint = dir / "ckpt";
  fs::create_directories(checkpoint);
  {
    sg::io::atomic_file_writer manifest((checkpoint / sg::io::sharded_weights_manifest).string());
    manifest.write(R"({"format": "shardgraph-weights-1", "ranks": 1})");
    manifest.commit();
  }
  REQUIRE(::mkfifo((checkpoint / "rank-00000.safetensors").c_str(), 0600) == 0);
  CHECK(contains(error_within_seconds([&] { sg::io::sharded_weights_index{checkpoint.string()}; }),
                 "rank-00000.safetensors"));
  fs::remove(checkpoint / sg::io::sharded_weights_manifest);
  REQUIRE(::mkfifo((checkpoint / sg::io::sharded_weights_manifest).c_str(), 0600) == 0);
  CHECK(contains(error_within_seconds([&] { sg::io::checkpoint_state(checkpoint.string()); }),
                 "the checkpoint is incomplete"));
  fs::remove_all(dir);
}
