#!/usr/bin/env python3
"""The PyTorch peer of bench/overlap_cpu, in the same run.

PyTorch DDP over gloo on `dp` CPU processes (one thread each) trains the same GPT-2 shape (HF
GPT2LMHeadModel, float32, AdamW, clipping at 1.0) with the same bucket size. Its buckets go
through a communication hook that first sleeps as long as the same simulated link would take
(bench/overlap_cpu/slow_link.hpp: latency + 2 (n-1)/n bytes / bandwidth per all-reduce), then
all-reduces:
  - overlap on: DDP's own design. The hook hands the bucket to one communication thread and
    returns a future that the thread completes; backward goes on meanwhile.
  - overlap off: the hook waits for the link and the all-reduce before it returns.
Then it runs bench/overlap_cpu (ZeRO stage 0 lines) with the same settings and prints one JSON line
per framework and setting, and the ratios.

    python3 bench/overlap_cpu/compare_pytorch.py --binary build/bench/overlap_cpu [--link-gbs 0.05]
"""
import argparse
import json
import os
import queue
import socket
import statistics
import subprocess
import threading
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from transformers import GPT2Config, GPT2LMHeadModel


class SlowLink:
    """One communication thread; every all-reduce first sleeps for the link's time."""

    def __init__(self, world, bytes_per_second, latency_s):
        self.world, self.bytes_per_second, self.latency_s = world, bytes_per_second, latency_s
        self.waited_s = 0.0
        self.jobs = queue.Queue()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            self.jobs.get()()

    def _reduce(self, buffer):
        seconds = self.latency_s + 2 * (self.world - 1) / self.world * buffer.numel() * buffer.element_size() \
            / self.bytes_per_second
        time.sleep(seconds)
        self.waited_s += seconds
        dist.all_reduce(buffer)
        return buffer.div_(self.world)

    def overlapped(self, state, bucket):
        future = torch.futures.Future()
        buffer = bucket.buffer()

        def job():
            try:
                future.set_result(self._reduce(buffer))
            except Exception as e:  # noqa: BLE001 - handed to DDP, which raises it in backward
                future.set_exception(e)

        self.jobs.put(job)
        return future

    def blocking(self, state, bucket):
        future = torch.futures.Future()
        future.set_result(self._reduce(bucket.buffer()))
        return future


def rank_main(rank, args, overlap, port, results):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.dp)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=2048, n_positions=args.seq, n_embd=args.model, n_layer=args.layers, n_head=4,
                        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).float().train()
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    link = SlowLink(args.dp, args.link_gbs * 1e9, args.latency_us * 1e-6)
    ddp.register_comm_hook(None, link.overlapped if overlap else link.blocking)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    rows = args.batch * args.dp
    ids = ((torch.arange(rows * args.seq, dtype=torch.int64) * 2654435761) % 2048).view(rows, args.seq)
    ids = ids[rank * args.batch:(rank + 1) * args.batch]

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits = ddp(input_ids=ids, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), ids.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        optimizer.step()

    step()  # warm-up
    times = []
    waited_before = link.waited_s
    for _ in range(args.steps):
        dist.barrier()
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    if rank == 0:
        results.put({"step_ms": times, "link_ms": (link.waited_s - waited_before) * 1e3 / args.steps})
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pytorch_run(args, overlap):
    context = mp.get_context("spawn")
    results = context.Queue()
    mp.spawn(rank_main, args=(args, overlap, free_port(), results), nprocs=args.dp, join=True)
    return results.get()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="build/bench/overlap_cpu")
    parser.add_argument("--dp", type=int, default=2)
    parser.add_argument("--link-gbs", type=float, default=0.05)
    parser.add_argument("--latency-us", type=int, default=20)
    parser.add_argument("--bucket-mb", type=float, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64)
    args = parser.parse_args()

    # PyTorch: off and on in turns, as the binary does.
    runs = {False: {"step_ms": [], "link_ms": 0.0}, True: {"step_ms": [], "link_ms": 0.0}}
    for _ in range(args.rounds):
        for overlap in (False, True):
            r = pytorch_run(args, overlap)
            runs[overlap]["step_ms"] += r["step_ms"]
            runs[overlap]["link_ms"] = r["link_ms"]
    torch_ms = {o: statistics.median(runs[o]["step_ms"]) for o in runs}
    for overlap in (False, True):
        print(json.dumps({"bench": "overlap_cpu", "peer": "pytorch-ddp", "torch": torch.__version__, "dp": args.dp,
                          "overlap": overlap, "step_ms": round(torch_ms[overlap], 1),
                          "link_ms": round(runs[overlap]["link_ms"], 1),
                          "hidden": round((torch_ms[False] - torch_ms[overlap]) / runs[False]["link_ms"], 2)}),
              flush=True)

    command = [args.binary, "--dp", str(args.dp), "--link-gbs", str(args.link_gbs), "--latency-us",
               str(args.latency_us), "--bucket-mb", str(args.bucket_mb), "--steps", str(args.steps), "--rounds",
               str(args.rounds), "--model", str(args.model), "--layers", str(args.layers), "--batch",
               str(args.batch), "--seq", str(args.seq)]
    ours = {}
    for line in subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines():
        r = json.loads(line)
        print(line, flush=True)
        if r["zero"] == 0:
            ours[r["overlap"]] = r
    for overlap in (False, True):
        print(json.dumps({"ratio": "pytorch step_ms / shardgraph step_ms (above 1: shardgraph faster)",
                          "overlap": overlap,
                          "value": round(torch_ms[overlap] / ours[overlap]["step_ms"], 2)}))


if __name__ == "__main__":
    main()
