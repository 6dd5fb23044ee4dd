"""Which of the vision-language models transformers registers onnx-nb serves, measured on the registry itself: every
model type in ``MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES`` built tiny from its own default config (the text part
as ``registry_sweep``'s causal LMs: 2 layers, width 64; the vision tower 2 layers, width 32, at its own image and
patch sizes, which families tie to their image-token counts), random weights, saved as a folder, then: can PyTorch
build it and greedy-generate from an image and a prompt holding the family's count of image tokens (onnx-nb's own
sample makers: ``pixel_sample``, ``prompt_sample``, ``prompt_extras``)? does one default ``onnx_nb.export(folder)``
write its parts, and does ``onnx_nb.generate(result, ids, images=...)`` give PyTorch's tokens, for two images? (A
vision encoder-decoder, image-to-text with no prompt, under each text decoder its checkpoints use: :data:`DECODERS`.)
Each model runs in a process of its own with a time limit (``registry_sweep.run_rows``).

    .venv/bin/python benchmarks/vlm_sweep.py [--only llava,gemma3] [--timeout 240] [--again]

Rows land in ``benchmarks/results/vlm_sweep.json``; ``registry_sweep.py --page-only`` writes them into the
supported-architectures page beside the causal LMs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import registry_sweep  # the causal LMs' sweep: its shrink, its runner, its page
import speech_llm_sweep  # the speech LLMs': its audio tower's shrink (omni models hold one beside the vision tower)

JSON = registry_sweep.ROOT / "benchmarks" / "results" / "vlm_sweep.json"
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "depth": 2, "embed_dim": 32, "num_heads": 4, "num_layers": 2}
VISION_DEPTH = {k: VISION[k] for k in ("num_hidden_layers", "depth", "num_layers")}
NEW_TOKENS = 8
# a VisionEncoderDecoderModel (image-to-text: no prompt, no image token) is one type whose text decoder is any causal
# LM: the decoders of the checkpoints it is published with (TrOCR's, ViT-GPT2's, Donut's mBART), each under a tiny
# ViT; the type is served when all are. mBART's encoder_layers stay the decoder's depth: transformers sizes the
# generation cache by the decoder config's num_hidden_layers, which mBART reads from encoder_layers
DECODERS = {"trocr": ("TrOCRConfig", {"d_model": 32, "decoder_layers": 2, "decoder_attention_heads": 2,
                                       "decoder_ffn_dim": 37, "max_position_embeddings": 64}),
            "gpt2": ("GPT2Config", {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64}),
            "mbart": ("MBartConfig", {"d_model": 32, "decoder_layers": 2, "decoder_attention_heads": 2,
                                      "decoder_ffn_dim": 37, "encoder_layers": 2, "max_position_embeddings": 64})}
IMAGE_TO_TEXT = "vision-encoder-decoder"


def vision_encoder_decoder(decoder: str, folder: Path, vocab: int = 100) -> Any:
    """A tiny ViT (32 x 32 images) under ``decoder``'s text decoder (:data:`DECODERS`), random weights, its decoder's
    weights spread so that greedy tokens change from step to step, start token 2, end token 1, saved to ``folder``
    with ViT's image processor at that size; the model."""
    import torch
    import transformers

    config_class, sizes = DECODERS[decoder]
    vision = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                                    image_size=32, patch_size=8)
    text = getattr(transformers, config_class)(vocab_size=vocab, **sizes)
    torch.manual_seed(0)
    model = transformers.VisionEncoderDecoderModel(
        transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(vision, text)).eval()
    for config in (model.config, model.generation_config):
        config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 2, 0, 1
    with torch.no_grad():
        for name, weight in model.decoder.named_parameters():
            if weight.dim() == 2 and not any(k in name for k in ("embed", "wte", "wpe")):
                weight.normal_(0, 0.3)
    model.save_pretrained(folder)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return model


def one_image_to_text(class_name: str, folder: Path) -> dict[str, Any]:
    """A vision encoder-decoder under each of :data:`DECODERS`: PyTorch's greedy tokens from two random images, one
    default ``onnx_nb.export`` (an encoder file taking pixel_values, a decoder with its caches) and
    ``onnx_nb.generate`` from the same pixel values; served when every decoder gives PyTorch's tokens."""
    import torch

    import onnx_nb

    row: dict[str, Any] = {"type": IMAGE_TO_TEXT, "class": class_name, "decoders": {}}
    started = time.perf_counter()
    for decoder in DECODERS:
        part: dict[str, Any] = {}
        row["decoders"][decoder] = part
        try:
            model = vision_encoder_decoder(decoder, folder / decoder)
            cases = []
            for seed in (5, 6):
                pixels = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(seed))
                with torch.no_grad():
                    made = model.generate(pixel_values=pixels, max_new_tokens=NEW_TOKENS, do_sample=False,
                                          num_beams=1)
                cases.append((pixels.numpy(), [int(t) for t in made[0, 1:]]))
        except Exception as exc:  # noqa: BLE001 - a row, not a crash
            registry_sweep.refused(part, "build or generate", "tiny", exc)
            continue
        part["pytorch"], part["image_changes_tokens"] = "ok", cases[0][1] != cases[1][1]
        result = registry_sweep.exported(part, folder / decoder, folder.parent / decoder / "model.onnx", started)
        if result is not None and result:
            registry_sweep.chain_generated(part, result, cases, lambda pixels, done=result: onnx_nb.generate(
                done, {"pixel_values": pixels}, max_new_tokens=NEW_TOKENS, num_beams=1).tokens[0], started)
    parts = row["decoders"]
    row["images"] = "the tower's size"  # its image processor resizes every picture to the encoder's size
    row["image_changes_tokens"] = all(p.get("image_changes_tokens") for p in parts.values())
    for key, good in (("pytorch", "ok"), ("export", "ok"), ("generate", "same")):
        bad = {d: p.get(key) for d, p in parts.items() if p.get(key) != good}
        row[key] = good if not bad else "; ".join(f"{d}: {v}" for d, v in bad.items())[:300]
        if bad:
            break
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def registry() -> dict[str, str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return dict(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)


def tiny_config(model_type: str, text_sizes: dict[str, int], vision_sizes: dict[str, int]) -> Any:
    """The text part shrunk as a causal LM's (``registry_sweep.tiny_config``), the vision tower by ``vision_sizes``
    (names it has, ints only), its output as wide as the text part where the config says so; a vocabulary that
    misses the config's own image token grown to hold it."""
    config = registry_sweep.tiny_config(model_type, text_sizes)
    if getattr(config, "vision_config", 0) is None and "vision_config" in getattr(type(config), "sub_configs", {}):
        config.vision_config = type(config).sub_configs["vision_config"]()  # a default config with no tower (Gemma 4)
    if getattr(config, "audio_config", None) is not None:
        speech_llm_sweep.audio_shrunk(config)
    vision = getattr(config, "vision_config", None)
    if vision is not None:
        text = config.get_text_config()
        if getattr(vision, "model_type", None) != "timm_wrapper":  # a timm tower's widths are its architecture's
            registry_sweep.set_ints(vision, vision_sizes)
            depth = getattr(vision, "num_hidden_layers", None)
            kinds = getattr(vision, "layer_types", None)  # LFM-3-VL's tower mixes convolution and attention
            if isinstance(depth, int) and isinstance(kinds, list) and len(kinds) != depth:
                vision.layer_types = (list(dict.fromkeys(kinds)) + kinds)[:depth]
        vision_sized(config, vision, text)
        if hasattr(vision, "embed_dim") and isinstance(getattr(vision, "hidden_size", None), int):
            vision.hidden_size = text.hidden_size  # Qwen2-VL's tower: embed_dim inside, hidden_size what it gives
        if isinstance(getattr(vision, "out_hidden_size", None), int):
            vision.out_hidden_size = text.hidden_size
        if isinstance(getattr(config, "out_hidden_size", None), int):
            # MUSE Glimmer's merged rows, then a projector as wide as the text part
            from onnx_nb.kinds.vlm.grid import merge_of

            config.out_hidden_size = vision.hidden_size * merge_of(vision) ** 2
            if isinstance(getattr(config, "projector_hidden_size", None), int):
                config.projector_hidden_size = text.hidden_size
        qformer = getattr(config, "qformer_config", None)  # BLIP-2's Q-Former: as small as the tower, and
        if qformer is not None:                              # cross-attending to the tower's states (its config
            registry_sweep.set_ints(qformer, vision_sizes)   # ties the widths when it loads)
            if isinstance(getattr(qformer, "encoder_hidden_size", None), int) and hasattr(vision, "hidden_size"):
                qformer.encoder_hidden_size = vision.hidden_size
        registry_sweep.pooled_image_tokens(config, vision)
    text = config.get_text_config()
    perceiver = getattr(config, "perceiver_config", None)  # Idefics2's resampler: as wide as the text part,
    if perceiver is not None:                               # its latents (the image's token count) kept
        registry_sweep.set_ints(perceiver, {"hidden_size": text.hidden_size, "resampler_n_heads": 4,
                                            "resampler_head_dim": text.hidden_size // 4, "num_key_value_heads": 2,
                                            "resampler_depth": 2})
    rope = getattr(text, "rope_parameters", None)
    if isinstance(rope, dict) and ("vl" in str(getattr(text, "model_type", "")) or "mrope_section" in rope or
                                   hasattr(vision, "temporal_patch_size")):
        # Qwen-VL's multimodal rotary sections (temporal, height, width) sum to half the tiny head size's rotated
        # part (GLM-4.5V rotates half of each head)
        head = int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
        partial = rope.get("partial_rotary_factor") or getattr(text, "partial_rotary_factor", None) or 1.0
        half = int(head * float(partial)) // 2
        rope["mrope_section"] = [half // 4, (half - half // 4) // 2, half - half // 4 - (half - half // 4) // 2]
    from onnx_nb.kinds.vlm.parts import image_token_of

    text = config.get_text_config()
    for name in ("image_token_index", "image_token_id"):  # a default config naming none (BLIP-2's, MiniCPM-V's,
        # Nemotron-H Omni's: the checkpoint's tokenizer adds it): one past the vocabulary, as those checkpoints add it
        if name in vars(config) and getattr(config, name) is None and \
                isinstance(getattr(text, "vocab_size", None), int):
            setattr(config, name, int(text.vocab_size))
    token = image_token_of(config)
    if token is not None and hasattr(vision, "temporal_patch_size") and "vision_start_token_id" not in vars(config):
        # Qwen2.5-Omni's thinker reads it in get_rope_index, its default config lacks it: its checkpoints' numbering
        # (<|vision_start|> three before <|image_pad|>)
        config.vision_start_token_id, config.vision_end_token_id = token - 3, token - 2
    if token is not None and isinstance(getattr(text, "vocab_size", None), int) and token >= text.vocab_size:
        text.vocab_size = token + 64  # a default config whose vocabulary misses its own image token (LLaVA's)
    return config


def vision_sized(config: Any, vision: Any, text: Any) -> None:
    """The sizes that follow the shrunk widths: a vision head as wide as the tower's width over its heads (Pixtral
    names its own), a projection as wide as the text part (PaliGemma), and an image whose patch grid the projector's
    merge factor divides (Idefics3's and Aya Vision's pixel shuffle, Pixtral's merge), at most 64 patches a side
    (Pixtral's 1540-pixel default is 110)."""
    heads = next((h for h in (getattr(vision, n, None) for n in ("num_attention_heads", "num_heads"))
                  if isinstance(h, int)), None)
    if isinstance(getattr(vision, "head_dim", None), int) and heads and isinstance(getattr(vision, "hidden_size", None),
                                                                                  int):
        vision.head_dim = int(vision.hidden_size) // heads
    if isinstance(getattr(vision, "num_key_value_heads", None), int) and heads:
        vision.num_key_value_heads = min(vision.num_key_value_heads, heads)
    for owner, name in ((config, "projection_dim"), (vision, "projection_dim"), (vision, "text_hidden_size"),
                        (vision, "projector_input_dim"), (vision, "projector_output_dim"),
                        (vision, "adapter_out_dim")):
        if isinstance(getattr(owner, name, None), int):
            setattr(owner, name, text.hidden_size)
    for owner, name in ((vision, "adapter_in_dim"), (config, "projection_hidden_size")):  # what reads the tower's
        if isinstance(getattr(owner, name, None), int):  # rows (dots.ocr-3's adapter, Kimi-K2.5's projector's norm)
            setattr(owner, name, vision.hidden_size)
    ratio = getattr(vision, "pixel_shuffle_ratio", None)
    if isinstance(ratio, float) and ratio and isinstance(getattr(vision, "intermediate_size", None), int):
        vision.intermediate_size = int(vision.hidden_size / ratio ** 2)  # Llama 4: the shuffled width
    depth = next((d for d in (getattr(vision, n, None) for n in ("num_hidden_layers", "depth", "num_layers"))
                  if isinstance(d, int)), None)
    if depth:  # layer indexes inside the shrunk tower (Qwen2.5-VL's full-attention blocks, VipLLaVA's features)
        adapter = getattr(config, "adapter_config", None)  # Molmo 2's: the tower layers it reads
        for owner, name in ((vision, "fullatt_block_indexes"), (vision, "deepstack_visual_indexes"),
                            (config, "vision_feature_layers"), (config, "vision_feature_layer"),
                            (adapter, "vision_feature_layers"), (adapter, "vision_feature_layer")):
            found = getattr(owner, name, None)
            if isinstance(found, (list, tuple)) and all(isinstance(i, int) for i in found):
                setattr(owner, name, [max(i, -depth - 1) if i < 0 else min(i, depth - 1) for i in found])
            elif isinstance(found, int):
                setattr(owner, name, max(found, -depth - 1) if found < 0 else min(found, depth))
    side, patch = getattr(vision, "image_size", None), getattr(vision, "patch_size", None)
    if not (isinstance(side, int) and isinstance(patch, int) and patch):
        return
    ratio = getattr(config, "downsample_ratio", None)
    factors = [getattr(config, n, None) for n in ("scale_factor", "downsample_factor", "spatial_merge_size")]
    factors += [round(1 / ratio)] if isinstance(ratio, float) and ratio else []
    factor = next((int(f) for f in factors if isinstance(f, int) and f > 1), 1)
    patches = min(side // patch, 64)
    patches = max(patches - patches % factor, factor)
    if patches * patch != side:
        vision.image_size = patches * patch
        pinpoints = getattr(config, "image_grid_pinpoints", None)  # the resolutions it tiles to: multiples of the
        if isinstance(pinpoints, list) and pinpoints:                # tower's size (LLaVA-OneVision's 384 -> 378)
            config.image_grid_pinpoints = [[int(h) * vision.image_size // side, int(w) * vision.image_size // side]
                                           for h, w in pinpoints]


def torch_tokens(model: Any, ids: Any, pixels: dict[str, Any], token: int) -> list[int]:
    import torch

    from onnx_nb.kinds.vlm.prompts import prompt_extras

    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **pixels,
                             **prompt_extras(model, ids, token), max_new_tokens=NEW_TOKENS, do_sample=False)
    return out[0, ids.shape[1]:].tolist()


def built(model_type: str, class_name: str, folder: Path, row: dict[str, Any]) -> tuple[Any, int, list[Any]] | None:
    """The type built tiny (or, failing that, with its depth only shrunk), saved to ``folder`` and loaded back as
    transformers loads it: the model, its image token and two cases (ids, pixels, PyTorch's greedy tokens); None,
    the reason in ``row``, when PyTorch cannot build or run it."""
    import torch
    import transformers

    from onnx_nb.kinds.vlm.parts import features_of, image_token_of, pixel_sample
    from onnx_nb.kinds.vlm.prompts import prompt_sample

    for size, text, vision in (("tiny", registry_sweep.TINY, VISION),
                               ("depth only", registry_sweep.DEPTH, VISION_DEPTH)):
        cases: list[tuple[Any, dict[str, Any], list[int]]] = []
        try:
            config = tiny_config(model_type, text, vision)
            with torch.device("meta"):
                count = sum(p.numel() for p in getattr(transformers, class_name)(config).parameters())
            if count > registry_sweep.MAX_PARAMETERS:
                raise ValueError(f"{count / 1e6:.0f}M parameters with only its depth shrunk")
            torch.manual_seed(0)
            getattr(transformers, class_name)(config).save_pretrained(folder)
            # the reference is the model the folder holds, as transformers loads it (what export(folder) reads)
            model = transformers.AutoModelForImageTextToText.from_pretrained(folder).eval()
            token = image_token_of(model.config)
            if token is None:
                raise ValueError("its config names no image token (image_token_id / image_token_index)")
            vocab = int(model.get_input_embeddings().num_embeddings)
            for seed in (5, 6):  # two images: PyTorch's tokens for each
                pixels = pixel_sample(model, 1, seed=seed)
                ids = prompt_sample(token, features_of(model, pixels).shape[0], 1, vocab, seed=seed)
                cases.append((ids, pixels, torch_tokens(model, ids, pixels, token)))
            again = transformers.AutoModelForImageTextToText.from_pretrained(folder).eval()
            if torch_tokens(again, cases[0][0], cases[0][1], token) != cases[0][2]:
                raise ValueError("two loads of its saved folder generate differently (weights its checkpoint "
                                 "misses are initialised at random on each load)")
        except Exception as exc:  # noqa: BLE001 - a row, not a crash
            registry_sweep.refused(row, "build or generate", size, exc)
            continue
        row.update(pytorch="ok", size=size, parameters=sum(p.numel() for p in model.parameters()),
                   image_changes_tokens=cases[0][2] != cases[1][2])
        print("PYTORCH_OK", flush=True)
        return model, token, cases
    return None


def one(model_type: str, class_name: str, folder: Path) -> dict[str, Any]:
    """Everything about one type (in a child process)."""
    import onnx_nb

    if model_type == IMAGE_TO_TEXT:
        return one_image_to_text(class_name, folder)
    row: dict[str, Any] = {"type": model_type, "class": class_name}
    started = time.perf_counter()
    made = built(model_type, class_name, folder, row)
    if made is None:
        return row
    cases = made[2]
    result = registry_sweep.exported(row, folder, folder.parent / "onnx", started)
    if result is None:
        return row
    row["images"] = result.image_sizes  # which images its vision file takes
    return registry_sweep.chain_generated(row, result, cases, lambda ids, pixels: onnx_nb.generate(
        result, ids.tolist(), images={k: v.numpy() for k, v in pixels.items()}, max_new_tokens=NEW_TOKENS,
        num_beams=1).tokens[0], started)


def main() -> None:
    registry_sweep.chain_main(__file__, __doc__, JSON, registry, one, "from an image")


if __name__ == "__main__":
    main()
