// Checkpoints are never lost (issue 31): a save replaces the checkpoint directory only once the new
// one is complete, whatever stage a crash (a SIGKILL of the saving process) or an error interrupts;
// leftovers of an interrupted save are recovered or removed by the next; every saved byte is checked.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <shardgraph/io/hf_checkpoint_writer.hpp>
#include <shardgraph/io/sharded_weights.hpp>
#include <shardgraph/io/training_checkpoint.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"

namespace sg = shardgraph;
namespace fs = std::filesystem;
using shardgraph::testing::contains;
using shardgraph::testing::error_of;

namespace {

struct part {
  sg::tensor_slice slice;
  sg::host_tensor values;
};

// Rank r of `ranks` holds rows [4r, 4r + 4) of "w" (4 * ranks, 3) and all of "b" (3); every element
// of version v is 1000 v plus its index, so a load tells which version it read.
std::map<std::string, part> parts_of(int rank, int ranks, int version) {
  std::map<std::string, part> parts;
  part w{{{4 * ranks, 3}, {4 * rank, 0}, {4, 3}}, sg::host_tensor(sg::dtype::f32, {4, 3})};
  for (std::int64_t i = 0; i < 12; ++i)
    w.values.set(i, 1000.0 * version + 12 * rank + static_cast<double>(i));
  part b{{{3}, {0}, {3}}, sg::host_tensor(sg::dtype::f32, {3})};
  for (std::int64_t i = 0; i < 3; ++i) b.values.set(i, 1000.0 * version + static_cast<double>(i));
  parts.emplace("w", std::move(w));
  parts.emplace("b", std::move(b));
  return parts;
}

void save_version(const fs::path& dir, int ranks, int version, const sg::io::save_hooks& hooks = {}) {
  sg::threads::world(ranks, std::chrono::seconds(20)).run([&](sg::threads::communicator& comm) {
    sg::io::save_weights(dir.string(), parts_of(comm.rank(), ranks, version), comm,
                         "{\"version\": " + std::to_string(version) + "}", hooks);
  });
}

// The version that loading `dir` reads, after checking every element of "w" and "b".
int loaded_version(const fs::path& dir, int ranks) {
  const sg::weight_source source = sg::io::sharded_weights(dir.string());
  sg::host_tensor w(sg::dtype::f32, {4 * ranks, 3}), b(sg::dtype::f32, {3});
  source("w", {{4 * ranks, 3}, {0, 0}, {4 * ranks, 3}}, w);
  source("b", {{3}, {0}, {3}}, b);
  const int version = static_cast<int>(b.at(0) / 1000);
  for (std::int64_t i = 0; i < w.numel(); ++i) REQUIRE(w.at(i) == 1000.0 * version + static_cast<double>(i));
  REQUIRE(sg::io::checkpoint_state(dir.string()).at("version").as_int() == version);
  return version;
}

fs::path scratch(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("shardgraph-durability-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir.parent_path() / name);
  fs::create_directories(dir.parent_path());
  return dir;
}

std::vector<std::string> siblings(const fs::path& dir) {  // every name beside dir that starts with its own
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir.parent_path()))
    if (const std::string n = e.path().filename().string();
        n != dir.filename() && n.starts_with(dir.filename().string()))
      found.push_back(n);
  return found;
}

void flip_bit(const fs::path& file, std::uintmax_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// Runs a save of `version` in a child process that kills itself (SIGKILL, no clean-up of any kind)
// right after `stage`; returns whether it died that way.
bool save_killed_after(const fs::path& dir, int ranks, int version, sg::io::save_stage stage) {
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      sg::io::save_hooks hooks;
      hooks.after_stage = [stage](sg::io::save_stage s) {
        if (s == stage) ::raise(SIGKILL);
      };
      save_version(dir, ranks, version, hooks);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

}  // namespace

TEST_CASE("a save killed at any stage leaves a loadable checkpoint; the next save recovers",
          "[io][checkpoint][threads]") {
  using stage = sg::io::save_stage;
  // the version a load reads after a kill at each stage: the previous one until the new one is
  // complete and the previous has been moved aside, then the new one
  const std::vector<std::pair<stage, int>> cases{
      {stage::staging_created, 1},      {stage::files_written, 1}, {stage::staging_complete, 1},
      {stage::previous_moved_aside, 2}, {stage::new_in_place, 2},  {stage::previous_removed, 2}};
  for (const auto& [killed_at, expected] : cases) {
    CAPTURE(static_cast<int>(killed_at));
    const fs::path dir = scratch("killed");
    save_version(dir, 3, 1);
    REQUIRE(save_killed_after(dir, 3, 2, killed_at));
    CHECK(loaded_version(dir, 3) == expected);
    save_version(dir, 3, 3);  // recovers, removes what the killed save left, and saves
    CHECK(siblings(dir).empty());
    CHECK(loaded_version(dir, 3) == 3);
  }
}

TEST_CASE("a first save killed before it completes leaves nothing that loads as a checkpoint",
          "[io][checkpoint][threads]") {
  const fs::path dir = scratch("first");
  REQUIRE(save_killed_after(dir, 2, 1, sg::io::save_stage::files_written));
  CHECK(contains(error_of([&] { sg::io::sharded_weights(dir.string()); }), "the checkpoint is incomplete"));
  REQUIRE(save_killed_after(dir, 2, 1, sg::io::save_stage::new_in_place));
  CHECK(loaded_version(dir, 2) == 1);
}

TEST_CASE("a save that fails on one rank throws on every rank and keeps the previous checkpoint",
          "[io][checkpoint][threads]") {
  const fs::path dir = scratch("failing-rank");
  save_version(dir, 4, 1);
  std::atomic<int> thrown{0};
  sg::threads::world(4, std::chrono::seconds(20)).run([&](sg::threads::communicator& comm) {
    sg::io::save_hooks hooks;
    hooks.after_stage = [&](sg::io::save_stage s) {
      if (s == sg::io::save_stage::files_written && comm.rank() == 2) throw sg::error("disk full");
    };
    const std::string e = error_of([&] {
      sg::io::save_weights(dir.string(), parts_of(comm.rank(), 4, 2), comm, "{\"version\": 2}", hooks);
    });
    CHECK(
        (comm.rank() == 2 ? contains(e, "disk full") : contains(e, "rank 2 failed while writing its file")));
    ++thrown;
  });
  CHECK(thrown == 4);
  CHECK(loaded_version(dir, 4) == 1);
  save_version(dir, 2, 3);  // another rank count replaces it whole: no rank file of the old one stays
  CHECK(loaded_version(dir, 2) == 3);
  CHECK(!fs::exists(dir / "rank-00003.safetensors"));
  CHECK(siblings(dir).empty());
}

TEST_CASE("a flipped bit anywhere in a saved rank file is detected, naming the file and the tensor",
          "[io][checkpoint][threads]") {
  const fs::path dir = scratch("flipped");
  const fs::path rank1 = dir / "rank-00001.safetensors";
  const auto load = [&] { return error_of([&] { loaded_version(dir, 2); }); };
  save_version(dir, 2, 1);
  REQUIRE(load() == "(no error)");

  // the data section of rank 1 holds its rows of "w" (it writes no "b": rank 0 holds the same piece)
  flip_bit(rank1, fs::file_size(rank1) - 5);
  const std::string in_data = load();
  CHECK(contains(in_data, "rank-00001.safetensors: tensor 'w'"));
  CHECK(contains(in_data, "do not match the checksum"));

  save_version(dir, 2, 1);
  flip_bit(rank1, 20);  // inside the header's JSON
  const std::string in_header = load();
  CHECK(contains(in_header, "rank-00001.safetensors"));
  CHECK(contains(in_header, "checksum"));

  save_version(dir, 2, 1);
  fs::resize_file(rank1, fs::file_size(rank1) + 8);
  CHECK(contains(load(), "the manifest says"));
}

TEST_CASE("stale temporaries of killed writers are removed by the next save", "[io][checkpoint][threads]") {
  const pid_t gone = ::fork();  // a pid that no longer runs
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const fs::path dir = scratch("stale");
  save_version(dir, 2, 1);
  fs::create_directories(fs::path(dir.string() + ".tmp.12345"));
  std::ofstream(dir.string() + ".tmp.12345/rank-00000.safetensors") << "half";
  fs::create_directories(fs::path(dir.string() + ".old.777"));
  std::ofstream(dir.string() + ".old.777/" + std::string(sg::io::sharded_weights_manifest)) << "{}";
  REQUIRE(siblings(dir).size() == 2);
  save_version(dir, 2, 2);
  CHECK(siblings(dir).empty());
  CHECK(loaded_version(dir, 2) == 2);

  // a single file's temporary, left by a writer that was killed
  const fs::path file = dir.parent_path() / "single.safetensors";
  const std::string stale = file.string() + ".tmp." + std::to_string(gone);
  std::ofstream(stale) << "half";
  const std::vector<float> v{1, 2};
  sg::io::write_safetensors(file.string(), {sg::io::make_tensor_to_write("v", {2}, v)});
  CHECK(!fs::exists(stale));
}

TEST_CASE("a save refuses to replace a directory holding files that are not the checkpoint's",
          "[io][checkpoint][threads]") {
  const fs::path dir = scratch("foreign");
  fs::create_directories(dir);
  std::ofstream(dir / "notes.txt") << "mine";
  const std::string e = error_of([&] { save_version(dir, 1, 1); });
  CHECK(contains(e, "holds 'notes.txt', which is not part of a checkpoint"));
  CHECK(fs::exists(dir / "notes.txt"));
  CHECK(siblings(dir).empty());
}

TEST_CASE("a HF directory write that fails keeps the previous one and leaves no temporary",
          "[io][checkpoint]") {
  const fs::path dir = scratch("hf");
  const std::vector<sg::io::hf_tensor_plan> plan{{"w", sg::io::st_dtype::f32, {2, 2}}};
  const auto fill = [](float x) {
    return [x](const sg::io::hf_tensor_plan&, std::span<std::byte> out) {
      for (std::size_t i = 0; i < out.size() / 4; ++i) std::memcpy(out.data() + 4 * i, &x, 4);
    };
  };
  sg::io::write_hf_checkpoint(dir.string(), "{\"v\": 1}", plan, 0, fill(1.0f));
  sg::io::save_hooks hooks;
  hooks.after_stage = [](sg::io::save_stage s) {
    if (s == sg::io::save_stage::files_written) throw sg::error("interrupted");
  };
  CHECK(contains(error_of([&] {
                   sg::io::write_hf_checkpoint(dir.string(), "{\"v\": 2}", plan, 0, fill(2.0f), {}, hooks);
                 }),
                 "interrupted"));
  CHECK(siblings(dir).empty());
  const sg::io::safetensors_file file((dir / "model.safetensors").string());
  CHECK(file.read_as<float>("w") == std::vector<float>{1, 1, 1, 1});
  CHECK(file.has_checksum("w"));
  sg::io::write_hf_checkpoint(dir.string(), "{\"v\": 3}", plan, 0, fill(3.0f));
  CHECK(sg::io::safetensors_file((dir / "model.safetensors").string()).read_as<float>("w")[0] == 3.0f);
  fs::remove_all(dir.parent_path());
}

TEST_CASE("a training checkpoint's state is checked field by field", "[io][checkpoint]") {
  const std::string good =
      R"({"steps": 4, "updates": 3, "data_position": 8, "epoch": 0, "sampler_seed": 7, "loss_scaler": )"
      R"({"scale": 65536, "growth_factor": 2, "backoff_factor": 0.5, "growth_interval": 2000, "growth_tracker": 3}})";
  const auto parse = [](const std::string& text) {
    return sg::io::parse_training_state(sg::io::json::parse(text, "state"), "m.json");
  };
  CHECK(parse(good).data.position == 8);
  CHECK(parse(good).loss_scaler.growth_tracker == 3);
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return error_of([&] { parse(text); });
  };
  CHECK(
      contains(replaced("\"updates\": 3", "\"updates\": 5"), "m.json: its training state has more updates"));
  CHECK(contains(replaced("\"epoch\": 0", "\"epoch\": -1"), "has a negative \"epoch\""));
  CHECK(contains(replaced("\"scale\": 65536", "\"scale\": \"big\""), "lacks \"scale\""));
  CHECK(contains(replaced("\"growth_tracker\": 3", "\"growth_tracker\": 2000"), "invalid loss scaler"));
  CHECK(contains(replaced(", \"loss_scaler\"", ", \"other\""), "lacks \"loss_scaler\""));
}

TEST_CASE("a read checks only the 1 MiB blocks it touches, so a rank reading its slice reads no more",
          "[io][checkpoint]") {
  const fs::path dir = scratch("blocks");
  fs::create_directories(dir);
  const fs::path path = dir / "big.safetensors";
  std::vector<float> values(3 * 262144 + 5);  // three whole MiB and 20 bytes: four blocks
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  sg::io::write_safetensors(path.string(), {sg::io::make_tensor_to_write("t", {3 * 262144 + 5}, values)});
  const std::uintmax_t data_start = fs::file_size(path) - values.size() * 4;
  flip_bit(path, data_start + 2 * (1 << 20) + 100);  // in the third block
  const sg::io::safetensors_file file(path.string());
  std::vector<float> first(1000), last(5);
  file.read_elements_as<float>("t", 0, first.size(), first.data());  // the first block only: fine
  CHECK(first[999] == 999.0f);
  file.read_elements_as<float>("t", 3 * 262144, last.size(), last.data());  // the fourth block
  CHECK(last[4] == static_cast<float>(3 * 262144 + 4));
  const std::string e = error_of([&] { file.read_as<float>("t"); });
  CHECK(contains(e, "big.safetensors: tensor 't': its bytes [2097152, 3145728) do not match the checksum"));
  fs::remove_all(dir);
}
