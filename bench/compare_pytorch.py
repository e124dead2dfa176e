#!/usr/bin/env python3
"""The PyTorch peer of bench/train_gpt2: GPT-2 training steps on one GPU, timed the same way.

Builds GPT-2 in plain PyTorch (nanoGPT-style: pre-LN, learned position embedding, token embedding
tied to the LM head, GPT-2's vocabulary padded to 50304, layer norm eps 1e-5,
GELU tanh, biases on every linear of the blocks, attention through
F.scaled_dot_product_attention(is_causal=True), no dropout) and trains it with the standard fast
recipe: fp32 master parameters, forward and loss under torch.autocast(bfloat16), fused AdamW
(lr 3e-4, betas (0.9, 0.95), weight decay 0.1), TF32 allowed. The batch is random tokens made
once on the GPU before timing. Mode "eager" runs the module as is, "compile" wraps it with
torch.compile.

For each model and mode: --warmup untimed steps, then --steps steps each timed with CUDA events
around the whole step (forward, backward, optimizer step, zero_grad). Reported: the median and
minimum step time, tokens/s = batch * seq / median step time, MFU, peak memory allocated and
reserved (reset before the warmup), the parameter count and the first and last loss. One line
per configuration on stdout:

    RESULT {"impl": "pytorch-eager", "model": "124M", "batch": 16, "seq": 1024, ...}

With --shardgraph, the shardgraph binary runs for each model with the same shapes,

    PATH --model M --batch B --seq T --steps S --warmup W <--shardgraph-args, split by shlex>

its output is passed through as it runs, its own `RESULT {...}` line is read, and after all runs a
summary table and one line per model and PyTorch mode are printed:

    RATIO {"model": "124M", "vs": "pytorch-eager", "tokens_per_s_ratio": ..., ...}

(shardgraph's tokens/s over PyTorch's: above 1 means shardgraph is faster; peak allocated memory
shardgraph over PyTorch: below 1 means shardgraph needs less).

    python3 bench/compare_pytorch.py [--model 124M|350M|both] [--batch 16] [--seq 1024]
        [--steps 20] [--warmup 5] [--modes eager,compile]
        [--shardgraph build/bench/train_gpt2] [--shardgraph-args "..."]

MFU, with nanoGPT's estimate of the training flops per token:

    flops_per_token = 6 * N + 12 * L * H * Q * T
    MFU = flops_per_token * tokens_per_s / 989.4e12

where N is the parameter count without the position embedding wpe (the tied wte counted once),
L the layers, H the heads, Q the head dimension, T the sequence length, and 989.4e12 the dense
bf16 peak of an H200 (flop/s).

Progress goes to stderr. Exit status 1 if any configuration failed (a PyTorch mode that raised,
a shardgraph run that exited non-zero or printed no RESULT line), 0 otherwise.
"""
import argparse
import gc
import json
import math
import shlex
import statistics
import subprocess
import sys
import time

VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 128 (as llm.c and nanoGPT train it), as bench/train_gpt2
POSITIONS = 1024
LAYER_NORM_EPS = 1e-5
H200_BF16_PEAK_FLOPS = 989.4e12  # dense, no sparsity

MODELS = {
    "124M": {"layers": 12, "model": 768, "heads": 12},
    "350M": {"layers": 24, "model": 1024, "heads": 16},
}
MODES = ("eager", "compile")


def flops_per_token(n_params, layers, heads, head_dim, seq):
    """nanoGPT's training flops per token: 6 N for the weights (forward 2 N, backward 4 N) plus
    12 L H Q T for the attention scores and their weighting of the values."""
    return 6 * n_params + 12 * layers * heads * head_dim * seq


def model_flops_utilization(flops_per_tok, tokens_per_s, peak_flops=H200_BF16_PEAK_FLOPS):
    return flops_per_tok * tokens_per_s / peak_flops


def log(message):
    print(f"[compare_pytorch] {message}", file=sys.stderr, flush=True)


def result_line(record):
    print("RESULT " + json.dumps(record), flush=True)


def gpt2_class():
    """The GPT-2 module, defined here so that the script (and --help) loads without PyTorch."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class CausalSelfAttention(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.c_attn = nn.Linear(d, 3 * d)  # q, k, v in one product: the fastest layout here
            self.c_proj = nn.Linear(d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.c_attn(x).split(d, dim=2)
            # (b, t, d) -> (b, heads, t, head_dim), the layout scaled_dot_product_attention expects
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))

    class MLP(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.c_fc = nn.Linear(d, 4 * d)
            self.c_proj = nn.Linear(4 * d, d)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
            self.attn = CausalSelfAttention(d, heads)
            self.ln_2 = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
            self.mlp = MLP(d)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT2(nn.Module):
        def __init__(self, layers, d, heads):
            super().__init__()
            self.wte = nn.Embedding(VOCAB, d)
            self.wpe = nn.Embedding(POSITIONS, d)
            self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
            self.apply(self._init_weights)

        @staticmethod
        def _init_weights(module):
            # The values do not matter for speed; these are GPT-2's (without the scaled c_proj).
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

        def forward(self, ids, targets):
            positions = torch.arange(ids.size(1), device=ids.device)
            x = self.wte(ids) + self.wpe(positions)
            for block in self.h:
                x = block(x)
            # The LM head is the token embedding itself (tied, no bias), as in GPT-2.
            logits = F.linear(self.ln_f(x), self.wte.weight)
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return GPT2


def run_pytorch(torch, model_name, mode, args):
    """Trains one configuration and returns its RESULT record. Raises on failure."""
    shape = MODELS[model_name]
    layers, d, heads = shape["layers"], shape["model"], shape["heads"]
    impl = f"pytorch-{mode}"
    device = torch.device("cuda")

    torch.manual_seed(0)
    model = gpt2_class()(layers, d, heads).to(device)
    # parameters() yields a shared tensor once, so the tied wte/LM head counts once here.
    params = sum(p.numel() for p in model.parameters())
    params_for_flops = params - model.wpe.weight.numel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  fused=True)
    step_model = torch.compile(model) if mode == "compile" else model
    ids = torch.randint(0, VOCAB, (args.batch, args.seq), device=device)
    targets = torch.randint(0, VOCAB, (args.batch, args.seq), device=device)

    def train_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(ids, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()

    # The first step builds the fused optimizer state and, in compile mode, compiles: time it apart.
    what = "compiling (first step)" if mode == "compile" else "first step"
    log(f"{model_name} {impl}: {what} ...")
    start = time.perf_counter()
    losses = [train_step()]
    torch.cuda.synchronize()
    first_step_s = time.perf_counter() - start
    log(f"{model_name} {impl}: first step {first_step_s:.1f} s; {max(args.warmup - 1, 0)} more warmup, "
        f"then {args.steps} timed steps")
    for _ in range(args.warmup - 1):
        losses.append(train_step())

    # Events are recorded on the stream with no host synchronization between steps, so the host
    # runs ahead as in real training and each interval is the GPU's time for one whole step.
    events = []
    for _ in range(args.steps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        losses.append(train_step())
        end.record()
        events.append((begin, end))
    torch.cuda.synchronize()
    step_ms = [begin.elapsed_time(end) for begin, end in events]

    peak_allocated = torch.cuda.max_memory_allocated()
    peak_reserved = torch.cuda.max_memory_reserved()
    loss_values = [loss.item() for loss in losses]
    if not all(math.isfinite(v) for v in loss_values):
        raise RuntimeError(f"non-finite loss: {loss_values}")

    median_ms = statistics.median(step_ms)
    tokens_per_s = args.batch * args.seq / (median_ms / 1e3)
    flops_tok = flops_per_token(params_for_flops, layers, heads, d // heads, args.seq)
    record = {
        "impl": impl, "model": model_name, "batch": args.batch, "seq": args.seq,
        "steps": args.steps, "warmup": args.warmup,
        "step_ms_median": round(median_ms, 3), "step_ms_min": round(min(step_ms), 3),
        "tokens_per_s": round(tokens_per_s, 1),
        "mfu": round(model_flops_utilization(flops_tok, tokens_per_s), 4),
        "peak_allocated_gib": round(peak_allocated / 2**30, 3),
        "peak_reserved_gib": round(peak_reserved / 2**30, 3),
        "params": params, "params_for_flops": params_for_flops, "flops_per_token": flops_tok,
        "loss_first": round(loss_values[0], 4), "loss_last": round(loss_values[-1], 4),
        "first_step_s": round(first_step_s, 2),
        "torch": torch.__version__, "device": torch.cuda.get_device_name(device),
    }
    del step_model, model, optimizer, ids, targets, losses, events
    return record


def free_gpu(torch):
    """Drops what one configuration left behind so that the next one starts from an empty GPU."""
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()  # compiled graphs hold references to the old module's parameters
    gc.collect()
    torch.cuda.empty_cache()


def run_shardgraph(binary, model_name, args):
    """Runs the shardgraph binary with the same shapes, passing its output through as it comes.
    Returns (record or None, error message or None)."""
    command = [binary, "--model", model_name, "--batch", str(args.batch), "--seq", str(args.seq),
               "--steps", str(args.steps), "--warmup", str(args.warmup)]
    command += shlex.split(args.shardgraph_args)
    log(f"{model_name} shardgraph: {shlex.join(command)}")
    record, bad_line = None, None
    try:
        # stderr joins stdout so that the two keep their order in our stdout.
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   bufsize=1, errors="replace")
    except OSError as error:
        return None, f"could not start {binary}: {error}"
    with process:
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if line.startswith("RESULT "):
                try:
                    record = json.loads(line[len("RESULT "):])
                except json.JSONDecodeError as error:
                    bad_line = f"unreadable RESULT line ({error})"
    status = process.returncode
    if status != 0:
        how = f"signal {-status}" if status < 0 else f"status {status}"
        return None, f"shardgraph exited with {how}"
    if record is None:
        return None, bad_line or "shardgraph printed no RESULT line"
    missing = [k for k in ("tokens_per_s", "step_ms_median", "peak_allocated_gib") if k not in record]
    if missing:
        return None, f"shardgraph's RESULT line lacks {', '.join(missing)}"
    if record.get("model", model_name) != model_name:
        log(f"warning: shardgraph reports model {record.get('model')!r}, asked for {model_name}")
    return record, None


def fmt(value, digits):
    return "-" if value is None else f"{value:.{digits}f}"


def print_summary(results):
    """A table of every configuration that produced figures, grouped by model."""
    header = f"{'model':<6} {'impl':<16} {'step ms':>9} {'tokens/s':>11} {'MFU':>7} " \
             f"{'alloc GiB':>10} {'resv GiB':>9}"
    print("\nSUMMARY", flush=True)
    print(header)
    print("-" * len(header))
    for record in results:
        if "error" in record:
            print(f"{record['model']:<6} {record['impl']:<16} failed: {record['error'][:70]}")
            continue
        print(f"{record['model']:<6} {record['impl']:<16} {fmt(record.get('step_ms_median'), 2):>9} "
              f"{fmt(record.get('tokens_per_s'), 0):>11} {fmt(record.get('mfu'), 4):>7} "
              f"{fmt(record.get('peak_allocated_gib'), 2):>10} {fmt(record.get('peak_reserved_gib'), 2):>9}")
    sys.stdout.flush()


def print_ratios(results, model_names, modes):
    for model_name in model_names:
        ours = [r for r in results if r["model"] == model_name and r["impl"] == "shardgraph"]
        if not ours or "error" in ours[0]:
            continue
        for mode in modes:
            peers = [r for r in results if r["model"] == model_name and r["impl"] == f"pytorch-{mode}"]
            if not peers or "error" in peers[0]:
                continue
            ratio = {"model": model_name, "vs": f"pytorch-{mode}",
                     "tokens_per_s_ratio": round(ours[0]["tokens_per_s"] / peers[0]["tokens_per_s"], 3),
                     "step_ms_ratio": round(ours[0]["step_ms_median"] / peers[0]["step_ms_median"], 3),
                     "peak_allocated_ratio":
                         round(ours[0]["peak_allocated_gib"] / peers[0]["peak_allocated_gib"], 3)}
            print("RATIO " + json.dumps(ratio), flush=True)


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="MFU = (6*N + 12*L*H*Q*T) * tokens_per_s / 989.4e12 (N: parameters without wpe).")
    parser.add_argument("--model", choices=["124M", "350M", "both"], default="124M")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=1024, help=f"at most {POSITIONS}")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before the timed ones")
    parser.add_argument("--modes", default="eager,compile", help="comma-separated: eager, compile")
    parser.add_argument("--shardgraph", metavar="PATH", help="the shardgraph bench/train_gpt2 binary")
    parser.add_argument("--shardgraph-args", default="", metavar="ARGS",
                        help="extra arguments for the binary, one string split by shlex "
                             "(write --shardgraph-args=--flag for a single flag)")
    args = parser.parse_args()
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    if not 1 <= args.seq <= POSITIONS:
        parser.error(f"--seq must be in 1..{POSITIONS} (the position embedding has {POSITIONS} rows)")
    if args.batch < 1 or args.steps < 1 or args.warmup < 1:
        # One warmup step at least: the first step compiles and allocates the optimizer state.
        parser.error("--batch, --steps and --warmup must be at least 1")
    return args


def main():
    args = parse_args()
    try:
        import torch  # after parsing, so that --help works where PyTorch is not installed
    except ImportError as error:
        sys.exit(f"compare_pytorch: PyTorch is needed to run ({error})")

    if not torch.cuda.is_available():
        sys.exit("compare_pytorch: no CUDA device visible to PyTorch")
    # Autocast runs the matmuls in bf16; TF32 covers whatever stays in fp32.
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    model_names = ["124M", "350M"] if args.model == "both" else [args.model]
    results, failed = [], False
    for model_name in model_names:
        for mode in args.modes:
            impl = f"pytorch-{mode}"
            log(f"{model_name} {impl}: batch {args.batch}, seq {args.seq}, "
                f"{args.warmup} warmup + {args.steps} timed steps")
            try:
                record = run_pytorch(torch, model_name, mode, args)
            except Exception as error:  # compile and out-of-memory failures: report, go on
                message = f"{type(error).__name__}: {error}".strip()
                record = {"impl": impl, "model": model_name, "batch": args.batch, "seq": args.seq,
                          "error": message[:2000], "torch": torch.__version__}
                log(f"{model_name} {impl}: FAILED: {message.splitlines()[0]}")
                failed = True
            result_line(record)
            results.append(record)
            free_gpu(torch)
        if args.shardgraph:
            record, error = run_shardgraph(args.shardgraph, model_name, args)
            if error:
                print(f"SHARDGRAPH FAILED ({model_name}): {error}", flush=True)
                log(f"{model_name} shardgraph: FAILED: {error}")
                record = {"impl": "shardgraph", "model": model_name, "error": error}
                failed = True
            else:
                record = dict(record, impl="shardgraph", model=model_name)
            results.append(record)

    print_summary(results)
    if args.shardgraph:
        print_ratios(results, model_names, args.modes)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
