#!/usr/bin/env python3
"""Load time of HF checkpoints onto one GPU, or into host memory: shardgraph's bench/load_hf against
HF transformers' from_pretrained, on the same files in the same run, and the logits of both for the
same ids.

    python3 bench/load_hf/compare_hf.py --binary build-gpu/bench/load_hf --repeat 3 \
        --meshes tp=1,tp=4 DIR [DIR ...]
    python3 bench/load_hf/compare_hf.py --device cpu --binary build/bench/load_hf_cpu --repeat 3 \
        --meshes tp=1,tp=4 DIR [DIR ...]

For each checkpoint directory: the shardgraph bench under each mesh (tp=4: four thread ranks
sharing the GPU, or the host, each reading its quarter), one process per load, then
from_pretrained(dtype=bfloat16, device_map=DEVICE) in this process, timed after torch (and CUDA)
are initialised, to the last weight on the device. --device cuda (the default) loads onto the GPU
with --binary load_hf (main.cu); --device cpu loads into host memory with --binary load_hf_cpu
(main_cpu.cpp). Both sides compute the logits on that device. One loader runs at a time, so the
machine needs room for one copy of the weights.

--cold empties the page cache before every load (root only), else the files are read warm. Prints
one JSON line per measurement, a table of medians, RATIO lines (from_pretrained's time over
shardgraph's), and the largest logit difference between the two, relative to the largest logit
(bf16 weights). from_pretrained has two rows: its load alone, and its load followed by reading
every page of every weight once. On the CPU its safetensors weights stay in the mapped files until
first read, so only the second holds every weight in memory, as shardgraph's load does; on a GPU
the two are the same. The table's memory column is what the loaded weights take where they go:
shardgraph's device_gib (all ranks; on the CPU, the growth of the process's anonymous resident
memory) and, for from_pretrained, the growth of torch.cuda.memory_allocated() (cuda) or of this
process's anonymous resident memory (cpu), where weights left in the mapped files count as 0.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def drop_page_cache():
    """Empties the page cache, so the next load reads the disk (root only). True if it did."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def anonymous_resident_bytes():
    """This process's anonymous resident memory (RssAnon of /proc/self/status); 0 off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def shardgraph_runs(binary, directory, mesh, repeat, logits, cold):
    runs = []
    for attempt in range(repeat):  # one process per load, so that a cold run reads the disk
        command = [binary, directory, "--mesh", mesh]
        if logits and attempt == 0:
            command += ["--logits", logits]
        if cold:
            drop_page_cache()
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"shardgraph: compare_hf.py: {' '.join(command)} failed:\n{done.stderr}\n"
                     "check that --binary is the bench for --device (load_hf for cuda, load_hf_cpu for cpu)")
        for line in done.stdout.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                r["attempt"], r["cold"] = attempt, cold
                print(json.dumps(r), flush=True)
                runs.append(r)
    return runs


def read_every_page(model):
    """Reads one element in every 4 KiB of every parameter and buffer of `model`, and returns the
    seconds it took. On the CPU, from_pretrained leaves safetensors weights in the mapped files and the
    pages are read at first use: this is that first use, so that load + this is every weight resident,
    as shardgraph's load leaves it. On a GPU the weights are already there and this takes milliseconds."""
    import itertools
    import torch

    start = time.perf_counter()
    with torch.no_grad():
        for t in itertools.chain(model.parameters(), model.buffers()):
            flat = t.detach().reshape(-1)  # (numel,): a view of the contiguous weight
            flat[::max(1, 4096 // flat.element_size())].float().sum().item()
    return time.perf_counter() - start


def hf_runs(directory, repeat, ids, cold, device):
    """from_pretrained onto `device` ("cuda" or "cpu"), `repeat` times. Returns the load times (s), the
    times of read_every_page after each load (s), the memory each load took (GiB), and the F32 logits
    (1, T, vocab) of `ids` from the first load."""
    import torch
    from transformers import AutoModelForCausalLM

    cuda = device == "cuda"
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    in_use = torch.cuda.memory_allocated if cuda else anonymous_resident_bytes
    if cuda:
        torch.zeros(1, device="cuda")  # CUDA initialised before the clock starts
    times, paging, memory, logits = [], [], [], None
    for attempt in range(repeat):
        if cold:
            drop_page_cache()
        synchronize()
        before = in_use()
        start = time.perf_counter()
        try:
            model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16, device_map=device)
        except TypeError:  # transformers before 4.56 names it torch_dtype
            model = AutoModelForCausalLM.from_pretrained(directory, torch_dtype=torch.bfloat16, device_map=device)
        synchronize()
        seconds = time.perf_counter() - start
        gib = max(in_use() - before, 0) / 2**30
        page_in = read_every_page(model)
        times.append(seconds)
        paging.append(page_in)
        memory.append(gib)
        print(json.dumps({"bench": "from_pretrained", "device": device, "model": directory, "attempt": attempt,
                          "cold": cold, "load_s": round(seconds, 3), "page_in_s": round(page_in, 3),
                          "device_gib": round(gib, 2)}), flush=True)
        if logits is None:
            with torch.no_grad():
                logits = model(torch.tensor([ids], device=device)).logits.float().cpu()
        del model
        if cuda:
            torch.cuda.empty_cache()
    return times, paging, memory, logits


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directories", nargs="+")
    parser.add_argument("--binary", required=True,
                        help="the shardgraph bench: load_hf for --device cuda, load_hf_cpu for --device cpu")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="where both loaders put the weights and run the model (default cuda)")
    parser.add_argument("--meshes", default="tp=1")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cold", action="store_true",
                        help="empty the page cache before every load (root), so each reads the disk")
    args = parser.parse_args()
    if args.cold and not drop_page_cache():
        sys.exit("shardgraph: compare_hf.py: --cold: cannot write /proc/sys/vm/drop_caches. run as root, "
                 "or leave --cold out (warm page cache)")
    ids = [1, 450, 4996, 17354, 1701, 432, 17204, 975]  # the bench's default ids

    import torch
    from safetensors.torch import load_file

    rows = []
    for directory in args.directories:
        vocab = json.load(open(os.path.join(directory, "config.json")))["vocab_size"]
        ids_here = [i % vocab for i in ids]
        with tempfile.TemporaryDirectory() as scratch:
            logits_file = os.path.join(scratch, "logits.safetensors")
            ours = {}
            for k, mesh in enumerate(args.meshes.split(",")):
                runs = shardgraph_runs(args.binary, directory, mesh, args.repeat, logits_file if k == 0 else None,
                                       args.cold)
                ours[mesh] = runs
            theirs, their_paging, their_memory, hf_logits = hf_runs(directory, args.repeat, ids_here, args.cold, args.device)
            sg_logits = load_file(logits_file)["logits"]
        difference = ((sg_logits - hf_logits).abs().max() / hf_logits.abs().max()).item()
        same_top = (sg_logits.argmax(-1) == hf_logits.argmax(-1)).float().mean().item()
        hf_median = statistics.median(theirs)
        hf_resident = statistics.median(t + p for t, p in zip(theirs, their_paging))
        name = os.path.basename(os.path.normpath(directory))
        for mesh, runs in ours.items():
            median = statistics.median(r["load_s"] for r in runs)
            rows.append((name, f"shardgraph {mesh}", median, runs[0]["file_gb"], runs[0]["read_gb_per_rank"],
                         statistics.median(r["device_gib"] for r in runs)))
            print(f"RATIO {name} {mesh}: from_pretrained / shardgraph load time = {hf_median / median:.2f}x; "
                  f"with every page read = {hf_resident / median:.2f}x")
        file_gb = ours[next(iter(ours))][0]["file_gb"]
        rows.append((name, "from_pretrained", hf_median, file_gb, None, statistics.median(their_memory)))
        rows.append((name, "from_pretrained, then every page read", hf_resident, file_gb, None,
                     statistics.median(their_memory)))
        print(f"LOGITS {name}: largest difference {difference:.3g} of the largest logit; "
              f"same top token at {same_top * 100:.0f} % of positions")

    print(f"\n| model | loader ({args.device}) | load s (median) | file GB | GB read per rank | memory GiB |")
    print("|---|---|---|---|---|---|")
    for name, who, seconds, file_gb, per_rank, gib in rows:
        read = ", ".join(f"{b:.2f}" for b in per_rank) if per_rank else "all"
        print(f"| {name} | {who} | {seconds:.2f} | {file_gb:.2f} | {read} | {gib:.2f} |")


if __name__ == "__main__":
    main()
