#!/usr/bin/env python3
"""The PyTorch peer of bench/forward_cpu: GPT-2 124M forward on the CPU, same shapes, same run.

Runs HF transformers' GPT2LMHeadModel (float32, eval, eager attention, random weights) with
torch.set_num_threads(n) for each n given, then bench/forward_cpu with the matching layouts
(1 thread = one rank; n threads = tp=n thread ranks), and prints one JSON line per
configuration plus the ratios shardgraph / PyTorch (tokens/s, higher is better for shardgraph).

    python3 bench/forward_cpu/compare_pytorch.py --binary build/bench/forward_cpu [--threads 1,2]
"""
import argparse
import json
import statistics
import subprocess
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def pytorch_forward(batch, seq, threads, repeat):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=50304, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
                        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config).float().eval()
    ids = torch.randint(0, 50257, (batch, seq))
    times = []
    with torch.no_grad():
        for r in range(repeat + 1):
            start = time.perf_counter()
            logits = model(input_ids=ids, use_cache=False).logits
            loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), ids.view(-1))
            elapsed = time.perf_counter() - start
            if r > 0:
                times.append(elapsed)
    median = statistics.median(times)
    return {"bench": "forward_cpu", "peer": "pytorch", "torch": torch.__version__, "threads": threads,
            "batch": batch, "seq": seq, "median_s": round(median, 4), "min_s": round(min(times), 4),
            "tokens_per_s": round(batch * seq / median, 1), "loss": round(loss.item(), 6)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/bench/forward_cpu")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for n in [int(t) for t in args.threads.split(",")]:
        peer = pytorch_forward(args.batch, args.seq, n, args.repeat)
        print(json.dumps(peer), flush=True)
        layout = "1" if n == 1 else f"tp{n}"
        out = subprocess.run([args.binary, "--batch", str(args.batch), "--seq", str(args.seq),
                              "--repeat", str(args.repeat), "--layouts", layout],
                             check=True, capture_output=True, text=True).stdout
        ours = json.loads(out.strip().splitlines()[-1])
        print(json.dumps(ours), flush=True)
        print(json.dumps({"bench": "forward_cpu", "ratio": "shardgraph/pytorch tokens_per_s", "threads": n,
                          "layout": layout, "value": round(ours["tokens_per_s"] / peer["tokens_per_s"], 3)}),
              flush=True)


if __name__ == "__main__":
    main()
