#!/usr/bin/env python3
"""The PyTorch peer of bench/attention_cuda: causal scaled_dot_product_attention in bf16, head_dim 64,
on GPT-2 124M's and 350M's shapes at B=16, T=1024, timed with CUDA events (median of --repeat runs):
the forward, and the backward as (forward + backward) - forward. One JSON line per shape, with
the backend torch picked. FLOPs counted as bench/attention_cuda counts them.

    python3 bench/attention_pytorch.py [--repeat 20]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--repeat", type=int, default=20)
a = p.parse_args()


def median_ms(fn):
    for _ in range(3):
        fn()
    times = []
    for _ in range(a.repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


for model, batch, heads, seq in [("124M", 16, 12, 1024), ("350M", 16, 16, 1024)]:
    d = 64
    q, k, v = (torch.empty(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16).uniform_(-1.5, 1.5)
               .requires_grad_() for _ in range(3))
    dout = torch.empty_like(q).uniform_(-1.5, 1.5)

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward_backward():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(dout)

    forward_ms = median_ms(forward)
    both_ms = median_ms(forward_backward)
    backward_ms = both_ms - forward_ms
    flop = 4.0 * batch * heads * seq * seq * d / 2
    print(json.dumps({"bench": "attention", "impl": "pytorch-sdpa", "model": model, "batch": batch,
                      "heads": heads, "seq": seq, "head_dim": d, "forward_ms": round(forward_ms, 4),
                      "forward_tflops": round(flop / forward_ms / 1e9, 1),
                      "backward_ms": round(backward_ms, 4),
                      "backward_tflops": round(2.5 * flop / backward_ms / 1e9, 1),
                      "torch": torch.__version__}), flush=True)
