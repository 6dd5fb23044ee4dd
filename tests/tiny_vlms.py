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
        "text_config": _llama(300), "image_token_index": 260, "image_grid_pinpoints": [[32, 32]],
        "vision_config": {"model_type": "clip_vision_model", **VISION}}),
    "internvl": ("InternVLForConditionalGeneration", {
        "text_config": {"model_type": "qwen2", **TEXT, "vocab_size": 300}, "image_token_id": 260,
        "vision_config": {**VISION, "image_size": [32, 32], "patch_size": [8, 8]}, "downsample_ratio": 0.5}),
    "cohere2_vision": ("Cohere2VisionForConditionalGeneration", {
        "text_config": {"model_type": "cohere2", **TEXT, "vocab_size": 300}, "image_token_id": 260,
        "vision_config": {"model_type": "siglip_vision_model", **VISION}, "downsample_factor": 2}),
}


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
            if "vision" in name or "projector" in name or "connector" in name:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)
    return model
