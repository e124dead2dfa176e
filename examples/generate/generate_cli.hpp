#pragma once
// The generate command (examples/generate/main.cpp: every option), for the builds that run it:
// main.cpp on the cpu backend, main.cu on the cuda backend with CPU stages on the cpu backend.
//
//   int main(int argc, char** argv) {
//     return generate_cli::generate_main(argc, argv, gpu_totals, [](const generate_cli::options& o,
//                                                                    const device_placement& p) {
//       return gen::llm<...>(o.directory, o.llm, sg::text::open_tokenizer_codec(o.directory), ...);
//     });
//   }
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <shardgraph/generate/llm.hpp>
#include <shardgraph/text/tokenizer_codec.hpp>
#include <shardgraph/threads.hpp>

#include "device_placement.hpp"
#if SHARDGRAPH_GENERATE_IMAGES
#include "image_generation_run.hpp"
#endif

namespace sg = shardgraph;
namespace gen = shardgraph::generate;

namespace generate_cli {

struct options {
  std::string directory, type = "f32";
  std::vector<gen::llm_prompt> prompts;
  bool print_ids = false;
  gen::llm_options llm{.mesh = sg::mesh_shape::parse("tp=1")};
  gen::generation_params params{.max_new_tokens = 32};
  std::string image;  // --image: a LLaVA checkpoint's image prompt (image_generation_run.hpp)
  std::string max_memory, placement = "auto";  // --max-memory, --placement: device_placement.hpp
};

sg::dtype parse_dtype(const std::string& t) {
  if (t == "f64") return sg::dtype::f64;
  if (t == "f32") return sg::dtype::f32;
  if (t == "bf16") return sg::dtype::bf16;
  sg::fail("generate --dtype " + t, "is not a dtype generate runs", "give f64, f32 or bf16");
}

std::vector<gen::token_id> parse_ids(const std::string& v) {
  std::vector<gen::token_id> ids;
  for (std::size_t at = 0; at < v.size();) {
    const std::size_t comma = std::min(v.find(',', at), v.size());
    ids.push_back(std::stoll(v.substr(at, comma - at)));
    at = comma + 1;
  }
  return ids;
}

void read_prompts_file(const std::string& path, std::vector<gen::llm_prompt>& prompts) {
  std::ifstream in(path);
  if (!in)
    sg::fail("generate --prompts-file " + path, "cannot be read", "give a text file, one prompt per line");
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) prompts.emplace_back(line);
}

// Applies option `a` with value `v`; false for an option it does not know.
bool apply(options& o, std::string_view a, const std::string& v) {
  if (a == "--prompt")
    o.prompts.emplace_back(v);
  else if (a == "--prompts-file")
    read_prompts_file(v, o.prompts);
  else if (a == "--prompt-ids")
    o.prompts.emplace_back(parse_ids(v));
  else if (a == "--mesh")
    o.llm.mesh = sg::mesh_shape::parse(v);
  else if (a == "--dtype")
    o.llm.type = parse_dtype(o.type = v);
  else if (a == "--kv-memory")
    o.llm.kv_memory = gen::parse_kv_memory(v);
  else if (a == "--max-new-tokens")
    o.params.max_new_tokens = std::stoll(v);
  else if (a == "--temperature")
    o.params.sampling.temperature = std::stod(v);
  else if (a == "--top-p")
    o.params.sampling.top_p = std::stod(v);
  else if (a == "--top-k")
    o.params.sampling.top_k = std::stoll(v);
  else if (a == "--repetition-penalty")
    o.params.sampling.repetition_penalty = std::stod(v);
  else if (a == "--seed")
    o.params.sampling.seed = std::stoull(v);
  else if (a == "--image")
    o.image = v;
  else if (a == "--max-memory")
    o.max_memory = v;
  else if (a == "--placement")
    o.placement = v;
  else
    return false;
  return true;
}

std::string joined_ids(const std::vector<gen::token_id>& ids) {
  std::string text;
  for (const gen::token_id id : ids) text += (text.empty() ? "" : " ") + std::to_string(id);
  return text;
}

void print_ids_line(const std::vector<gen::token_id>& ids) { std::printf("ids: %s\n", joined_ids(ids).c_str()); }

int generate_from_image(const options& o) {
#if !SHARDGRAPH_GENERATE_IMAGES
  sg::fail("generate --image", "this build reads no image files: libstb was not found when it was configured",
           "install libstb-dev (tools/install_deps.sh) and configure the build again");
#else
  if (o.prompts.size() != 1) sg::fail("generate --image", "takes one prompt", "give one --prompt or --prompt-ids");
  const std::vector<gen::token_id> ids =
      generate_from_image_file({.directory = o.directory,
                                .image = o.image,
                                .mesh = o.llm.mesh,
                                .type = o.llm.type,
                                .prompt = o.prompts[0],
                                .params = o.params,
                                .codec = sg::text::open_tokenizer_codec(o.directory)});
  if (o.print_ids) print_ids_line(ids);
  return 0;
#endif
}

// make_llm(o, placement) opens the llm on the backends of the build; gpu_totals: each visible GPU's
// memory (none in a cpu build).
template <class MakeLlm>
int generate(options o, const std::vector<std::int64_t>& gpu_totals, const MakeLlm& make_llm) {
  if (!o.image.empty()) return generate_from_image(o);
  device_placement placement;
  if (!o.max_memory.empty())
    placement = place_on_devices(o.directory, o.llm.type, o.max_memory, o.placement, gpu_totals, o.llm);
  auto model = make_llm(o, placement);
  std::printf("%s: %s checkpoint, vocabulary %lld, %s on %s, tokenizer: %s\n", o.directory.c_str(),
              model.model().family.c_str(), static_cast<long long>(model.model().vocab), o.type.c_str(),
              o.llm.mesh.to_string().c_str(),
              model.has_tokenizer() ? "tokenizer.json" : "none (token ids only)");
  std::printf("%s\n", model.kv_cache().describe().c_str());
  const bool stream = o.prompts.size() == 1;
  const auto on_token = [&](std::int64_t, gen::token_id id, std::string_view piece) {
    if (!stream) return;
    if (model.has_tokenizer())
      std::fwrite(piece.data(), 1, piece.size(), stdout);
    else
      std::printf("%lld ", static_cast<long long>(id));
    std::fflush(stdout);
  };
  const std::vector<gen::llm_output> outputs = model.generate(o.prompts, o.params, on_token);
  if (stream) std::printf("\n");
  bool failed = false;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].error.empty()) {
      std::fprintf(stderr, "[%zu] %s\n", i, outputs[i].error.c_str());
      failed = true;
    } else if (!stream) {
      std::printf("[%zu] %s\n", i,
                  model.has_tokenizer() ? outputs[i].text.c_str() : joined_ids(outputs[i].ids).c_str());
    }
  }
  if (o.print_ids)
    for (const gen::llm_output& out : outputs) print_ids_line(out.ids);
  const gen::generation_stats& s = model.last_stats();
  std::printf(
      "prefill: %lld tokens, %.1f tokens/s; decode: %lld tokens, %.1f tokens/s (%lld steps, %lld "
      "preemptions)\n",
      static_cast<long long>(s.prefill_tokens), s.prefill_tokens_per_second(),
      static_cast<long long>(s.decode_tokens), s.decode_tokens_per_second(), static_cast<long long>(s.steps),
      static_cast<long long>(s.preemptions));
  return failed ? 1 : 0;
}

int usage(const std::string& why) {
  std::fprintf(stderr,
               "shardgraph: generate: %s. usage: generate DIR [--prompt TEXT] [--prompts-file F] "
               "[--prompt-ids 1,2,3] [--print-ids] [--mesh tp=2] [--max-new-tokens N] [--temperature T] "
               "[--top-p P] [--top-k K] [--repetition-penalty R] [--seed S] [--ignore-eos] "
               "[--kv-memory 256MiB] [--dtype f32|f64|bf16] [--image FILE] [--max-memory cuda:0=20GiB,cpu=64GiB] "
               "[--placement auto|balanced|sequential]\n",
               why.c_str());
  return 2;
}

// Reads the arguments into `o`: none when generation should run, else the exit status (help,
// usage errors).
std::optional<int> parse_arguments(const std::vector<std::string_view>& args, options& o) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf("see the comment at the top of examples/generate/main.cpp for every option\n");
      return 0;
    }
    if (a == "--print-ids" || a == "--ignore-eos") {
      (a == "--print-ids" ? o.print_ids : o.params.ignore_eos) = true;
    } else if (!a.starts_with("--")) {
      if (!o.directory.empty()) return usage("two checkpoint directories given");
      o.directory = a;
    } else if (i + 1 == args.size()) {
      return usage("missing value after " + std::string(a));
    } else {
      const std::string v(args[++i]);
      try {
        if (!apply(o, a, v)) return usage("unknown option " + std::string(a));
      } catch (const std::logic_error&) {  // std::stoll and friends
        return usage("cannot read the value '" + v + "' of " + std::string(a));
      }
    }
  }
  if (o.directory.empty()) return usage("no checkpoint directory given");
  if (o.prompts.empty()) return usage("no prompt given (--prompt, --prompts-file or --prompt-ids)");
  if (o.params.max_new_tokens <= 0) return usage("--max-new-tokens must be positive");
  gen::check_sampling(o.params.sampling, "generate");
  return std::nullopt;
}

// The whole command: arguments, then generation; the exit status (see examples/generate/main.cpp).
template <class MakeLlm>
int generate_main(int argc, char** argv, const std::vector<std::int64_t>& gpu_totals, const MakeLlm& make_llm) {
  options o;
  try {
    if (const std::optional<int> status = parse_arguments({argv + 1, argv + argc}, o)) return *status;
  } catch (const sg::error& e) {  // a value the library refuses: a mesh, a budget, a sampling parameter
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  try {
    return generate(o, gpu_totals, make_llm);
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

}  // namespace generate_cli

