"""Golden data for the vision models: a ViT image classifier and a LLaVA vision-language model.

Called by make_golden.py (which owns the safetensors writer and the weight randomization); each
case seeds its own generator, so adding one changes no other case's files. As for the language
models, everything is float64, in eval mode, with HF's "eager" attention and no dropout.

  vit    ViTForImageClassification: 8x8 images of 3 channels in 4x4 patches (4 patches and the
         class token), 2 pre-LayerNorm encoder layers with bidirectional attention and GELU (erf);
         the class token's final state, normalized, goes through the classifier. 7 labels.
  llava  LlavaForConditionalGeneration: a CLIP vision tower (the same images; 3 layers, quick_gelu,
         pre_layrnorm), whose second-to-last layer's patch states (the class token dropped) go
         through the projector (linear, GELU, linear) into a LLaMA decoder, replacing the
         embeddings of the 4 image tokens that open every sequence. generate.safetensors beside
         it holds HF's greedy generate() from the same images and prompts, image_file.safetensors
         the same from clip_image's PNG through the image processor (make_clip_image runs first).
  clip_image  a small PNG and what CLIPImageProcessorPil (Pillow's bicubic resize, center crop,
         rescale, normalize) makes of it, for shardgraph's own preprocessing.
"""
import torch
import torch.nn.functional as F
import transformers
from transformers import (CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration,
                          ViTConfig, ViTForImageClassification)

IMAGE, PATCH, CHANNELS = 8, 4, 3
PATCHES = (IMAGE // PATCH) ** 2
IGNORE_INDEX = -100
LLAVA_NEW_TOKENS = 16  # 12 prompt tokens + 16 stay within the decoder's 32 positions
TIE_MARGIN = 1e-4      # a greedy step's two best logits differ by more (float32 rounding in HF's model is ~1e-6)


def vit_config():
    return ViTConfig(image_size=IMAGE, patch_size=PATCH, num_channels=CHANNELS, hidden_size=24,
                     num_hidden_layers=2, num_attention_heads=12, intermediate_size=24,
                     hidden_act="gelu", layer_norm_eps=1e-12, qkv_bias=True, num_labels=7,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def llava_config():
    vision = CLIPVisionConfig(image_size=IMAGE, patch_size=PATCH, num_channels=CHANNELS, hidden_size=24,
                              num_hidden_layers=3, num_attention_heads=12, intermediate_size=24,
                              hidden_act="quick_gelu", layer_norm_eps=1e-5, attention_dropout=0.0)
    text = LlamaConfig(vocab_size=61, hidden_size=48, intermediate_size=24, num_hidden_layers=1,
                       num_attention_heads=12, num_key_value_heads=6, max_position_embeddings=32,
                       rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                       attention_bias=False, mlp_bias=False, hidden_act="silu")
    return LlavaConfig(vision_config=vision, text_config=text, image_token_index=60,
                       projector_hidden_act="gelu", vision_feature_select_strategy="default",
                       vision_feature_layer=-2, image_seq_length=PATCHES)


def metadata(**fields):
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            **{k: str(v) for k, v in fields.items()}}


def gradients(params):
    """grad.<name> for every parameter the loss reaches; the names of those it does not."""
    reached = {f"grad.{n}": p.grad for n, p in params.items() if p.grad is not None}
    unused = sorted(n for n, p in params.items() if p.grad is None)
    assert all(g.abs().max() > 0 for g in reached.values())
    return reached, unused


def write_case(name, out, model, params, golden, meta, save):
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    save(params, folder / "model.safetensors", {"format": "pt"})
    model.config.to_json_file(str(folder / "config.json"))
    save(golden, folder / "golden.safetensors", meta)
    return [folder / "model.safetensors", folder / "config.json", folder / "golden.safetensors"]


def make_vit(out, seed, randomize, save):
    """<out>/vit/: pixels (B, 3, 8, 8), labels (B), logits (B, 7), the encoder's normalized
    states (B, 5, 24), the loss and every gradient."""
    gen = torch.Generator().manual_seed(seed)
    batch = 4
    model = ViTForImageClassification(vit_config()).double().eval()
    model.config._attn_implementation = "eager"
    randomize(model, gen)
    params = dict(model.named_parameters())
    pixels = torch.randn((batch, CHANNELS, IMAGE, IMAGE), generator=gen, dtype=torch.float64)
    labels = torch.randint(0, model.config.num_labels, (batch,), generator=gen, dtype=torch.int64)
    result = model(pixel_values=pixels, output_hidden_states=True)
    states = model.vit.layernorm(result.hidden_states[-1])  # (B, 1 + patches, hidden)
    assert torch.allclose(model.classifier(states[:, 0, :]), result.logits)
    loss = F.cross_entropy(result.logits, labels)
    loss.backward()
    grads, unused = gradients(params)
    assert not unused, unused
    assert params["vit.embeddings.patch_embeddings.projection.weight"].shape == (24, CHANNELS, PATCH, PATCH)
    golden = {"pixel_values": pixels, "labels": labels, "logits": result.logits,
              "last_hidden_state": states, "loss": loss.reshape(1), **grads}
    print(f"vit: loss {loss.item():.12f}, {sum(p.numel() for p in params.values())} parameters")
    return write_case("vit", out, model, params, golden, metadata(B=batch, patches=PATCHES), save)


def make_llava(out, seed, randomize, save):
    """<out>/llava/: pixels (B, 3, 8, 8), input_ids (B, T) opening with 4 image tokens, targets
    (B, T) (-100 on the image tokens and on about a quarter of the others), logits (B, T, 61), the
    projected image features (B, 4, 48), the loss and the gradient of every parameter the loss
    reaches (the vision tower's last layer and post_layernorm are not: metadata `unused`)."""
    gen = torch.Generator().manual_seed(seed)
    batch, seq = 2, 12
    config = llava_config()
    model = LlavaForConditionalGeneration(config).double().eval()
    model.config._attn_implementation = "eager"
    for sub in (model.config.vision_config, model.config.text_config):
        sub._attn_implementation = "eager"
    randomize(model, gen)
    params = dict(model.named_parameters())
    vocab, image_token = config.text_config.vocab_size, config.image_token_index
    pixels = torch.randn((batch, CHANNELS, IMAGE, IMAGE), generator=gen, dtype=torch.float64)
    input_ids = torch.randint(0, image_token, (batch, seq), generator=gen, dtype=torch.int64)
    input_ids[:, :PATCHES] = image_token
    targets = torch.randint(0, image_token, (batch, seq), generator=gen, dtype=torch.int64)
    targets[torch.rand((batch, seq), generator=gen, dtype=torch.float64) < 0.25] = IGNORE_INDEX
    targets[:, :PATCHES] = IGNORE_INDEX
    result = model(input_ids=input_ids, pixel_values=pixels, use_cache=False)
    features = model.model.get_image_features(pixel_values=pixels,
                                              vision_feature_layer=config.vision_feature_layer,
                                              vision_feature_select_strategy="default")
    features = getattr(features, "pooler_output", features)  # an output object, or the features
    features = torch.cat(list(features)) if isinstance(features, (list, tuple)) else features
    features = features.reshape(batch, PATCHES, config.text_config.hidden_size)
    loss = F.cross_entropy(result.logits.reshape(-1, vocab), targets.reshape(-1), ignore_index=IGNORE_INDEX)
    loss.backward()
    grads, unused = gradients(params)
    assert all(".encoder.layers.2." in n or "post_layernorm" in n for n in unused), unused
    golden = {"pixel_values": pixels, "input_ids": input_ids, "targets": targets, "logits": result.logits,
              "image_features": features.detach(), "loss": loss.reshape(1), **grads}
    meta = metadata(B=batch, T=seq, patches=PATCHES, image_token=image_token, ignore_index=IGNORE_INDEX,
                    counted=int((targets != IGNORE_INDEX).sum()), unused=",".join(unused))
    print(f"llava: loss {loss.item():.12f}, {sum(p.numel() for p in params.values())} parameters")
    written = write_case("llava", out, model, params, golden, meta, save)
    written.append(make_llava_generate(out / "llava", model, pixels, input_ids, save))
    return written + [make_llava_image_file(out / "llava", model, out / "clip_image" / "image.png", save)]


def greedy_generate(model, input_ids, pixels):
    """HF's greedy generate of LLAVA_NEW_TOKENS tokens for one row (1, T) and its image, with no end
    token (LlamaConfig's eos 2 would end the row early): the new tokens and the smallest difference
    of a step's two best logits."""
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, pixel_values=pixels, attention_mask=torch.ones_like(input_ids),
                             max_new_tokens=LLAVA_NEW_TOKENS, do_sample=False,
                             output_scores=True, return_dict_in_generate=True)
    generated = out.sequences[0, input_ids.shape[1]:]
    assert generated.shape[0] == LLAVA_NEW_TOKENS, generated.shape
    margin = min((lambda best: (best[0] - best[1]).item())(torch.topk(scores[0], 2).values)
                 for scores in out.scores)
    assert margin > TIE_MARGIN, f"a greedy step is a near tie ({margin}): choose other prompts"
    return generated, margin


def make_llava_generate(folder, model, pixels, input_ids, save):
    """<folder>/generate.safetensors: HF's greedy generate (do_sample=False) of LLAVA_NEW_TOKENS
    tokens from golden.safetensors' images and prompts, row by row (no padding): `generated`
    (B, LLAVA_NEW_TOKENS), without the prompt. Every step's two best logits differ by more than
    TIE_MARGIN (metadata `margin`: the smallest difference), so float32 rounding inside HF cannot
    flip a choice."""
    rows, margins = zip(*(greedy_generate(model, input_ids[b:b + 1], pixels[b:b + 1])
                          for b in range(input_ids.shape[0])))
    margin = min(margins)
    meta = metadata(B=input_ids.shape[0], T=input_ids.shape[1], new_tokens=LLAVA_NEW_TOKENS,
                    margin=f"{margin:.6g}")
    path = folder / "generate.safetensors"
    save({"pixel_values": pixels, "input_ids": input_ids, "generated": torch.stack(rows)}, path, meta)
    print(f"llava generate: {[r.tolist() for r in rows]}, smallest top-2 margin {margin:.3g}")
    return path


LLAVA_FILE_TEXT = [1, 17, 33, 5, 48]  # the text after the image tokens


def make_llava_image_file(folder, model, image_path, save):
    """<folder>/image_file.safetensors: the whole path from an image file: clip_image/image.png
    through CLIPImageProcessorPil (shortest edge 8, crop 8 x 8: the model's image size; CLIP's mean
    and std) into HF's greedy generate from 4 image tokens and LLAVA_FILE_TEXT: `pixel_values`
    (1, 3, 8, 8) (HF's float32, as F64), `input_ids` (1, 9), `generated` (1, LLAVA_NEW_TOKENS)."""
    from PIL import Image
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    processor = CLIPImageProcessorPil(size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE},
                                      image_mean=CLIP_MEAN, image_std=CLIP_STD)
    pixels = torch.from_numpy(processor(images=Image.open(image_path), return_tensors="np")["pixel_values"])
    pixels = pixels.to(torch.float64)
    image_token = model.config.image_token_index
    input_ids = torch.tensor([[image_token] * PATCHES + LLAVA_FILE_TEXT], dtype=torch.int64)
    generated, margin = greedy_generate(model, input_ids, pixels)
    path = folder / "image_file.safetensors"
    meta = metadata(new_tokens=LLAVA_NEW_TOKENS, margin=f"{margin:.6g}")
    save({"pixel_values": pixels, "input_ids": input_ids, "generated": generated.reshape(1, -1)}, path, meta)
    print(f"llava from {image_path.name}: {generated.tolist()}, smallest top-2 margin {margin:.3g}")
    return path


CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]  # OpenAI CLIP's, as LLaVA's preprocessor_config.json
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
# The preprocessor_config.json written (down: 30 -> 12 rows, bicubic with antialiasing, then a
# crop of 10) and a second configuration that only the test sets (up: 30 -> 40 rows, crop 36).
CLIP_RESIZES = {"down": (12, 10), "up": (40, 36)}


def make_clip_image(out, seed, save):
    """<out>/clip_image/: image.png (45 wide, 30 high, RGB: gradients and noise), the
    preprocessor_config.json of its "down" case, and golden.safetensors: `rgb` (30, 45, 3) I64 (the
    PNG's pixels) and, per case of CLIP_RESIZES, `pixel_values.<case>` (3, crop, crop) F64 of
    transformers' CLIPImageProcessorPil (PIL: resize the shortest edge, bicubic; center crop;
    rescale by 1/255; normalize with CLIP's mean and std; float32)."""
    import numpy as np
    from PIL import Image
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    gen = torch.Generator().manual_seed(seed)
    rows, columns = torch.meshgrid(torch.arange(30.0), torch.arange(45.0), indexing="ij")
    smooth = torch.stack([rows * 8, columns * 5, (rows + columns) * 3 + 40], dim=-1)
    noise = torch.randint(-30, 31, (30, 45, 3), generator=gen).double()
    rgb = (smooth + noise).clamp(0, 255).to(torch.uint8)
    folder = out / "clip_image"
    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rgb.numpy(), mode="RGB").save(folder / "image.png", format="PNG")
    image = Image.open(folder / "image.png")
    assert np.array_equal(np.array(image), rgb.numpy()), "the PNG must hold the pixels exactly"
    golden = {"rgb": rgb.to(torch.int64)}
    for case, (edge, crop) in CLIP_RESIZES.items():
        processor = CLIPImageProcessorPil(size={"shortest_edge": edge}, crop_size={"height": crop, "width": crop},
                                          image_mean=CLIP_MEAN, image_std=CLIP_STD)
        pixels = processor(images=image, return_tensors="np")["pixel_values"][0]
        assert pixels.shape == (3, crop, crop) and pixels.dtype == np.float32, (pixels.shape, pixels.dtype)
        golden[f"pixel_values.{case}"] = torch.from_numpy(pixels.astype(np.float64))
        if case == "down":
            processor.to_json_file(str(folder / "preprocessor_config.json"))
    import PIL
    save(golden, folder / "golden.safetensors", {**metadata(), "pillow": PIL.__version__})
    return [folder / "image.png", folder / "preprocessor_config.json", folder / "golden.safetensors"]
