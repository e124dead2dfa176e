#!/usr/bin/env python3
"""Greedy generation on the CPU: bench/generate_cpu against HF generate (bench/generate_hf.py),
on the same random-weight checkpoints, in one run; prints a table of tokens/s and the ratios.

    python3 bench/generate_cpu/compare.py --binary build/bench/generate_cpu [--models golden,124m]
        [--batch 1,8] [--prompt 32] [--new-tokens 64] [--repeat 3] [--work /tmp/shardgraph_generate]

The checkpoints are made here on first use, in --work (not committed): GPT-2 with transformers'
random initialisation (seed 0), saved as float32 safetensors by save_pretrained:
  golden  the widths of tests/golden/gpt2 (vocab 61, hidden 24, 2 layers, 12 heads), 128 positions
  124m    GPT-2 124M's sizes (vocab 50257, hidden 768, 12 layers, 12 heads, 1024 positions)
Layouts: one rank against torch on one thread, tp = 2 thread ranks against torch on two threads.
A ratio is shardgraph's tokens/s over HF's (above 1: shardgraph is faster). "ids" says whether
row 0's first 8 generated ids agree (both f32; a near-tie may part them).
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

MODELS = {
    "golden": dict(vocab_size=61, n_positions=128, n_embd=24, n_layer=2, n_head=12, bos_token_id=0, eos_token_id=0),
    "124m": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12),
}


def checkpoint(name, work):
    """The folder of model `name` in `work`, made if missing."""
    folder = work / f"gpt2_{name}"
    if not (folder / "model.safetensors").exists():
        torch.manual_seed(0)
        config = GPT2Config(activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                            **MODELS[name])
        GPT2LMHeadModel(config).float().eval().save_pretrained(folder)
    return folder


def json_lines(command, model):
    """The JSON lines `command` prints, each echoed with its model as it comes."""
    print("$ " + " ".join(command), file=sys.stderr, flush=True)
    lines = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        for line in process.stdout:
            if line.startswith("{"):
                lines.append(json.loads(line))
                print(json.dumps({"model": model, **lines[-1]}), flush=True)
    if process.returncode != 0:
        raise SystemExit(f"{command[0]} failed with exit status {process.returncode}")
    return lines


def table(rows):
    head = ("model", "batch", "ranks", "prefill tok/s sg / HF", "x", "decode tok/s sg / HF", "x",
            "end to end sg / HF", "x", "bind s", "ids")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for model, sg, hf in rows:
        cells = [model, sg["batch"], sg["ranks"]]
        for key in ("prefill_tokens_per_s", "decode_tokens_per_s", "end_to_end_tokens_per_s"):
            cells += [f"{sg[key]:,.0f} / {hf[key]:,.0f}", f"{sg[key] / hf[key]:.2f}"]
        cells += [f"{sg['bind_s']:.2f}", "same" if sg["first_ids"] == hf["first_ids"] else "differ"]
        print("| " + " | ".join(str(c) for c in cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--models", default="golden,124m")
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--prompt", default="32")
    parser.add_argument("--new-tokens", default="64")
    parser.add_argument("--repeat", default="3")
    parser.add_argument("--work", type=Path, default=Path("/tmp/shardgraph_generate"))
    args = parser.parse_args()
    peer = Path(__file__).resolve().parent.parent / "generate_hf.py"
    common = ["--batch", args.batch, "--prompt", args.prompt, "--new-tokens", args.new_tokens, "--repeat", args.repeat]
    rows = []
    for name in args.models.split(","):
        folder = str(checkpoint(name, args.work))
        ours = json_lines([args.binary, folder, "--layouts", "1,tp2"] + common, name)
        theirs = json_lines([sys.executable, str(peer), folder, "--threads", "1,2"] + common, name)
        for sg in ours:
            hf = next(h for h in theirs if h["threads"] == sg["ranks"] and h["batch"] == sg["batch"])
            rows.append((name, sg, hf))
    table(rows)


if __name__ == "__main__":
    main()
