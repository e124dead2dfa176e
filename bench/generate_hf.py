#!/usr/bin/env python3
"""The HF peer of bench/generate_cpu: greedy generate() on the CPU, f32, on the same checkpoint.

    python3 bench/generate_hf.py DIR [--batch 1,8] [--prompt 32] [--new-tokens 64] [--threads 1,2] [--repeat 3]

Loads DIR with from_pretrained (float32, eval, transformers' default attention) and, for each
thread count (torch.set_num_threads) and batch, times generate(do_sample=False) on `batch` prompts
of `prompt` tokens (the ids bench/generate_cpu feeds; no padding, no stop token):
  prefill_s  generate(max_new_tokens=1): the prompts' forward and the first token
  total_s    generate(max_new_tokens=new, min_new_tokens=new)
  decode_s   total_s - prefill_s: the other new - 1 tokens of each sequence
each the median of `repeat` runs after one warm-up. Prints one JSON line per configuration, with
the tokens/s figures bench/generate_cpu prints.
"""
import argparse
import json
import statistics
import time

import torch
import transformers
from transformers import AutoModelForCausalLM


def prompts(batch, length, vocab):
    """The ids bench/generate_cpu submits: row b, position t -> (b 7919 + t 2654435761) mod vocab."""
    return torch.tensor([[(b * 7919 + t * 2654435761) % vocab for t in range(length)] for b in range(batch)])


def timed(model, ids, new_tokens):
    start = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, eos_token_id=None, pad_token_id=0)
    return time.perf_counter() - start, out[:, ids.shape[1]:]


def bench(model, batch, args):
    ids = prompts(batch, args.prompt, model.config.vocab_size)
    with torch.no_grad():
        timed(model, ids, 2)  # warm-up
        prefill = statistics.median(timed(model, ids, 1)[0] for _ in range(args.repeat))
        runs = [timed(model, ids, args.new_tokens) for _ in range(args.repeat)]
    total = statistics.median(t for t, _ in runs)
    generated = runs[0][1]
    assert generated.shape == (batch, args.new_tokens), generated.shape
    decode = total - prefill
    return {"bench": "generate_hf", "peer": "transformers", "torch": torch.__version__,
            "transformers": transformers.__version__, "dtype": "f32", "threads": torch.get_num_threads(),
            "attention": model.config._attn_implementation, "batch": batch, "prompt": args.prompt,
            "new_tokens": args.new_tokens, "repeat": args.repeat, "prefill_s": round(prefill, 4),
            "decode_s": round(decode, 4), "total_s": round(total, 4),
            "prefill_tokens_per_s": round(batch * args.prompt / prefill, 1),
            "decode_tokens_per_s": round(batch * (args.new_tokens - 1) / decode, 1),
            "end_to_end_tokens_per_s": round(batch * args.new_tokens / total, 1),
            "first_ids": generated[0, :8].tolist()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(args.dir, dtype=torch.float32).eval()
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for batch in (int(b) for b in args.batch.split(",")):
            print(json.dumps(bench(model, batch, args)), flush=True)


if __name__ == "__main__":
    main()
