// generate: generates text from a Hugging Face GPT-2 or LLaMA checkpoint directory on thread ranks
// (tensor parallel, data-parallel replicas), with a paged KV cache and continuous batching.
//
//   generate DIR [--prompt "..."]... [--prompts-file F] [--prompt-ids 1,2,3]... [--print-ids]
//            [--mesh tp=2] [--max-new-tokens N] [--temperature T] [--top-p P] [--top-k K]
//            [--repetition-penalty R] [--seed S] [--ignore-eos] [--kv-memory 256MiB]
//            [--dtype f32|f64|bf16] [--image FILE] [--max-memory cuda:0=20GiB,cpu=64GiB]
//            [--placement auto|balanced|sequential]
//
//   DIR               a save_pretrained directory (config.json, model.safetensors); its
//                     tokenizer.json, when present, encodes text prompts and decodes the output
//   --prompt TEXT     a text prompt (repeatable); needs DIR/tokenizer.json
//   --prompts-file F  one text prompt per line (empty lines skipped)
//   --prompt-ids IDS  a prompt of token ids, e.g. 1,450,7483 (repeatable; no tokenizer needed)
//   --print-ids       after generating, one line per prompt: "ids: " and its generated ids
//   --mesh            dp, tp and pp ranks (default tp=1): dp replicas share the prompts
//   --max-new-tokens  tokens to generate per prompt (default 32)
//   --temperature ... sampling (default greedy); --seed seeds every prompt's draws alike
//   --ignore-eos      go on past the checkpoint's eos token
//   --kv-memory       the KV cache of each rank: bytes (256MiB, 4GiB), or a share of the free
//                     memory divided among the ranks of the process (50%, the default)
//   --image FILE      a LLaVA checkpoint continues the one prompt after this image (PNG, JPEG, ...),
//                     preprocessed as DIR/preprocessor_config.json says; tp ranks only
//   --max-memory      device_map="auto": each device's budget; the layers go onto the devices in
//                     order as HF Accelerate places them, the map is printed per layer, and its
//                     devices run as pipeline stages (this build: cpu=... only; main.cu's build runs
//                     cuda:N stages on GPU N and the cpu's on the cpu backend)
//   --placement       Accelerate's strategy: auto (balanced), balanced or sequential
//
// Output: the checkpoint line and the kv cache line; with one prompt, its text streamed as the
// tokens come (its ids, without a tokenizer); with several, each prompt's text at the end as
// "[i] text", in the prompts' order; then the ids lines (--print-ids), and the prefill and decode
// tokens/s. A prompt that fails prints "[i] shardgraph: ..." on stderr and the others go on.
// Exit status: 0, 1 when a prompt or the run failed, 2 for a usage error.
#include <cstdint>
#include <vector>

#include <shardgraph/cpu.hpp>

#include "generate_cli.hpp"

int main(int argc, char** argv) {
  using cpu_llm = gen::llm<sg::cpu::backend, sg::threads::world>;
  return generate_cli::generate_main(argc, argv, {}, [](const generate_cli::options& o, const device_placement&) {
    return cpu_llm(o.directory, o.llm, sg::text::open_tokenizer_codec(o.directory));
  });
}
