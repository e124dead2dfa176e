// forward_cpu: forward time of a GPT-2 124M-size model on the cpu backend, one rank against
// tensor-parallel layouts on thread ranks. Prints one JSON line per configuration.
//
//   forward_cpu [--batch 2] [--seq 128] [--repeat 5] [--layouts 1,tp2,dp2] [--dtype f32|f64]
//
// Each configuration runs one warm-up forward and then `repeat` timed forwards; the figure is the
// median. Weights are random (the time does not depend on them).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr sg::graph gpt2_f32() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f32}); }
constexpr sg::graph gpt2_f64() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::program program_f32 = sg::compile<gpt2_f32>();
constexpr sg::program program_f64 = sg::compile<gpt2_f64>();

struct layout {
  std::string name;
  int dp, tp;
};

void bench(const sg::program& p, const char* type, const layout& l, std::int64_t batch, std::int64_t seq, int repeat) {
  const sg::models::gpt2_config config = sg::models::gpt2_config::small();
  std::vector<std::int64_t> ids(static_cast<std::size_t>(batch * seq));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 2654435761u) % 50257);
  sg::tensor_map inputs;
  inputs.emplace("input_ids", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  inputs.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  std::vector<double> seconds;
  double loss = 0;
  sg::threads::world(l.dp * l.tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, config.sizes(batch, seq), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", l.dp}, {"tp", l.tp}},
                         sg::random_weights(1, 0.02));
    for (int r = 0; r <= repeat; ++r) {
      comm.barrier();
      auto start = std::chrono::steady_clock::now();
      auto out = rank.forward(inputs);
      comm.barrier();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (comm.rank() == 0 && r > 0) seconds.push_back(s);
      if (comm.rank() == 0) loss = out.at("loss").at(0);
    }
  });
  std::sort(seconds.begin(), seconds.end());
  double median = seconds[seconds.size() / 2];
  std::printf("{\"bench\": \"forward_cpu\", \"model\": \"gpt2-124M\", \"dtype\": \"%s\", \"layout\": \"%s\", "
              "\"ranks\": %d, \"batch\": %lld, \"seq\": %lld, \"median_s\": %.4f, \"min_s\": %.4f, "
              "\"tokens_per_s\": %.1f, \"loss\": %.6f}\n",
              type, l.name.c_str(), l.dp * l.tp, static_cast<long long>(batch), static_cast<long long>(seq), median,
              seconds.front(), static_cast<double>(batch * seq) / median, loss);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t batch = 2, seq = 128;
  int repeat = 5;
  std::string layouts = "1,tp2,dp2", type = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string_view a = argv[i];
    std::string v = argv[i + 1];
    if (a == "--batch") batch = std::stoll(v);
    else if (a == "--seq") seq = std::stoll(v);
    else if (a == "--repeat") repeat = std::max(1, std::stoi(v));
    else if (a == "--layouts") layouts = v;
    else if (a == "--dtype") type = v;
    else {
      std::fprintf(stderr, "shardgraph: forward_cpu: unknown option %s. see the comment at the top of bench/forward_cpu/main.cpp\n", argv[i]);
      return 2;
    }
  }
  try {
    std::stringstream list(layouts);
    for (std::string item; std::getline(list, item, ',');) {
      layout l{item, 1, 1};
      if (item.rfind("tp", 0) == 0) l.tp = std::stoi(item.substr(2));
      else if (item.rfind("dp", 0) == 0) l.dp = std::stoi(item.substr(2));
      else if (item != "1") throw sg::error(sg::error_message("forward_cpu --layouts", "unknown layout '" + item + "'", "use 1, tpN or dpN"));
      if (type == "f64") bench(program_f64, "f64", l, batch, seq, repeat);
      else bench(program_f32, "f32", l, batch, seq, repeat);
    }
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
