// generate_cpu: greedy generation's tokens/s on the cpu backend, from a HF checkpoint directory
// (open_hf_model, f32), on one rank and on tp thread ranks. Prints one JSON line per configuration.
//
//   generate_cpu DIR [--batch 1,8] [--prompt 32] [--new-tokens 64] [--layouts 1,tp2] [--repeat 3]
//
// A run submits `batch` prompts of `prompt` tokens at once and generates `new-tokens` tokens for
// each (no stop token) through run_generation: the first step prefills every prompt and samples
// each one's first token; each later step decodes one token of every sequence. Per run:
//   prefill_s  the first step, less the bindings made in it
//   decode_s   the other steps, less the bindings made in them
//   bind_s     the bindings (two here: the prefill's, which reads the weights and allocates the
//              cache, and the decode's, which shares them)
//   total_s    all of it, as a caller waits for it
// and prefill tokens/s = batch x prompt / prefill_s, decode tokens/s = batch x (new - 1) /
// decode_s, end to end = batch x new / total_s. Each figure is the median of `repeat` runs.
// bench/generate_cpu/compare.py runs this and bench/generate_hf.py (the HF peer) in one run.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/generate/hf_cache_shape.hpp>
#include <shardgraph/generate/runner.hpp>
#include <shardgraph/io/hf_model.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/runtime/kv_cache.hpp>
#include <shardgraph/threads.hpp>

namespace sg = shardgraph;
namespace gen = shardgraph::generate;
using clock_type = std::chrono::steady_clock;

namespace {

struct options {
  std::string dir;
  std::vector<std::int64_t> batches{1, 8};
  std::int64_t prompt = 32, new_tokens = 64;
  std::vector<int> tps{1, 2};
  int repeat = 3;
};

struct run_times {
  double prefill_s = 0, decode_s = 0, bind_s = 0, total_s = 0;
  std::vector<gen::token_id> first_ids;  // row 0's first generated ids, to check against the peer
};

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One rank's cache as the scheduler plans it, in f32, for `tokens` tokens of each of `batch`
// sequences in blocks of 16.
gen::kv_cache_size planned_cache(const options& o, const sg::io::hf_model& m, std::int64_t batch, int tp) {
  const gen::kv_cache_shape shape = gen::hf_cache_shape(m, sg::mesh_shape{{"dp", 1}, {"tp", tp}, {"pp", 1}}, 16);
  return {.shape = shape, .blocks = batch * shape.blocks_for(o.prompt + o.new_tokens)};
}

// One run on `tp` thread ranks; rank 0's times.
run_times generate_once(const options& o, std::int64_t batch, int tp) {
  run_times times;
  sg::threads::world(tp).run([&](sg::threads::communicator& comm) {
    const sg::io::hf_model m = sg::io::open_hf_model(o.dir, {.type = sg::dtype::f32, .vocab_multiple = tp});
    const gen::kv_cache_size size = planned_cache(o, m, batch, tp);
    const sg::kv_cache_shape cache{.blocks = size.blocks,
                                   .block_tokens = size.shape.block_tokens,
                                   .max_blocks = size.shape.blocks_for(o.prompt + o.new_tokens)};
    const sg::mesh_shape mesh{{"dp", 1}, {"tp", tp}, {"pp", 1}};
    gen::scheduler s(size,
                     {.vocab_size = m.vocab, .max_batched_tokens = batch * o.prompt, .max_sequences = batch});
    for (std::int64_t b = 0; b < batch; ++b) {
      std::vector<gen::token_id> prompt;
      for (std::int64_t t = 0; t < o.prompt; ++t) prompt.push_back((b * 7919 + t * 2654435761LL) % m.vocab);
      s.submit({.prompt = prompt, .max_new_tokens = o.new_tokens});
    }
    std::vector<clock_type::time_point> step_starts;
    std::vector<double> bind_in_step;  // seconds of binding inside each step
    auto bind_rank = [&](std::int64_t rows, std::int64_t seq, const auto& parameters) {
      const auto start = clock_type::now();
      sg::model_sizes sizes = m.sizes(rows, seq);
      auto rank = sg::bind(m.generation, sg::set_kv_cache_sizes(sizes, cache), comm, sg::cpu::backend{}, mesh,
                           parameters);
      bind_in_step.back() += seconds_between(start, clock_type::now());
      return rank;
    };
    auto on_step = [&](const gen::scheduled_step& step) {
      if (step_starts.empty() && step.tokens != batch * o.prompt)
        sg::fail("generate_cpu",
                 "the first step feeds " + std::to_string(step.tokens) + " tokens, not every prompt",
                 "report this: the scheduler's options should admit every prompt at once");
      step_starts.push_back(clock_type::now());
      bind_in_step.push_back(0);
    };
    const auto start = clock_type::now();
    const auto results =
        gen::run_generation(s, bind_rank, m.weights(nullptr), {.max_blocks = cache.max_blocks, .on_step = on_step});
    const auto end = clock_type::now();
    if (comm.rank() != 0) return;
    step_starts.push_back(end);
    times.total_s = seconds_between(start, end);
    times.prefill_s = seconds_between(step_starts[0], step_starts[1]) - bind_in_step[0];
    for (std::size_t k = 1; k + 1 < step_starts.size(); ++k)
      times.decode_s += seconds_between(step_starts[k], step_starts[k + 1]) - bind_in_step[k];
    for (double b : bind_in_step) times.bind_s += b;
    const auto& first = results.at(0).generated;
    times.first_ids.assign(first.begin(), first.begin() + std::min<std::ptrdiff_t>(8, std::ssize(first)));
    if (std::ssize(first) != o.new_tokens)
      sg::fail("generate_cpu", "request 0 generated " + std::to_string(first.size()) + " tokens",
               "give --new-tokens at most the model's positions less --prompt");
  });
  return times;
}

double median_of(std::vector<run_times> runs, double run_times::*field) {
  std::vector<double> v;
  for (const run_times& r : runs) v.push_back(r.*field);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench(const options& o, std::int64_t batch, int tp) {
  std::vector<run_times> runs;
  for (int r = 0; r < o.repeat; ++r) runs.push_back(generate_once(o, batch, tp));
  const double prefill = median_of(runs, &run_times::prefill_s),
               decode = median_of(runs, &run_times::decode_s);
  const double bind = median_of(runs, &run_times::bind_s), total = median_of(runs, &run_times::total_s);
  std::string ids;
  for (gen::token_id id : runs[0].first_ids) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
  std::printf(
      "{\"bench\": \"generate_cpu\", \"dtype\": \"f32\", \"ranks\": %d, \"tp\": %d, \"batch\": %lld, "
      "\"prompt\": %lld, \"new_tokens\": %lld, \"repeat\": %d, \"prefill_s\": %.4f, \"decode_s\": %.4f, "
      "\"bind_s\": %.4f, \"total_s\": %.4f, \"prefill_tokens_per_s\": %.1f, \"decode_tokens_per_s\": %.1f, "
      "\"end_to_end_tokens_per_s\": %.1f, \"first_ids\": [%s]}\n",
      tp, tp, static_cast<long long>(batch), static_cast<long long>(o.prompt),
      static_cast<long long>(o.new_tokens), o.repeat, prefill, decode, bind, total,
      static_cast<double>(batch * o.prompt) / prefill,
      static_cast<double>(batch * (o.new_tokens - 1)) / decode,
      static_cast<double>(batch * o.new_tokens) / total, ids.c_str());
  std::fflush(stdout);
}

template <class T>
std::vector<T> number_list(const std::string& text, const char* flag) {
  std::vector<T> values;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    const std::string digits = item.rfind("tp", 0) == 0 ? item.substr(2) : item;
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(digits) < 1)
      sg::fail(std::string("generate_cpu ") + flag, "'" + item + "' is not a positive number",
               "give a comma-separated list such as 1,8 (--layouts: 1,tp2)");
    values.push_back(static_cast<T>(std::stoll(digits)));
  }
  return values;
}

options parse(int argc, char** argv) {
  options o;
  if (argc < 2 || std::string_view(argv[1]).starts_with("--"))
    sg::fail("generate_cpu", "no checkpoint directory",
             "run: generate_cpu DIR [--batch 1,8] ... (see main.cpp)");
  o.dir = argv[1];
  for (int i = 2; i < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) sg::fail("generate_cpu", std::string(flag) + " has no value", "give it one");
    const std::string value = argv[i + 1];
    if (flag == "--batch")
      o.batches = number_list<std::int64_t>(value, "--batch");
    else if (flag == "--prompt")
      o.prompt = number_list<std::int64_t>(value, "--prompt").at(0);
    else if (flag == "--new-tokens")
      o.new_tokens = number_list<std::int64_t>(value, "--new-tokens").at(0);
    else if (flag == "--layouts")
      o.tps = number_list<int>(value, "--layouts");
    else if (flag == "--repeat")
      o.repeat = number_list<int>(value, "--repeat").at(0);
    else
      sg::fail("generate_cpu", "unknown option " + std::string(flag),
               "see the comment at the top of bench/generate_cpu/main.cpp");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options o = parse(argc, argv);
    for (int tp : o.tps)
      for (std::int64_t batch : o.batches) bench(o, batch, tp);
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
