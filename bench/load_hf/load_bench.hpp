#pragma once
// The load_hf bench, whatever the backend: loads a HF GPT-2 or LLaMA checkpoint directory with
// bind (each rank reads only its slices of the files) and prints one JSON line per load:
//   {"bench": "load_hf", "device": "cuda", "model": DIR, "mesh": "tp=1", "load_s": ..., "file_gb": ...,
//    "read_gb_per_rank": [...], "gb_per_s": ..., "device_gib": ...}
//
//   PROGRAM DIR [--mesh tp=1] [--dtype bf16|f32] [--ids 1,2,3] [--logits FILE] [--repeat N]
//           [--allow-unused-tensors]
//
// main.cu (load_hf: cuda::backend, uploads through pinned staging) and main_cpu.cpp (load_hf_cpu:
// cpu::backend) each give a Device, and call bench_main<Device>:
//
//   struct Device {
//     static constexpr const char* name;     // "cuda", "cpu": the JSON's "device"
//     static constexpr const char* program;  // the program's name, for its messages
//     static backend_type make(int ranks);   // one rank's backend, for a world of `ranks` thread ranks
//     static void synchronize(backend_type&);  // returns once the last weight is in its buffer
//     static std::size_t used_bytes();       // memory in use where the weights go, the whole process
//   };
//
// --mesh tp=N runs N thread ranks in this process: what each rank of an N-device job would read.
// load_s is bind's time, from the first byte read to the last weight in place, for the slowest rank.
// device_gib is Device::used_bytes() after the loads of every rank less before them: all ranks'
// weights and bind's buffers. --logits writes the logits of --ids (one sequence), from the first
// load, as F32 "logits" (1, T, vocab) for bench/load_hf/compare_hf.py.
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace load_bench {

namespace sg = shardgraph;

struct options {
  std::string directory, logits, type = "bf16";
  sg::mesh_shape mesh = sg::mesh_shape::parse("tp=1");
  std::vector<std::int64_t> ids{1, 450, 4996, 17354, 1701, 432, 17204, 975};  // compare_hf.py's too
  int repeat = 1;
  bool allow_unused_tensors = false;  // tensors in the files that no parameter reads: an error unless set
};

inline std::uint64_t directory_bytes(const std::string& directory) {
  std::uint64_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory))
    if (entry.path().extension() == ".safetensors") bytes += entry.file_size();
  return bytes;
}

template <class Device>
int run(const options& o) {
  const sg::dtype type = o.type == "f32" ? sg::dtype::f32 : sg::dtype::bf16;
  const sg::io::hf_model m = sg::io::open_hf_model(
      o.directory,
      {.type = type, .vocab_multiple = o.mesh.size("tp"), .allow_unused_tensors = o.allow_unused_tensors});
  const int ranks = o.mesh.world_size(m.layout.nodes.axes);
  const auto seq = static_cast<std::int64_t>(o.ids.size());
  std::vector<std::int64_t> ids = o.ids;
  for (std::int64_t& id : ids) id %= m.vocab;
  std::vector<std::int64_t> targets(ids.begin() + 1, ids.end());
  targets.push_back(ids.front());
  sg::tensor_map inputs;  // input_ids, targets: (1, seq)
  inputs.emplace("input_ids", sg::host_tensor::from<std::int64_t>({1, seq}, ids));
  inputs.emplace("targets", sg::host_tensor::from<std::int64_t>({1, seq}, targets));

  for (int attempt = 0; attempt < o.repeat; ++attempt) {
    std::vector<double> seconds(static_cast<std::size_t>(ranks));
    std::vector<std::uint64_t> read(static_cast<std::size_t>(ranks));
    std::size_t used_before = 0, used_after = 0;
    sg::host_tensor logits;  // (1, seq, padded_vocab), rank 0's
    std::mutex lock;
    sg::threads::world(ranks).run([&](sg::threads::communicator& comm) {
      if (comm.rank() == 0) used_before = Device::used_bytes();
      comm.barrier();
      auto bytes = std::make_shared<std::atomic<std::uint64_t>>(0);
      const auto start = std::chrono::steady_clock::now();
      auto device = Device::make(ranks);
      auto rank = sg::bind(m.layout, m.sizes(1, seq), comm, device, o.mesh, m.weights(bytes));
      Device::synchronize(device);  // the last weight is in place
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      comm.barrier();
      if (comm.rank() == 0) used_after = Device::used_bytes();
      sg::tensor_map out = rank.forward(inputs);
      const std::lock_guard<std::mutex> guard(lock);
      seconds[static_cast<std::size_t>(comm.rank())] = s;
      read[static_cast<std::size_t>(comm.rank())] = bytes->load();
      if (comm.rank() == 0) logits = std::move(out.at("logits"));
    });
    std::string per_rank;
    for (const std::uint64_t b : read) per_rank += (per_rank.empty() ? "" : ", ") + std::to_string(b / 1e9);
    const double slowest = *std::max_element(seconds.begin(), seconds.end());
    const double file_gb = static_cast<double>(directory_bytes(o.directory)) / 1e9;
    std::uint64_t all = 0;
    for (const std::uint64_t b : read) all += b;
    const double used_gib =
        used_after > used_before ? static_cast<double>(used_after - used_before) / (1 << 30) : 0.0;
    std::printf(
        "{\"bench\": \"load_hf\", \"device\": \"%s\", \"model\": \"%s\", \"family\": \"%s\", "
        "\"mesh\": \"%s\", \"dtype\": \"%s\", \"attempt\": %d, \"load_s\": %.3f, \"file_gb\": %.3f, "
        "\"read_gb_per_rank\": [%s], \"gb_per_s\": %.2f, \"device_gib\": %.2f}\n",
        Device::name, o.directory.c_str(), m.family.c_str(), o.mesh.to_string().c_str(), o.type.c_str(),
        attempt, slowest, file_gb, per_rank.c_str(), static_cast<double>(all) / 1e9 / slowest, used_gib);
    std::fflush(stdout);
    if (!o.logits.empty() && attempt == 0) {  // the checkpoint's vocabulary, padded entries left out
      std::vector<float> values(static_cast<std::size_t>(seq * m.vocab));
      for (std::int64_t t = 0; t < seq; ++t)
        for (std::int64_t v = 0; v < m.vocab; ++v)
          values[static_cast<std::size_t>(t * m.vocab + v)] =
              static_cast<float>(logits.at(t * m.padded_vocab + v));
      sg::io::write_safetensors(o.logits,
                                {sg::io::make_tensor_to_write("logits", {1, seq, m.vocab}, values)});
    }
  }
  return 0;
}

template <class Device>
int usage(const std::string& why) {
  std::fprintf(stderr,
               "shardgraph: %s bench: %s. usage: %s DIR [--mesh tp=1] [--dtype bf16|f32] [--ids 1,2,3] "
               "[--logits FILE] [--repeat N] [--allow-unused-tensors]\n",
               Device::program, why.c_str(), Device::program);
  return 2;
}

template <class Device>
int bench_main(int argc, char** argv) try {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (!a.starts_with("--")) {
      o.directory = a;
      continue;
    }
    if (a == "--allow-unused-tensors") {
      o.allow_unused_tensors = true;
      continue;
    }
    if (i + 1 >= argc) return usage<Device>("missing value after " + std::string(a));
    const std::string v = argv[++i];
    if (a == "--mesh")
      o.mesh = sg::mesh_shape::parse(v);
    else if (a == "--dtype" && (v == "bf16" || v == "f32"))
      o.type = v;
    else if (a == "--logits")
      o.logits = v;
    else if (a == "--repeat")
      o.repeat = std::max(1, std::atoi(v.c_str()));
    else if (a == "--ids") {
      o.ids.clear();
      for (std::size_t at = 0; at < v.size();) {
        const std::size_t comma = std::min(v.find(',', at), v.size());
        o.ids.push_back(std::stoll(v.substr(at, comma - at)));
        at = comma + 1;
      }
    } else
      return usage<Device>("unknown option or value: " + std::string(a) + " " + v);
  }
  if (o.directory.empty()) return usage<Device>("no checkpoint directory given");
  return run<Device>(o);
} catch (const sg::error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}

}  // namespace load_bench
