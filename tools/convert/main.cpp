// shardgraph-convert: HF checkpoints <-> shardgraph checkpoints, offline.
//
//   shardgraph-convert to-shardgraph HF_DIR OUT [--mesh tp=2,pp=2] [--dtype f32|bf16|f16|f64]
//       [--allow-unused-tensors]
//       loads a HF GPT-2 or LLaMA directory on the mesh's thread ranks (each reads only its
//       slices) and saves it as a shardgraph checkpoint (save_weights: one file per rank, loadable
//       under any layout); config.json is copied into it. OUT is replaced as a whole, once complete.
//       The checkpoint is held to config.json as open_hf_model holds it: a tensor of another shape
//       or dtype is refused, and so are tensors no parameter reads, unless --allow-unused-tensors
//   shardgraph-convert to-hf CKPT OUT [--config FILE] [--dtype ...] [--max-file-size 5GB]
//       writes a shardgraph checkpoint (weights or a training checkpoint) as a HF directory that
//       transformers' from_pretrained reads; the config is CKPT/config.json unless given
//   shardgraph-convert random OUT (--preset NAME | --family gpt2|llama [--layers N --hidden N
//       --heads N --kv-heads N --intermediate N --vocab N --positions N]) [--dtype f32|bf16|f16]
//       [--max-file-size SIZE] [--seed N]
//       writes a random-weight HF checkpoint (presets: gpt2, gpt2-medium, gpt2-large, gpt2-xl,
//       llama-1b, llama-7b), for tests and load benchmarks
//   shardgraph-convert compare A B [--tolerance X]
//       exits 0 when two HF directories hold the same tensors (names, dtypes, shapes) with values
//       equal (or within X, relative to each tensor's largest value); else prints the first difference
//
// Sizes take a suffix: 300kB, 5GB, 2GiB.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "random_hf_checkpoint.hpp"

namespace sg = shardgraph;

namespace {

[[noreturn]] void usage_error(const std::string& why) {
  throw sg::error(sg::error_message("shardgraph-convert", why,
                                    "run shardgraph-convert --help for the commands and their options"));
}

// Options that take no value.
constexpr std::string_view flag_options[] = {"allow-unused-tensors"};

// "--name value" options (and the flags above) after the positional arguments.
struct arguments {
  std::vector<std::string> positional;
  std::map<std::string, std::string, std::less<>> options;

  arguments(int argc, char** argv, int from) {
    for (int i = from; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (!a.starts_with("--")) {
        positional.emplace_back(a);
        continue;
      }
      if (std::find(std::begin(flag_options), std::end(flag_options), a.substr(2)) !=
          std::end(flag_options)) {
        options[std::string(a.substr(2))] = "true";
        continue;
      }
      if (i + 1 >= argc) usage_error("missing value after " + std::string(a));
      options[std::string(a.substr(2))] = argv[++i];
    }
  }
  void expect(std::size_t count, const char* what, std::initializer_list<std::string_view> allowed) const {
    if (positional.size() != count) usage_error(std::string("expected ") + what);
    for (const auto& [name, value] : options)
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
        usage_error("unknown option --" + name);
  }
  std::optional<std::string> get(std::string_view name) const {
    const auto it = options.find(name);
    return it == options.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  std::int64_t integer(std::string_view name, std::int64_t otherwise) const {
    const auto v = get(name);
    if (!v) return otherwise;
    try {
      std::size_t used = 0;
      const std::int64_t n = std::stoll(*v, &used);
      if (used == v->size()) return n;
    } catch (const std::logic_error&) {
    }
    usage_error("--" + std::string(name) + " " + *v + " is not an integer");
  }
};

std::uint64_t parse_size(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::logic_error&) {
    usage_error("size '" + text + "' is not a number with an optional unit (300kB, 5GB, 2GiB)");
  }
  const std::string unit = text.substr(used);
  const std::map<std::string, double> units{{"", 1},         {"B", 1},           {"kB", 1e3},
                                            {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},
                                            {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  const auto it = units.find(unit);
  if (it == units.end() || value < 0)
    usage_error("size '" + text + "' has an unknown unit (use kB, MB, GB, KiB, MiB, GiB)");
  return static_cast<std::uint64_t>(value * it->second);
}

sg::io::st_dtype parse_st_dtype(const std::string& name) {
  if (name == "f64") return sg::io::st_dtype::f64;
  if (name == "f32") return sg::io::st_dtype::f32;
  if (name == "bf16") return sg::io::st_dtype::bf16;
  if (name == "f16") return sg::io::st_dtype::f16;
  usage_error("--dtype " + name + " is not f64, f32, bf16 or f16");
}

sg::dtype model_dtype(sg::io::st_dtype t) {
  switch (t) {
    case sg::io::st_dtype::f64:
      return sg::dtype::f64;
    case sg::io::st_dtype::bf16:
      return sg::dtype::bf16;
    case sg::io::st_dtype::f16:
      return sg::dtype::f16;
    default:
      return sg::dtype::f32;
  }
}

void log_line(const std::string& line) { std::fprintf(stderr, "shardgraph-convert: %s\n", line.c_str()); }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int to_shardgraph(const arguments& a) {
  a.expect(2, "to-shardgraph HF_DIR OUT", {"mesh", "dtype", "allow-unused-tensors"});
  const std::string& from = a.positional[0];
  const std::string& to = a.positional[1];
  const sg::mesh_shape mesh = sg::mesh_shape::parse(a.get("mesh").value_or("tp=1"));
  auto checkpoint = sg::io::safetensors_checkpoint::open(from);
  const std::vector<std::string> names = checkpoint->tensor_names();
  if (names.empty()) usage_error(from + " holds no tensors");
  const sg::io::st_dtype saved = checkpoint->file_of(names.front()).info(names.front()).dtype;
  const sg::dtype type = model_dtype(a.get("dtype") ? parse_st_dtype(*a.get("dtype")) : saved);
  const sg::io::hf_model m =
      sg::io::open_hf_model(from, {.type = type,
                                   .vocab_multiple = mesh.size("tp"),
                                   .allow_unused_tensors = a.get("allow-unused-tensors").has_value()});
  const int ranks = mesh.world_size(m.layout.nodes.axes);
  const auto start = std::chrono::steady_clock::now();
  std::atomic<std::uint64_t> total{0};
  sg::threads::world(ranks).run([&](sg::threads::communicator& comm) {
    auto bytes = std::make_shared<std::atomic<std::uint64_t>>(0);
    auto rank = sg::bind(m.layout, m.sizes(mesh.size("dp"), 1), comm,  // one token per replica: weights only
                         sg::cpu::backend{}, mesh, m.weights(bytes));
    sg::io::save_hooks hooks;
    hooks.add_files = [&](const std::string& staging) {  // config.json is part of the new checkpoint
      const auto config = sg::io::file_contents::open((std::filesystem::path(from) / "config.json").string());
      sg::io::atomic_file_writer copy((std::filesystem::path(staging) / "config.json").string());
      copy.write(config.bytes());
      copy.commit();
    };
    sg::io::save_weights(to, rank.parameters(), comm, "", hooks);
    total += bytes->load();
  });
  char line[200];
  std::snprintf(line, sizeof line,
                "%s (%s) -> %s on %s (%d ranks, vocabulary %lld padded to %lld): read %.3f GB in %.2f s",
                from.c_str(), m.family.c_str(), to.c_str(), mesh.to_string().c_str(), ranks,
                static_cast<long long>(m.vocab), static_cast<long long>(m.padded_vocab), total.load() / 1e9,
                seconds_since(start));
  log_line(line);
  return 0;
}

int to_hf(const arguments& a) {
  a.expect(2, "to-hf CKPT OUT", {"config", "dtype", "max-file-size"});
  sg::io::hf_export_options o;
  o.config = a.get("config").value_or("");
  if (const auto d = a.get("dtype")) o.dtype = parse_st_dtype(*d);
  if (const auto s = a.get("max-file-size")) o.max_file_bytes = parse_size(*s);
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t bytes = sg::io::export_hf(a.positional[0], a.positional[1], o, log_line);
  char line[160];
  std::snprintf(line, sizeof line, "%s -> %s: wrote %.3f GB in %.2f s", a.positional[0].c_str(),
                a.positional[1].c_str(), bytes / 1e9, seconds_since(start));
  log_line(line);
  return 0;
}

int make_random(const arguments& a) {
  a.expect(1, "random OUT",
           {"preset", "family", "layers", "hidden", "heads", "kv-heads", "intermediate", "vocab", "positions",
            "dtype", "max-file-size", "seed"});
  sg::examples::random_hf_model m;
  if (const auto p = a.get("preset"))
    m = sg::examples::random_hf_model::preset(*p);
  else if (const auto f = a.get("family"))
    m.family = *f;
  else
    usage_error("random needs --preset NAME or --family gpt2|llama");
  m.layers = a.integer("layers", m.layers);
  m.model = a.integer("hidden", m.model);
  m.heads = a.integer("heads", m.heads);
  m.kv_heads = a.integer("kv-heads", m.family == "gpt2" ? m.heads : m.kv_heads);
  m.ffn = a.integer("intermediate", m.family == "gpt2" ? 4 * m.model : m.ffn);
  m.vocab = a.integer("vocab", m.vocab);
  m.positions = a.integer("positions", m.positions);
  m.seed = static_cast<std::uint64_t>(a.integer("seed", 1));
  if (const auto d = a.get("dtype")) m.dtype = parse_st_dtype(*d);
  if (const auto s = a.get("max-file-size")) m.max_file_bytes = parse_size(*s);
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t bytes = sg::examples::write_random_hf_checkpoint(a.positional[0], m, log_line);
  char line[200];
  std::snprintf(line, sizeof line, "%s: random %s, %lld layers, hidden %lld, %.3f GB of %s in %.2f s",
                a.positional[0].c_str(), m.family.c_str(), static_cast<long long>(m.layers),
                static_cast<long long>(m.model), bytes / 1e9,
                std::string(sg::io::st_dtype_name(m.dtype)).c_str(), seconds_since(start));
  log_line(line);
  return 0;
}

int compare(const arguments& a) {
  a.expect(2, "compare A B", {"tolerance"});
  double tolerance = 0;
  if (const auto t = a.get("tolerance")) tolerance = std::stod(*t);
  auto x = sg::io::safetensors_checkpoint::open(a.positional[0]);
  auto y = sg::io::safetensors_checkpoint::open(a.positional[1]);
  const std::vector<std::string> names = x->tensor_names(), other = y->tensor_names();
  const auto differ = [&](const std::string& what) {
    std::printf("DIFFERENT: %s\n", what.c_str());
    return 1;
  };
  if (names != other)
    return differ(std::to_string(names.size()) + " tensors in " + a.positional[0] + ", " +
                  std::to_string(other.size()) + " in " + a.positional[1] + " (or other names)");
  double worst = 0;
  for (const std::string& name : names) {
    const sg::io::tensor_info &p = x->file_of(name).info(name), &q = y->file_of(name).info(name);
    if (p.dtype != q.dtype && tolerance == 0) return differ(name + ": dtypes differ (give --tolerance)");
    if (p.shape != q.shape) return differ(name + ": shapes differ");
    if (p.dtype == q.dtype && tolerance == 0) {
      const auto bx = x->file_of(name).bytes(name), by = y->file_of(name).bytes(name);
      if (!std::equal(bx.begin(), bx.end(), by.begin(), by.end())) return differ(name + ": values differ");
      continue;
    }
    const std::vector<double> u = x->file_of(name).read_as<double>(name),
                              v = y->file_of(name).read_as<double>(name);
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < u.size(); ++i)
      diff = std::max(diff, std::abs(u[i] - v[i])), scale = std::max(scale, std::abs(u[i]));
    const double relative = scale > 0 ? diff / scale : diff;
    worst = std::max(worst, relative);
    if (relative > tolerance)
      return differ(name + ": largest difference " + std::to_string(relative) +
                    " of the largest value, over " + std::to_string(tolerance));
  }
  std::printf("SAME: %zu tensors%s\n", names.size(),
              tolerance > 0 ? ", values within the tolerance" : ", bit for bit");
  if (tolerance > 0) std::printf("largest relative difference: %.3g\n", worst);
  return 0;
}

int help() {
  std::printf(
      "shardgraph-convert: HF checkpoints <-> shardgraph checkpoints\n"
      "  to-shardgraph HF_DIR OUT [--mesh tp=2,pp=2] [--dtype f32|bf16|f16|f64] [--allow-unused-tensors]\n"
      "  to-hf CKPT OUT [--config FILE] [--dtype f32|bf16|f16|f64] [--max-file-size 5GB]\n"
      "  random OUT (--preset gpt2|gpt2-medium|gpt2-large|gpt2-xl|llama-1b|llama-7b | --family gpt2|llama)\n"
      "         [--layers N --hidden N --heads N --kv-heads N --intermediate N --vocab N --positions N]\n"
      "         [--dtype f32|bf16|f16] [--max-file-size SIZE] [--seed N]\n"
      "  compare A B [--tolerance X]\n"
      "see docs/loading.md\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return help(), 2;
  const std::string_view command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") return help();
  try {
    const arguments a(argc, argv, 2);
    if (command == "to-shardgraph") return to_shardgraph(a);
    if (command == "to-hf") return to_hf(a);
    if (command == "random") return make_random(a);
    if (command == "compare") return compare(a);
    usage_error("unknown command '" + std::string(command) + "'");
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
