#!/usr/bin/env python3
"""The PyTorch peer of bench/gemm_cuda: the same GPT-2 124M linear layers (M = 16384 rows, bf16)
timed with CUDA events, median of --repeat runs: torch.matmul alone, F.linear with the bias, and
for c_fc F.linear then GELU (tanh), as eager PyTorch runs them. Then the backward's products as
autograd makes them: the input gradient dy @ w (for mlp.c_proj also with GELU's gradient after it,
c_fc's), and the weight gradient dy^T @ x (with the bias gradient dy.sum(0) after it). One JSON
line per measurement.

    python3 bench/gemm_pytorch.py [--repeat 50] [--rows 16384]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--repeat", type=int, default=50)
p.add_argument("--rows", type=int, default=16384)
a = p.parse_args()

layers = [("attn.c_attn (qkv)", 768, 2304, "bias"), ("attn.c_proj", 768, 768, "bias"),
          ("mlp.c_fc + gelu", 768, 3072, "bias+gelu"), ("mlp.c_proj", 3072, 768, "bias"),
          ("lm_head", 768, 50304, "none")]
torch.backends.cuda.matmul.allow_tf32 = False


def median_ms(fn):
    for _ in range(5):
        fn()
    times = []
    for _ in range(a.repeat):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


for name, k, n, post in layers:
    x = torch.full((a.rows, k), 0.01, dtype=torch.bfloat16, device="cuda")
    w = torch.full((n, k), 0.01, dtype=torch.bfloat16, device="cuda")  # torch's (out, in) weight
    b = torch.zeros(n, dtype=torch.bfloat16, device="cuda")
    flop = 2.0 * a.rows * k * n
    runs = [("none", lambda: torch.matmul(x, w.t()))]
    if post == "bias":
        runs.append(("bias", lambda: F.linear(x, w, b)))
    if post == "bias+gelu":
        runs.append(("bias+gelu", lambda: F.gelu(F.linear(x, w, b), approximate="tanh")))
    for epilogue, fn in runs:
        ms = median_ms(fn)
        print(json.dumps({"bench": "gemm_pytorch", "layer": name, "m": a.rows, "k": k, "n": n, "type": "bf16",
                          "epilogue": epilogue, "median_ms": round(ms, 4), "tflops": round(flop / (ms * 1e-3) / 1e12, 1),
                          "torch": torch.__version__}), flush=True)

for name, k, n, post in layers:
    x = torch.full((a.rows, k), 0.01, dtype=torch.bfloat16, device="cuda")
    w = torch.full((n, k), 0.01, dtype=torch.bfloat16, device="cuda")
    dy = torch.full((a.rows, n), 0.01, dtype=torch.bfloat16, device="cuda")
    flop = 2.0 * a.rows * k * n
    runs = [("input gradient", "none", lambda: torch.matmul(dy, w))]
    if post == "bias" and k > n:  # mlp.c_proj: c_fc's dy is GELU's gradient of this one
        runs.append(("input gradient", "gelu gradient",
                     lambda: torch.ops.aten.gelu_backward(torch.matmul(dy, w), x, approximate="tanh")))
    runs.append(("weight gradient", "none", lambda: torch.matmul(dy.t(), x)))
    if post != "none":
        runs.append(("weight gradient", "bias gradient", lambda: (torch.matmul(dy.t(), x), dy.sum(0))))
    for product, epilogue, fn in runs:
        ms = median_ms(fn)
        print(json.dumps({"bench": "gemm_pytorch", "layer": name, "product": product, "m": a.rows, "k": k, "n": n,
                          "type": "bf16", "epilogue": epilogue, "median_ms": round(ms, 4),
                          "tflops": round(flop / (ms * 1e-3) / 1e12, 1), "torch": torch.__version__}), flush=True)
