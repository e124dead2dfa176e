#!/usr/bin/env python3
"""Golden device maps, computed by HF Accelerate, for plan/device_map.hpp.

For each model (a config.json), dtype, budget and strategy, builds the model on the meta device
(init_empty_weights, weights tied as from_pretrained ties them), then runs Accelerate's own
placement:

    sequential   infer_auto_device_map(model, max_memory, no_split_module_classes, dtype)
    balanced     the same, on get_balanced_memory(model, max_memory, no_split_module_classes, dtype)

with no_split_module_classes = the model's _no_split_modules (GPT2Block, LlamaDecoderLayer). Budgets
are written as shardgraph's --max-memory text, in bytes, chosen as shares of each model's size so
that every branch is taken: all on one GPU, spilling to the next GPU, to the CPU, to the disk, the
largest-layer reserve pushing a module off cuda:0, a budget smaller than one layer. The maps are
saved as device_maps/device_maps.json (GPUs as "cuda:N"); the test compares every one.

    python3 tests/golden/make_device_maps.py --out tests/golden/device_maps

Needs torch, transformers and accelerate; runs on a machine without a GPU.
"""
import argparse
import copy
import json
import warnings
from pathlib import Path

import accelerate
import torch
import transformers
from accelerate import init_empty_weights
from accelerate.utils import compute_module_sizes, get_balanced_memory, infer_auto_device_map

# name -> config.json, relative to tests/golden
MODELS = {
    "gpt2": "gpt2/config.json",
    "gpt2_untied": "gpt2_untied/config.json",
    "llama": "llama/config.json",
    "llama_tied_bias_headdim": "llama_tied_bias_headdim/config.json",
    "gpt2_124m": "device_maps/gpt2_124m.json",
    "tinyllama": "device_maps/tinyllama.json",
}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f64": torch.float64}
# Per dtype, the models it is run for (f64 only on the small golden ones: the same code path).
DTYPE_MODELS = {
    "f32": list(MODELS),
    "bf16": list(MODELS),
    "f64": ["gpt2", "llama_tied_bias_headdim"],
}
# Budgets as shares of the model's size (devices in --max-memory order; "big" is 10x the model).
BUDGETS = [
    {"cuda:0": "big"},
    {"cuda:0": "big", "cpu": "big"},
    {"cuda:0": 0.5, "cpu": "big"},
    {"cuda:0": 0.3, "cuda:1": 0.3, "cpu": "big"},
    {"cuda:0": 0.6, "cuda:1": 0.6},
    {"cuda:0": 0.35, "cuda:1": 0.35, "cuda:2": 0.35, "cuda:3": 0.35},
    {"cuda:0": 0.2, "cpu": 0.3},
    {"cuda:0": 0.02, "cpu": "big"},
    {"cpu": "big"},
    {"cuda:1": 0.7, "cuda:0": 0.45, "cpu": 0.2},
    {"cuda:0": 0.9, "cpu": "big"},
    {"cuda:0": 0.25, "cuda:1": 0.25, "cuda:2": 0.25, "cpu": "big"},
    {"cuda:0": "big", "cuda:1": "big"},
    {"cuda:0": 0.8, "cuda:1": 0.8, "cpu": "big"},
    {"cuda:0": "big", "cuda:1": "big", "cuda:2": "big", "cpu": "big"},
    {"cuda:0": 0.3, "cuda:1": "big", "cuda:2": 0.5, "cpu": "big"},
]


def build(config_path, dtype):
    fields = json.loads(config_path.read_text())
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with init_empty_weights():
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.tie_weights()  # as from_pretrained does; Accelerate's docs ask for it before infer_auto_device_map
    return model


def budget_bytes(shares, total):
    return {d: 10 * total if s == "big" else int(s * total) for d, s in shares.items()}


def accelerate_keys(budget):
    """--max-memory devices -> Accelerate's keys (GPU index, "cpu")."""
    return {int(d.split(":")[1]) if d.startswith("cuda:") else d: b for d, b in budget.items()}


def device_text(device):
    return f"cuda:{device}" if isinstance(device, int) else device


def place(model, budget, strategy, dtype):
    no_split = list(model._no_split_modules)
    max_memory = accelerate_keys(budget)
    if strategy == "balanced":
        max_memory = get_balanced_memory(model, max_memory=copy.deepcopy(max_memory),
                                         no_split_module_classes=no_split, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        device_map = infer_auto_device_map(model, max_memory=copy.deepcopy(max_memory),
                                           no_split_module_classes=no_split, dtype=dtype)
    # clean_device_map regroups names through a set, whose order changes from run to run: sort
    # the names in model order so that the file is the same on every run.
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    return {name: device_text(device_map[name]) for name in sorted(device_map, key=lambda n: order[n])}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(Path(__file__).parent / "device_maps"))
    args = parser.parse_args()
    golden = Path(__file__).parent
    cases = []
    for dtype_name, models in DTYPE_MODELS.items():
        dtype = DTYPES[dtype_name]
        for name in models:
            model = build(golden / MODELS[name], dtype)
            total = compute_module_sizes(model, dtype=dtype)[""]
            for shares in BUDGETS:
                budget = budget_bytes(shares, total)
                text = ",".join(f"{d}={b}" for d, b in budget.items())
                for strategy in ("sequential", "balanced"):
                    cases.append({"model": name, "config": MODELS[name], "dtype": dtype_name,
                                  "max_memory": text, "strategy": strategy, "model_bytes": total,
                                  "map": place(model, budget, strategy, dtype)})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    document = {"accelerate": accelerate.__version__, "transformers": transformers.__version__,
                "torch": torch.__version__.split("+")[0], "cases": cases}
    lines = ",\n".join(json.dumps(case) for case in cases)
    header = json.dumps({k: v for k, v in document.items() if k != "cases"})[:-1]
    (out / "device_maps.json").write_text(header + ', "cases": [\n' + lines + "\n]}\n")
    print(f"{len(cases)} maps -> {out / 'device_maps.json'}")


if __name__ == "__main__":
    main()
