"""Golden greedy generation: HF transformers' generate(do_sample=False) on small random models.

Called by make_golden.py (which owns the safetensors writer and the weight randomization). Each
case seeds its own generator, so adding one changes no other case's files. The models are
float64, in eval mode, with HF's "eager" attention, and have room for the longest prompt and
its 32 new tokens (the golden gpt2/ and llama/ have 32 positions only).

  gpt2_generate   GPT-2, 2 layers, hidden 16, 4 heads, 64 learned positions, tied head, eos 0
  llama_generate  LLaMA, 2 layers, hidden 32, 8 query / 4 key-value heads (head dim 4), MLP 24,
                  64 positions, RoPE theta 10000, its own head, eos 2

Each prompt is generated alone (no batch, so no left padding), with the model's eos as the stop
token, as generate does by default: a sequence that generates its eos stops there, eos kept.
Prompts are drawn from the case's generator; one whose greedy steps have a near-tie (the top two
logits closer than MIN_MARGIN) is drawn again, so that a float rounding cannot change a token.
"""
import json

import torch
import transformers
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

V = 61
NEW_TOKENS = 32
PROMPT_LENGTHS = (1, 4, 11, 19, 32)  # the longest fills the 64 positions with its new tokens
# HF's LLaMA takes its RMSNorm, softmax and RoPE angles in float32 (about 1e-7 relative, of
# logits of order 1): a margin of 1e-4 leaves that noise no way to swap the top two tokens.
MIN_MARGIN = 1e-4
MAX_DRAWS = 50  # per prompt length

GENERATE_CASES = {
    "gpt2_generate": dict(seed=51, config=lambda: GPT2Config(
        vocab_size=V, n_positions=64, n_embd=16, n_layer=2, n_head=4,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)),
    "llama_generate": dict(seed=52, config=lambda: LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=64,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, hidden_act="silu", bos_token_id=1, eos_token_id=2)),
}


def greedy(model, prompt, eos):
    """HF generate's new ids for one prompt, the reason it stopped and the smallest top-2 gap."""
    ids = torch.tensor([prompt], dtype=torch.int64)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_new_tokens=NEW_TOKENS, eos_token_id=eos, pad_token_id=eos,
                         return_dict_in_generate=True, output_logits=True)
    generated = out.sequences[0, len(prompt):].tolist()
    margin = min(float(torch.topk(step[0], 2).values.diff().abs()) for step in out.logits)
    for step, token in zip(out.logits, generated):  # greedy: each id is its step's argmax
        assert int(step[0].argmax()) == token, (step, token)
    finish = "stop_token" if generated[-1] == eos else "max_new_tokens"
    assert finish == "stop_token" or len(generated) == NEW_TOKENS, generated
    return generated, finish, margin


def make_generate_case(name, out, randomize, save):
    """Writes <out>/<name>/{model.safetensors, config.json, generate.json}; returns their paths."""
    case = GENERATE_CASES[name]
    gen = torch.Generator().manual_seed(case["seed"])
    model = AutoModelForCausalLM.from_config(case["config"](), attn_implementation="eager")
    model = model.double().eval()
    randomize(model, gen)
    params = dict(model.named_parameters())  # a tied weight appears once, under its first name
    positions = model.config.max_position_embeddings
    assert max(PROMPT_LENGTHS) + NEW_TOKENS <= positions, "the longest prompt must fit with its tokens"
    eos = model.config.eos_token_id
    prompts = []
    for length in PROMPT_LENGTHS:
        for draw in range(MAX_DRAWS):
            prompt = torch.randint(0, V, (length,), generator=gen, dtype=torch.int64).tolist()
            with torch.no_grad():
                generated, finish, margin = greedy(model, prompt, eos)
            if margin >= MIN_MARGIN:
                break
            print(f"{name}: a prompt of {length} tokens has a near-tie ({margin:.2e}); drawing another")
        else:
            raise SystemExit(f"{name}: no prompt of {length} tokens without a near-tie in {MAX_DRAWS} draws")
        prompts.append({"prompt": prompt, "generated": generated, "finish": finish,
                        "min_margin": float(f"{margin:.6e}")})

    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    save(params, folder / "model.safetensors", {"format": "pt"})
    model.config.to_json_file(str(folder / "config.json"))
    golden = {"torch": torch.__version__, "transformers": transformers.__version__,
              "call": f"generate(do_sample=False, max_new_tokens={NEW_TOKENS}, eos_token_id={eos})",
              "max_new_tokens": NEW_TOKENS, "eos_token_id": eos, "min_margin": MIN_MARGIN,
              "prompts": prompts}
    path = folder / "generate.json"
    path.write_text(json.dumps(golden, indent=1) + "\n")
    stops = sum(p["finish"] == "stop_token" for p in prompts)
    print(f"{name}: {len(prompts)} prompts, {stops} stopped at eos, "
          f"smallest margin {min(p['min_margin'] for p in prompts):.2e}")
    return [folder / "model.safetensors", folder / "config.json", path]


def make_generate(out, randomize, save):
    return [path for name in GENERATE_CASES for path in make_generate_case(name, out, randomize, save)]
