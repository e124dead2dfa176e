#!/usr/bin/env python3
"""Reference data for the golden tests, computed by HF transformers.

Builds small random-weight GPT-2 and LLaMA models in float64, runs one forward and one
backward pass on fixed random tokens, and saves the weights, inputs, logits, loss and
parameter gradients as safetensors. README.md beside this file states the layouts and
conventions. Needs torch and transformers only; the safetensors files are written by hand, in a
fixed order, so that the same inputs give the same bytes.

Each case (a folder) seeds its own generator, so adding a case changes no other case's files.
The vocabulary (61) divides no tensor-parallel size in {2, 3, 4}, so sharded runs pad it, and a
quarter of the targets are the ignore index -100, so the loss's divisor is tested too.

    python3 tests/golden/make_golden.py --out tests/golden

The vision models (ViT, LLaVA) are made by multimodal_golden.py, and the greedy generation
cases by generate_golden.py, both called from here.
"""
import argparse
import copy
import json
import struct
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

from generate_golden import make_generate
from multimodal_golden import make_clip_image, make_llava, make_vit

SEED = 1234
B, T, V = 4, 16, 61  # V divides no tp in {2, 3, 4}
IGNORED = 0.25        # the share of targets set to the ignore index
IGNORE_INDEX = -100
SIZE_LIMIT = 3_000_000  # bytes, all files together: the output is committed

# Heads (and LLaMA's key/value heads) divide tp = 2, 3 and 4, so the tests run those layouts.
CONFIGS = {
    "gpt2": lambda: GPT2Config(
        vocab_size=V, n_positions=32, n_embd=24, n_layer=2, n_head=12,
        activation_function="gelu_new", layer_norm_epsilon=1e-5,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
        bos_token_id=0, eos_token_id=0),  # (GPT-2's 50256 is outside this vocabulary)
    "llama": lambda: LlamaConfig(
        vocab_size=V, hidden_size=96, intermediate_size=24, num_hidden_layers=1,
        num_attention_heads=24, num_key_value_heads=12, max_position_embeddings=32,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, hidden_act="silu"),
}


# Cases for config options the two models above leave at their defaults, each in its own
# directory with its own seed and sizes, so that adding one leaves every other file unchanged.
# tests/golden/config_fields.py lists which config.json field each one covers.
OPTION_CASES = {
    "gpt2_untied": dict(seed=31, batch=2, seq=8, config=lambda: GPT2Config(
        vocab_size=48, n_positions=16, n_embd=16, n_layer=2, n_head=4, n_inner=24,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=False)),
    "gpt2_unscaled": dict(seed=33, batch=2, seq=8, config=lambda: GPT2Config(
        vocab_size=48, n_positions=16, n_embd=16, n_layer=2, n_head=4,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, scale_attn_weights=False)),
    "llama_tied_bias_headdim": dict(seed=32, batch=2, seq=8, config=lambda: LlamaConfig(
        vocab_size=48, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=4, head_dim=6, max_position_embeddings=16,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
        attention_bias=True, mlp_bias=True, hidden_act="silu")),
}


def write_safetensors(tensors, path, metadata):
    """The safetensors format by hand: u64 LE header length, JSON header, LE data."""
    codes = {torch.float64: ("F64", "d"), torch.int64: ("I64", "q")}
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        dtype, code = codes[t.dtype]
        data = struct.pack(f"<{t.numel()}{code}", *t.reshape(-1).tolist())
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data then starts 8-byte aligned, as safetensors does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def save(tensors, path, metadata):
    # Own, contiguous copies of every tensor (no views, no shared storage).
    tensors = {name: t.detach().contiguous().clone() for name, t in tensors.items()}
    write_safetensors(tensors, str(path), metadata)


def randomize(model, gen):
    """Makes every parameter nontrivial, from `gen` in sorted name order:
    matrices and embeddings 0.2 N(0,1), norm weights 1 + 0.1 N(0,1), biases 0.1 N(0,1)."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda item: item[0]):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            if name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif p.dim() == 1:  # the only 1-D weights in both models are norm scales
                p.copy_(1.0 + 0.1 * noise)
            else:
                p.copy_(0.2 * noise)


def check_structure(kind, model, params):
    """The assumptions the saved files rely on; fails loudly if transformers changed them."""
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    assert all(p.dtype == torch.float64 for p in params.values())
    assert set(params) <= set(model.state_dict()), "parameter names must be state_dict names"
    d = model.config.hidden_size
    if kind == "gpt2":
        assert model.lm_head.weight is model.transformer.wte.weight, "GPT-2 lm_head must be tied"
        assert "lm_head.weight" not in params
        assert params["transformer.h.0.attn.c_attn.weight"].shape == (d, 3 * d), "Conv1D is (in, out)"
    else:
        assert "lm_head.weight" in params, "LLaMA lm_head must be its own weight"
        kv = model.config.num_key_value_heads * d // model.config.num_attention_heads
        assert params["model.layers.0.self_attn.k_proj.weight"].shape == (kv, d), "(out, in)"
        head_dim = model.config.hidden_size // model.config.num_attention_heads
        inv_freq = 1.0 / 10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        rotary = model.model.rotary_emb.inv_freq.to(torch.float64)
        assert torch.allclose(rotary, inv_freq, rtol=1e-6), "LLaMA RoPE must be default, theta 1e4"


def check_option_case(name, model, params):
    """What each option case exists to cover, checked on the model transformers built."""
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    if name == "gpt2_untied":
        assert model.lm_head.weight is not model.transformer.wte.weight
        assert "lm_head.weight" in params and "transformer.wte.weight" in params
        assert params["transformer.h.0.mlp.c_fc.weight"].shape == (16, 24), "n_inner is the MLP width"
    elif name == "gpt2_unscaled":
        assert model.transformer.h[1].attn.scaling == 1.0, "no 1/sqrt(head_dim) on the scores"
    elif name == "llama_tied_bias_headdim":
        assert model.lm_head.weight is model.model.embed_tokens.weight, "the head must be tied"
        assert "lm_head.weight" not in params
        assert params["model.layers.0.self_attn.q_proj.weight"].shape == (48, 16), "8 heads of 6"
        assert params["model.layers.0.self_attn.o_proj.weight"].shape == (16, 48)
        for bias in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                     "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            assert f"model.layers.0.{bias}.bias" in params, bias


def make_option_case(name, out):
    """Writes <out>/<name>/{model,golden}.safetensors and config.json for OPTION_CASES[name]."""
    case = OPTION_CASES[name]
    gen = torch.Generator().manual_seed(case["seed"])
    config = case["config"]()
    batch, seq, vocab = case["batch"], case["seq"], config.vocab_size
    input_ids = torch.randint(0, vocab, (batch, seq), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, vocab, (batch, seq), generator=gen, dtype=torch.int64)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").double().eval()
    randomize(model, gen)
    params = dict(model.named_parameters())  # a tied weight appears once, under its first name
    check_option_case(name, model, params)

    logits = model(input_ids=input_ids, use_cache=False).logits  # (batch, seq, vocab)
    loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().max() > 0 for p in params.values())

    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    save(params, folder / "model.safetensors", {"format": "pt"})
    model.config.to_json_file(str(folder / "config.json"))
    golden = {"input_ids": input_ids, "targets": targets, "logits": logits, "loss": loss.reshape(1)}
    golden.update({f"grad.{n}": p.grad for n, p in params.items()})
    metadata = {"torch": torch.__version__, "transformers": transformers.__version__,
                "B": str(batch), "T": str(seq)}
    save(golden, folder / "golden.safetensors", metadata)
    print(f"{name}: loss {loss.item():.12f}, {sum(p.numel() for p in params.values())} parameters")
    return [folder / "model.safetensors", folder / "config.json", folder / "golden.safetensors"]


def make(kind, out):
    """Writes <out>/<kind>/{model,golden}.safetensors and config.json; returns their paths."""
    gen = torch.Generator().manual_seed(SEED)  # this case's own: other cases do not move it
    input_ids = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)  # (B, T)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)  # (B, T), not shifted
    ignored = torch.rand((B, T), generator=gen, dtype=torch.float64) < IGNORED
    ignored[0, :] = True   # a whole row ignored: a data-parallel rank may count fewer targets
    ignored[1, :] = False  # and one with none
    targets[ignored] = IGNORE_INDEX
    model = AutoModelForCausalLM.from_config(CONFIGS[kind](), attn_implementation="eager")
    model = model.double().eval()
    randomize(model, gen)
    params = dict(model.named_parameters())  # a tied weight appears once, under its first name
    check_structure(kind, model, params)

    logits = model(input_ids=input_ids, use_cache=False).logits  # (B, T, V)
    # the mean over the targets that are not IGNORE_INDEX
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=IGNORE_INDEX)
    # HF's own causal-LM loss agrees (to float32, which it computes in), given the targets as
    # already shifted labels
    hf_loss = model.loss_function(logits=logits, labels=None, vocab_size=V, shift_labels=targets)
    assert torch.allclose(hf_loss.double(), loss, rtol=1e-6, atol=0), (hf_loss.item(), loss.item())
    loss.backward()
    assert logits.shape == (B, T, V) and logits.dtype == torch.float64
    assert all(p.grad is not None and p.grad.abs().max() > 0 for p in params.values())

    folder = out / kind
    folder.mkdir(parents=True, exist_ok=True)
    save(params, folder / "model.safetensors", {"format": "pt"})
    model.config.to_json_file(str(folder / "config.json"))
    golden = {"input_ids": input_ids, "targets": targets, "logits": logits, "loss": loss.reshape(1)}
    golden.update({f"grad.{name}": p.grad for name, p in params.items()})
    metadata = {"torch": torch.__version__, "transformers": transformers.__version__,
                "B": str(B), "T": str(T), "ignore_index": str(IGNORE_INDEX),
                "counted": str(int((targets != IGNORE_INDEX).sum()))}
    save(golden, folder / "golden.safetensors", metadata)
    print(f"{kind}: loss {loss.item():.12f}, {sum(p.numel() for p in params.values())} parameters")
    return [folder / "model.safetensors", folder / "config.json", folder / "golden.safetensors"]


# ---- RoPE scaling: one tiny LLaMA per kind, each seeded by its own name ------------------------
# (B, T) tokens; head_dim 16 (8 frequencies) so that each kind's rule changes several of them.
ROPE_B, ROPE_T, ROPE_V = 2, 12, 24
ROPE_CASES = {
    # the older spelling: top-level rope_theta, rope_scaling with "type" (config.json rewritten so)
    "llama_rope_linear": dict(max_position_embeddings=64, rope_theta=10000.0,
                              rope_scaling={"type": "linear", "factor": 2.0}),
    # T = 12 tokens beyond max_position_embeddings = 8: theta grows with the sequence length
    "llama_rope_dynamic": dict(max_position_embeddings=8, rope_parameters={
        "rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}),
    # wavelengths 6.3 (kept), 33 (blended) and 168 and longer (divided by factor), around 64 / 4 and 64 / 1
    "llama_rope_llama3": dict(max_position_embeddings=256, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    # a ramp over pairs 0 to 3 between extrapolation and interpolation; cos and sin times 0.1 ln 4 + 1
    "llama_rope_yarn": dict(max_position_embeddings=256, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64}),
}

# Tables only (no model): HF's inverse frequencies and cos/sin factor for more configs, each as
# config.json gives it; tests/golden/llama_rope_tables/tables.json.
ROPE_TABLES = [
    ("default", 16, {"max_position_embeddings": 64, "rope_theta": 500000.0}),
    ("linear, rope_type spelling", 16, {"max_position_embeddings": 64,
                                        "rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
    ("dynamic within max positions", 8, {"max_position_embeddings": 16,
                                         "rope_parameters": {"rope_type": "dynamic", "factor": 3.0}}),
    ("dynamic beyond max positions", 40, {"max_position_embeddings": 16,
                                          "rope_parameters": {"rope_type": "dynamic", "factor": 3.0}}),
    ("llama3, original from max positions", 16, {"max_position_embeddings": 128, "rope_parameters": {
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 2.0,
        "high_freq_factor": 8.0}}),
    ("llama3 as Llama 3.1", 16, {"max_position_embeddings": 131072, "head_dim": 128, "rope_parameters": {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}),
    ("yarn, truncate false, betas", 16, {"max_position_embeddings": 512, "rope_parameters": {
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 64,
        "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False}}),
    ("yarn, attention_factor given", 16, {"max_position_embeddings": 256, "rope_parameters": {
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
        "attention_factor": 1.25}}),
    ("yarn, factor null", 16, {"max_position_embeddings": 1024, "rope_parameters": {
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": None, "original_max_position_embeddings": 128}}),
]


def rope_config(spec):
    """A tiny LLaMA config with `spec`'s fields (copied: transformers fills in RoPE dicts in place)."""
    spec = copy.deepcopy(spec)
    return LlamaConfig(
        vocab_size=ROPE_V, hidden_size=32, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, rms_norm_eps=1e-6, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, hidden_act="silu", **spec)


def hf_rope_table(config, seq):
    """HF's inverse frequencies and cos/sin factor after a forward over `seq` positions."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    rotary = LlamaRotaryEmbedding(config)
    x = torch.zeros(1, seq, dtype=torch.float64)
    rotary(x, torch.arange(seq).reshape(1, seq))
    return rotary.inv_freq.to(torch.float64), float(rotary.attention_scaling)


def write_old_spelling(path, spec):
    """Rewrites config.json with the top-level rope_theta and rope_scaling of older transformers."""
    config = json.loads(path.read_text())
    parsed = LlamaConfig.from_json_file(str(path)).rope_parameters
    config.pop("rope_parameters")
    config["rope_theta"], config["rope_scaling"] = spec["rope_theta"], spec["rope_scaling"]
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    assert LlamaConfig.from_json_file(str(path)).rope_parameters == parsed, "the spellings must agree"


def make_rope(name, out):
    """Writes <out>/<name>/{model,golden}.safetensors and config.json; returns their paths."""
    spec = ROPE_CASES[name]
    gen = torch.Generator().manual_seed(SEED + sum(name.encode()))
    input_ids = torch.randint(0, ROPE_V, (ROPE_B, ROPE_T), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, ROPE_V, (ROPE_B, ROPE_T), generator=gen, dtype=torch.int64)
    model = AutoModelForCausalLM.from_config(rope_config(spec), attn_implementation="eager")
    model = model.double().eval()
    randomize(model, gen)
    params = dict(model.named_parameters())
    assert model.config._attn_implementation == "eager" and "lm_head.weight" in params
    kind = model.config.rope_parameters["rope_type"]
    assert kind == name.removeprefix("llama_rope_"), model.config.rope_parameters

    logits = model(input_ids=input_ids, use_cache=False).logits  # (B, T, V)
    loss = F.cross_entropy(logits.reshape(-1, ROPE_V), targets.reshape(-1))
    loss.backward()
    rotary = model.model.rotary_emb
    inv_freq = rotary.inv_freq.to(torch.float64)  # after the forward: dynamic's grown theta
    default = rotary.compute_default_rope_parameters(model.config)[0].to(torch.float64)
    assert not torch.allclose(inv_freq, default), f"{name}: the scaling must change the frequencies"

    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    save(params, folder / "model.safetensors", {"format": "pt"})
    model.config.to_json_file(str(folder / "config.json"))
    if "rope_scaling" in spec:
        write_old_spelling(folder / "config.json", spec)
    golden = {"input_ids": input_ids, "targets": targets, "logits": logits, "loss": loss.reshape(1),
              "rope.inv_freq": inv_freq,
              "rope.attention_scaling": torch.tensor([rotary.attention_scaling], dtype=torch.float64)}
    golden.update({f"grad.{n}": p.grad for n, p in params.items()})
    metadata = {"torch": torch.__version__, "transformers": transformers.__version__,
                "B": str(ROPE_B), "T": str(ROPE_T)}
    save(golden, folder / "golden.safetensors", metadata)
    print(f"{name}: loss {loss.item():.12f}, attention scaling {rotary.attention_scaling}")
    return [folder / "model.safetensors", folder / "config.json", folder / "golden.safetensors"]


def make_rope_tables(out):
    cases = []
    for name, seq, spec in ROPE_TABLES:
        config = rope_config(spec)
        inv_freq, scaling = hf_rope_table(config, seq)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        cases.append({"name": name, "seq": seq, "head_dim": head_dim, "config": spec,
                      "inv_freq": inv_freq.tolist(), "attention_scaling": scaling})
    folder = out / "llama_rope_tables"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tables.json"
    text = json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                       "cases": cases}, indent=1)
    path.write_text(text + "\n")
    return [path]


# Attention masks (tests/golden/attention_masks): torch's scaled_dot_product_attention, causal or
# not, under HF's attention_mask (1 attend, 0 a padded key; right padding, so every query sees a
# key) and under segment ids (a query sees the keys of its segment), with grouped-query heads.
ATTENTION_SIZES = dict(batch=2, heads=4, kv_heads=2, seq=6, head_dim=4)
ATTENTION_PADDING = [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]
ATTENTION_SEGMENTS = [[0, 0, 1, 1, 1, 2], [5, 5, 5, 5, 3, 3]]


def attention_case(q, k, v, dout, causal, mask_kind):
    """out, dq, dk, dv of SDPA with the boolean mask (batch, 1, seq, seq) the HF-style input implies."""
    seq = q.shape[2]
    seen = torch.ones(q.shape[0], 1, seq, seq, dtype=torch.bool)
    if causal:
        seen &= torch.ones(seq, seq, dtype=torch.bool).tril()
    if mask_kind == "padding":
        seen &= torch.tensor(ATTENTION_PADDING, dtype=torch.bool)[:, None, None, :]
    elif mask_kind == "segments":
        ids = torch.tensor(ATTENTION_SEGMENTS)
        seen &= (ids[:, :, None] == ids[:, None, :])[:, None]
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    out = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                         attn_mask=seen)
    out.backward(dout)
    return out, q.grad, k.grad, v.grad


def make_attention_masks(out):
    gen = torch.Generator().manual_seed(SEED)
    a = ATTENTION_SIZES
    q_shape = (a["batch"], a["heads"], a["seq"], a["head_dim"])
    kv_shape = (a["batch"], a["kv_heads"], a["seq"], a["head_dim"])
    tensors = {"q": torch.rand(q_shape, generator=gen, dtype=torch.float64) * 4 - 2,
               "k": torch.rand(kv_shape, generator=gen, dtype=torch.float64) * 4 - 2,
               "v": torch.rand(kv_shape, generator=gen, dtype=torch.float64) * 2 - 1,
               "dout": torch.rand(q_shape, generator=gen, dtype=torch.float64) * 2 - 1,
               "padding": torch.tensor(ATTENTION_PADDING), "segments": torch.tensor(ATTENTION_SEGMENTS)}
    for causal in (True, False):
        for mask_kind in ("none", "padding", "segments"):
            name = ("causal" if causal else "bidirectional") + "." + mask_kind
            results = attention_case(tensors["q"], tensors["k"], tensors["v"], tensors["dout"], causal, mask_kind)
            for part, value in zip(("out", "dq", "dk", "dv"), results):
                tensors[f"{name}.{part}"] = value
    folder = out / "attention_masks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "golden.safetensors"
    save(tensors, path, {"torch": torch.__version__, **{key: str(value) for key, value in a.items()}})
    return [path]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="folder that receives gpt2/ and llama/ (default: the script's)")
    args = parser.parse_args()
    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # one thread: a fixed reduction order from run to run
    written = [path for kind in CONFIGS for path in make(kind, args.out)]
    written += [path for name in OPTION_CASES for path in make_option_case(name, args.out)]
    written += [path for name in ROPE_CASES for path in make_rope(name, args.out)] + make_rope_tables(args.out)
    written += make_clip_image(args.out, 43, save)  # first: LLaVA generates from its image file
    written += make_vit(args.out, 41, randomize, save) + make_llava(args.out, 42, randomize, save)
    written += make_attention_masks(args.out)
    written += make_generate(args.out, randomize, save)
    total = 0
    for path in written:
        size = path.stat().st_size
        total += size
        print(f"{size:>10,d}  {path}")
    print(f"{total:>10,d}  total")
    assert total < SIZE_LIMIT, f"golden data is {total} bytes; keep it under {SIZE_LIMIT}"


if __name__ == "__main__":
    main()
