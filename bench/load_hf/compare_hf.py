#!/usr/bin/env python3
"""Load time of HF checkpoints onto one GPU: shardgraph's bench/load_hf against HF transformers'
from_pretrained, on the same files in the same run, and the logits of both for the same ids.

    python3 bench/load_hf/compare_hf.py --binary build-gpu/bench/load_hf --repeat 3 \
        --meshes tp=1,tp=4 DIR [DIR ...]

For each checkpoint directory: the shardgraph bench under each mesh (tp=4: four ranks sharing the
GPU, each reading its quarter), one process per load, then from_pretrained(dtype=bfloat16,
device_map="cuda"), timed after torch and CUDA are initialised, to the last weight on the device.
--cold empties the page cache before every load (root only), else the files are read warm. Prints one JSON line per
measurement, a table of medians and RATIO lines (from_pretrained's time over shardgraph's), and
the largest logit difference between the two, relative to the largest logit (bf16 weights).
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
            sys.exit(f"shardgraph: compare_hf.py: {' '.join(command)} failed:\n{done.stderr}")
        for line in done.stdout.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                r["attempt"], r["cold"] = attempt, cold
                print(json.dumps(r), flush=True)
                runs.append(r)
    return runs


def hf_runs(directory, repeat, ids, cold):
    import torch
    from transformers import AutoModelForCausalLM

    torch.zeros(1, device="cuda")  # CUDA initialised before the clock starts
    times, logits = [], None
    for attempt in range(repeat):
        if cold:
            drop_page_cache()
        torch.cuda.synchronize()
        start = time.perf_counter()
        try:
            model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16, device_map="cuda")
        except TypeError:  # transformers before 4.56 names it torch_dtype
            model = AutoModelForCausalLM.from_pretrained(directory, torch_dtype=torch.bfloat16, device_map="cuda")
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        times.append(seconds)
        print(json.dumps({"bench": "from_pretrained", "model": directory, "attempt": attempt,
                          "cold": cold, "load_s": round(seconds, 3)}), flush=True)
        if logits is None:
            with torch.no_grad():
                logits = model(torch.tensor([ids], device="cuda")).logits.float().cpu()
        del model
        torch.cuda.empty_cache()
    return times, logits


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directories", nargs="+")
    parser.add_argument("--binary", required=True)
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
            theirs, hf_logits = hf_runs(directory, args.repeat, ids_here, args.cold)
            sg_logits = load_file(logits_file)["logits"]
        difference = ((sg_logits - hf_logits).abs().max() / hf_logits.abs().max()).item()
        same_top = (sg_logits.argmax(-1) == hf_logits.argmax(-1)).float().mean().item()
        hf_median = statistics.median(theirs)
        name = os.path.basename(os.path.normpath(directory))
        for mesh, runs in ours.items():
            median = statistics.median(r["load_s"] for r in runs)
            rows.append((name, f"shardgraph {mesh}", median, runs[0]["file_gb"], runs[0]["read_gb_per_rank"]))
            print(f"RATIO {name} {mesh}: from_pretrained / shardgraph load time = {hf_median / median:.2f}x")
        rows.append((name, "from_pretrained", hf_median, ours[next(iter(ours))][0]["file_gb"], None))
        print(f"LOGITS {name}: largest difference {difference:.3g} of the largest logit; "
              f"same top token at {same_top * 100:.0f} % of positions")

    print("\n| model | loader | load s (median) | file GB | GB read per rank |")
    print("|---|---|---|---|---|")
    for name, who, seconds, file_gb, per_rank in rows:
        read = ", ".join(f"{b:.2f}" for b in per_rank) if per_rank else "all"
        print(f"| {name} | {who} | {seconds:.2f} | {file_gb:.2f} | {read} |")


if __name__ == "__main__":
    main()
