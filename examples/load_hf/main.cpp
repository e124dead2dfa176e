// load_hf: loads a Hugging Face GPT-2 or LLaMA checkpoint directory across thread ranks (data, tensor
// and pipeline parallel) and prints what the model says for given token ids.
//
//   load_hf DIR [--mesh tp=2,pp=2] [--ids 464,2068,7586] [--dtype f32|f64|bf16] [--top 5]
//           [--golden FILE] [--check-one-rank] [--allow-unused-tensors]
//
//   DIR               a save_pretrained directory: config.json and model.safetensors, or
//                     model.safetensors.index.json and the files it names
//   --mesh            dp, tp and pp ranks (default tp=2): the model's layers split over pp, its
//                     matrices over tp; each rank reads only its slices of the files
//   --ids             the token ids of one sequence (default: 8 ids spread over the vocabulary)
//   --golden FILE     a tests/golden/<m>/golden.safetensors: run its input_ids and exit non-zero
//                     unless the logits and the loss match HF transformers' (f64)
//   --check-one-rank  also load the checkpoint on one rank and exit non-zero unless the layout's
//                     logits match it
//   --allow-unused-tensors  load a checkpoint whose files hold tensors no parameter reads (by
//                     default an error: the config.json may describe fewer layers than the files)
//
// Prints the bytes each rank read and the load time, the top tokens at the last position, and the
// next-token loss of the ids (HF's labels = input_ids: position t scored against id t + 1), computed
// from the logits over the checkpoint's vocabulary. A vocabulary that does not divide over tp is
// padded with zero rows (GPT-2's 50257 under tp = 2); the padded entries are left out of what is
// printed and of the loss.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

namespace sg = shardgraph;

namespace {

struct options {
  std::string directory, golden, type = "f32";
  sg::mesh_shape mesh = sg::mesh_shape::parse("tp=2");
  std::vector<std::int64_t> ids;
  int top = 5;
  bool check_one_rank = false;
  bool allow_unused_tensors = false;
};

sg::dtype parse_dtype(const std::string& t) {
  if (t == "f64") return sg::dtype::f64;
  if (t == "f32") return sg::dtype::f32;
  if (t == "bf16") return sg::dtype::bf16;
  throw sg::error(
      sg::error_message("load_hf --dtype " + t, "is not a dtype load_hf runs", "give f64, f32 or bf16"));
}

struct run_result {
  sg::tensor_map outputs;
  std::vector<std::uint64_t> bytes_read;  // per rank
  double load_seconds = 0;
};

run_result run(const sg::program& p, const sg::io::hf_model& m, const sg::mesh_shape& mesh,
               const sg::tensor_map& inputs) {
  const int ranks = mesh.world_size(p.nodes.axes);
  run_result r;
  r.bytes_read.resize(static_cast<std::size_t>(ranks));
  const std::vector<std::int64_t>& tokens = inputs.at("input_ids").shape();  // (batch, seq)
  const sg::model_sizes sizes = m.sizes(tokens[0], tokens[1]);
  std::mutex lock;
  sg::threads::world(ranks).run([&](sg::threads::communicator& comm) {
    auto bytes = std::make_shared<std::atomic<std::uint64_t>>(0);
    const auto start = std::chrono::steady_clock::now();
    auto rank = sg::bind(p, sizes, comm, sg::cpu::backend{}, mesh, m.weights(bytes));
    comm.barrier();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    sg::tensor_map out = rank.forward(inputs);
    const std::lock_guard<std::mutex> guard(lock);
    r.bytes_read[static_cast<std::size_t>(comm.rank())] = bytes->load();
    if (comm.rank() == 0) r.outputs = std::move(out), r.load_seconds = seconds;
  });
  return r;
}

// logits (B, T, V_model) -> position (b, t)'s first `vocab` logits
std::vector<double> logits_at(const sg::host_tensor& logits, std::int64_t b, std::int64_t t,
                              std::int64_t vocab) {
  const std::int64_t seq = logits.shape()[1], padded = logits.shape()[2];
  std::vector<double> out(static_cast<std::size_t>(vocab));
  for (std::int64_t v = 0; v < vocab; ++v)
    out[static_cast<std::size_t>(v)] = logits.at((b * seq + t) * padded + v);
  return out;
}

// Mean of -log softmax(logits[t])[ids[t + 1]] over t < T - 1, in f64.
double next_token_loss(const sg::host_tensor& logits, const std::vector<std::int64_t>& ids,
                       std::int64_t vocab) {
  double sum = 0;
  const std::int64_t seq = static_cast<std::int64_t>(ids.size());
  for (std::int64_t t = 0; t + 1 < seq; ++t) {
    const std::vector<double> z = logits_at(logits, 0, t, vocab);
    const double top = *std::max_element(z.begin(), z.end());
    double total = 0;
    for (const double x : z) total += std::exp(x - top);
    sum += top + std::log(total) - z[static_cast<std::size_t>(ids[static_cast<std::size_t>(t + 1)])];
  }
  return sum / static_cast<double>(seq - 1);
}

// max |a - b| / max |b| over the first `vocab` logits of every position
double relative_difference(const sg::host_tensor& a, const sg::host_tensor& b, std::int64_t vocab) {
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < b.shape()[0]; ++i)
    for (std::int64_t t = 0; t < b.shape()[1]; ++t) {
      const std::vector<double> x = logits_at(a, i, t, vocab), y = logits_at(b, i, t, vocab);
      for (std::size_t v = 0; v < y.size(); ++v) {
        diff = std::max(diff, std::abs(x[v] - y[v]));
        scale = std::max(scale, std::abs(y[v]));
      }
    }
  return diff / scale;
}

std::string byte_text(double bytes) {
  char text[32];
  if (bytes >= 1e9)
    std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
  else if (bytes >= 1e6)
    std::snprintf(text, sizeof text, "%.2f MB", bytes / 1e6);
  else
    std::snprintf(text, sizeof text, "%.1f kB", bytes / 1e3);
  return text;
}

int load(const options& o) {
  // The tokens: the golden file's batch, or one sequence of --ids.
  std::unique_ptr<sg::io::safetensors_file> golden;
  std::int64_t batch = 1, seq = 0;
  std::vector<std::int64_t> ids = o.ids, targets;
  if (!o.golden.empty()) {
    golden = std::make_unique<sg::io::safetensors_file>(o.golden);
    batch = golden->info("input_ids").shape.at(0);
    seq = golden->info("input_ids").shape.at(1);
    ids = golden->read_as<std::int64_t>("input_ids");
    targets = golden->read_as<std::int64_t>("targets");
  }
  const sg::io::hf_model m =
      sg::io::open_hf_model(o.directory, {.type = parse_dtype(o.type),
                                          .vocab_multiple = o.mesh.size("tp"),
                                          .allow_unused_tensors = o.allow_unused_tensors});
  if (ids.empty())
    for (std::int64_t t = 0; t < 8; ++t) ids.push_back((t * 7919 + 11) % m.vocab);
  if (!golden) {
    seq = static_cast<std::int64_t>(ids.size());
    targets.assign(ids.begin() + 1, ids.end());
    targets.push_back(ids.front());  // the model's own loss output is not the one printed
  }
  for (const std::int64_t id : ids)
    if (id < 0 || id >= m.vocab)
      throw sg::error(sg::error_message(
          "load_hf --ids",
          "id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(m.vocab) + ")",
          "give ids of the checkpoint's tokenizer"));
  sg::tensor_map inputs;
  inputs.emplace("input_ids", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  inputs.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, seq}, targets));

  std::printf("%s: %s checkpoint, vocabulary %lld, %s on %s (%d ranks)\n", o.directory.c_str(),
              m.family.c_str(), static_cast<long long>(m.vocab), o.type.c_str(), o.mesh.to_string().c_str(),
              o.mesh.world_size(m.layout.nodes.axes));
  const run_result r = run(m.layout, m, o.mesh, inputs);
  const std::uint64_t total = std::accumulate(r.bytes_read.begin(), r.bytes_read.end(), std::uint64_t{0});
  std::printf("loaded in %.3f s; bytes read per rank:", r.load_seconds);
  for (const std::uint64_t b : r.bytes_read) std::printf(" %s", byte_text(static_cast<double>(b)).c_str());
  std::printf(" (%s in all)\n", byte_text(static_cast<double>(total)).c_str());

  const sg::host_tensor& logits = r.outputs.at("logits");
  const std::vector<double> last = logits_at(logits, batch - 1, seq - 1, m.vocab);
  std::vector<std::int64_t> order(last.size());
  std::iota(order.begin(), order.end(), 0);
  const auto top = std::min<std::size_t>(static_cast<std::size_t>(o.top), order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                    [&](std::int64_t a, std::int64_t b) {
                      return last[static_cast<std::size_t>(a)] > last[static_cast<std::size_t>(b)];
                    });
  std::printf("top %zu next tokens after the last id:", top);
  for (std::size_t k = 0; k < top; ++k)
    std::printf(" %lld (%.4f)", static_cast<long long>(order[k]), last[static_cast<std::size_t>(order[k])]);
  std::printf("\n");

  bool ok = true;
  if (golden) {
    const sg::host_tensor expected =
        sg::host_tensor::from<double>(golden->info("logits").shape, golden->read_as<double>("logits"));
    const double logit_error = relative_difference(logits, expected, m.vocab);
    const double loss = r.outputs.at("loss").at(0), hf_loss = golden->read_as<double>("loss").at(0);
    const double loss_error = std::abs(loss - hf_loss) / std::abs(hf_loss);
    // f64 GPT-2 is exact to ~1e-12; HF's LLaMA rounds its norms and RoPE to f32 (tests/golden/README.md)
    const double tolerance = o.type != "f64"       ? (o.type == "f32" ? 1e-4 : 5e-2)
                             : m.family == "llama" ? 1e-5
                                                   : 1e-10;
    std::printf(
        "loss %.12f, HF transformers %.12f; largest relative difference: logits %.3g, loss %.3g (tolerance "
        "%.0e)\n",
        loss, hf_loss, logit_error, loss_error, tolerance);
    ok = logit_error < tolerance && loss_error < tolerance;
    std::printf("%s: %s HF transformers\n", ok ? "OK" : "FAILED", ok ? "matches" : "does NOT match");
  } else {
    std::printf("next-token loss of the ids: %.6f\n", next_token_loss(logits, ids, m.vocab));
  }
  if (o.check_one_rank) {
    const run_result one = run(m.single, m, sg::mesh_shape{}, inputs);
    const double difference = relative_difference(logits, one.outputs.at("logits"), m.vocab);
    const double tolerance = o.type == "f64" ? 1e-10 : o.type == "f32" ? 1e-4 : 5e-2;
    const bool same = difference < tolerance;
    std::printf(
        "%s: the %s layout %s one rank (largest relative difference of the logits %.3g, tolerance %.0e)\n",
        same ? "OK" : "FAILED", o.mesh.to_string().c_str(), same ? "matches" : "does NOT match", difference,
        tolerance);
    ok = ok && same;
  }
  return ok ? 0 : 1;
}

int usage(const std::string& why) {
  std::fprintf(
      stderr,
      "shardgraph: load_hf: %s. usage: load_hf DIR [--mesh tp=2,pp=2] [--ids 1,2,3] [--dtype f32|f64|bf16] "
      "[--top K] [--golden FILE] [--check-one-rank] [--allow-unused-tensors]\n",
      why.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("see the comment at the top of examples/load_hf/main.cpp for every option\n");
      return 0;
    }
    if (a == "--check-one-rank") {
      o.check_one_rank = true;
      continue;
    }
    if (a == "--allow-unused-tensors") {
      o.allow_unused_tensors = true;
      continue;
    }
    if (!a.starts_with("--")) {
      if (!o.directory.empty()) return usage("two checkpoint directories given");
      o.directory = a;
      continue;
    }
    if (i + 1 >= argc) return usage("missing value after " + std::string(a));
    const std::string v = argv[++i];
    try {
      if (a == "--mesh")
        o.mesh = sg::mesh_shape::parse(v);
      else if (a == "--dtype")
        o.type = v;
      else if (a == "--golden")
        o.golden = v;
      else if (a == "--top")
        o.top = std::stoi(v);
      else if (a == "--ids") {
        for (std::size_t at = 0; at < v.size();) {
          const std::size_t comma = std::min(v.find(',', at), v.size());
          o.ids.push_back(std::stoll(v.substr(at, comma - at)));
          at = comma + 1;
        }
      } else
        return usage("unknown option " + std::string(a));
    } catch (const sg::error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    } catch (const std::logic_error&) {
      return usage("cannot read the value '" + v + "' of " + std::string(a));
    }
  }
  if (o.directory.empty()) return usage("no checkpoint directory given");
  try {
    return load(o);
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
