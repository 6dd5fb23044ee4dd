"""Tiny random Hugging Face models built from configs, saved to local folders (no network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37}

CONFIGS: dict[str, tuple[str, str, dict[str, Any]]] = {
    # name: (model_type, class name, config kwargs)
    "bert": ("bert", "BertForSequenceClassification", {**SMALL, "vocab_size": 100, "num_labels": 3}),
    "gpt2": ("gpt2", "GPT2LMHeadModel", {"n_embd": 32, "n_layer": 2, "n_head": 2, "vocab_size": 100,
                                          "n_positions": 64, "bos_token_id": 1, "eos_token_id": 2,
                                          "pad_token_id": 0}),
    "llama": ("llama", "LlamaForCausalLM", {**SMALL, "vocab_size": 100, "num_key_value_heads": 1,
                                             "max_position_embeddings": 64, "bos_token_id": 1,
                                             "eos_token_id": 2, "pad_token_id": 0}),
    "qwen2": ("qwen2", "Qwen2ForCausalLM", {**SMALL, "vocab_size": 100, "num_key_value_heads": 1,
                                             "max_position_embeddings": 64, "bos_token_id": 1, "eos_token_id": 2,
                                             "pad_token_id": 0}),
    "phi": ("phi", "PhiForCausalLM", {**SMALL, "vocab_size": 100, "max_position_embeddings": 64,
                                       "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}),
    "gpt_neox": ("gpt_neox", "GPTNeoXForCausalLM", {**SMALL, "vocab_size": 100, "max_position_embeddings": 64,
                                                     "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}),
    "t5": ("t5", "T5ForConditionalGeneration", {"d_model": 32, "d_ff": 37, "num_layers": 2,
                                                 "num_heads": 2, "d_kv": 16, "vocab_size": 100,
                                                 "decoder_start_token_id": 0}),
    "vit": ("vit", "ViTForImageClassification", {**SMALL, "image_size": 30, "patch_size": 10,
                                                  "num_labels": 4}),
    "whisper": ("whisper", "WhisperForConditionalGeneration", {
        "d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
        "decoder_attention_heads": 2, "encoder_ffn_dim": 37, "decoder_ffn_dim": 37,
        "vocab_size": 100, "num_mel_bins": 16, "max_source_positions": 30,
        "max_target_positions": 40, "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2,
        "decoder_start_token_id": 3}),
    "wav2vec2": ("wav2vec2", "Wav2Vec2ForCTC", {**SMALL, "vocab_size": 20, "conv_dim": (8, 8),
                                                "conv_kernel": (10, 3), "conv_stride": (5, 2),
                                                "num_conv_pos_embeddings": 4,
                                                "num_conv_pos_embedding_groups": 2,
                                                "pad_token_id": 0}),
    "clip": ("clip", "CLIPModel", {
        "text_config": {**SMALL, "vocab_size": 100, "max_position_embeddings": 32},
        "vision_config": {**SMALL, "image_size": 30, "patch_size": 10}, "projection_dim": 16}),
}


def build(name: str, seed: int = 0) -> Any:
    """The tiny model object for ``name``, in eval mode."""
    import torch
    import transformers

    model_type, cls_name, kwargs = CONFIGS[name]
    config = transformers.AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(seed)
    model = getattr(transformers, cls_name)(config)
    return model.eval()


def save(name: str, folder: Path) -> Path:
    model = build(name)
    model.save_pretrained(folder)
    return folder


try:
    import torch as _torch

    class TinyNet(_torch.nn.Module):
        """A plain module importable by name (pickled checkpoints refer to it)."""

        def __init__(self) -> None:
            super().__init__()
            self.fc = _torch.nn.Linear(3, 2)

        def forward(self, x: Any) -> Any:
            return _torch.relu(self.fc(x))
except ImportError:  # pragma: no cover
    pass


# Encoder-decoders with the generation configs their real checkpoints carry (beams, forced tokens, penalties)
_SEQ = {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
        "decoder_attention_heads": 2, "encoder_ffn_dim": 37, "decoder_ffn_dim": 37, "vocab_size": 100,
        "max_position_embeddings": 64}
GENERATIVE: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {
    # name: (model_type, class name, config kwargs, generation config like the real checkpoints')
    "marian": ("marian", "MarianMTModel", {**_SEQ, "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 2},
               {"num_beams": 4, "bad_words_ids": [[0]], "max_length": 64, "decoder_start_token_id": 0,
                "pad_token_id": 0, "eos_token_id": 2, "forced_eos_token_id": 2}),
    "mbart": ("mbart", "MBartForConditionalGeneration",
              {**_SEQ, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2},
              {"num_beams": 5, "forced_bos_token_id": 50, "forced_eos_token_id": 2, "max_length": 64,
               "decoder_start_token_id": 2, "eos_token_id": 2, "pad_token_id": 1}),
    "m2m_100": ("m2m_100", "M2M100ForConditionalGeneration",
                {**_SEQ, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2,
                 "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0},
                {"num_beams": 5, "forced_bos_token_id": 60, "early_stopping": True, "max_length": 64,
                 "decoder_start_token_id": 2, "eos_token_id": 2, "pad_token_id": 1}),
    "pegasus": ("pegasus", "PegasusForConditionalGeneration",
                {**_SEQ, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0},
                {"num_beams": 8, "length_penalty": 0.8, "forced_eos_token_id": 1, "max_length": 24,
                 "decoder_start_token_id": 0, "eos_token_id": 1, "pad_token_id": 0}),
    "bart": ("bart", "BartForConditionalGeneration",
             {**_SEQ, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2},
             {"num_beams": 4, "length_penalty": 2.0, "no_repeat_ngram_size": 3, "early_stopping": True,
              "forced_bos_token_id": 0, "forced_eos_token_id": 2, "min_length": 5, "max_length": 20,
              "decoder_start_token_id": 2, "eos_token_id": 2, "pad_token_id": 1}),
    "t5": ("t5", "T5ForConditionalGeneration", CONFIGS["t5"][2],
           {"decoder_start_token_id": 0, "eos_token_id": 1, "pad_token_id": 0}),
    "whisper": ("whisper", "WhisperForConditionalGeneration", CONFIGS["whisper"][2],
                {"decoder_start_token_id": 3, "eos_token_id": 2, "pad_token_id": 1, "suppress_tokens": [5, 7],
                 "begin_suppress_tokens": [2, 9], "max_length": 40}),
    "gpt2": ("gpt2", "GPT2LMHeadModel", CONFIGS["gpt2"][2],
             {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "repetition_penalty": 1.2}),
    "llama": ("llama", "LlamaForCausalLM", CONFIGS["llama"][2],
              {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "no_repeat_ngram_size": 2}),
    "qwen2": ("qwen2", "Qwen2ForCausalLM", CONFIGS["qwen2"][2],
              {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "min_new_tokens": 3,
               "bad_words_ids": [[7], [8, 9]]}),
}


SEEDS = {"pegasus": 1}  # seed 0's Pegasus picks EOS first: nothing to compare


def build_generative(name: str, seed: int | None = None, **changes: Any) -> Any:
    """A tiny generative model of ``name`` with its generation config (``changes`` go into the model config)."""
    import torch
    import transformers

    model_type, cls_name, kwargs, generation = GENERATIVE[name]
    config = transformers.AutoConfig.for_model(model_type, **{**kwargs, **changes})
    torch.manual_seed(SEEDS.get(name, 0) if seed is None else seed)
    model = getattr(transformers, cls_name)(config).eval()
    model.generation_config = transformers.GenerationConfig(**generation)
    return model


def clip_tokenizer(folder: Path) -> Any:
    """A CLIP tokenizer with a tiny vocabulary (the letters, each alone and word-final, and a few merges), written
    to ``folder`` and loaded from it: the hub's tokenizers are out of reach here."""
    import json
    import string

    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokens = ["<|startoftext|>", "<|endoftext|>", *string.ascii_lowercase,
              *(c + "</w>" for c in string.ascii_lowercase), "th", "the</w>", "an", "and</w>", "o</w>", "a</w>"]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (folder / "merges.txt").write_text("#version: 0.2\nt h\nth e</w>\na n\nan d</w>\n")
    return transformers.CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=77)


def build_diffusion(folder: Path, seed: int = 0) -> Any:
    """A Stable Diffusion pipeline at a tiny size with random weights (diffusers' own test sizes): a 5-layer CLIP
    text encoder, a two-level UNet with cross-attention, a two-level VAE, DDIM; 64x64 images from 32x32 latents."""
    import diffusers
    import torch
    import transformers

    torch.manual_seed(seed)
    unet = diffusers.UNet2DConditionModel(
        block_out_channels=(32, 64), layers_per_block=2, sample_size=32, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32)
    vae = diffusers.AutoencoderKL(block_out_channels=[32, 64], in_channels=3, out_channels=3, latent_channels=4,
                                  down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2)
    text = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        bos_token_id=0, eos_token_id=1, pad_token_id=1, hidden_size=32, intermediate_size=37, layer_norm_eps=1e-5,
        num_attention_heads=4, num_hidden_layers=5, vocab_size=1000, max_position_embeddings=77))
    scheduler = diffusers.DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                        clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    pipe = diffusers.StableDiffusionPipeline(
        unet=unet.eval(), vae=vae.eval(), text_encoder=text.eval(), tokenizer=clip_tokenizer(folder / "tokenizer"),
        scheduler=scheduler, safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def build_yolo(yaml: str = "yolov8n.yaml", seed: int = 0, size: int = 320) -> Any:
    """An Ultralytics YOLO from its yaml with random weights that behave like trained ones where parity can tell:
    batch norm statistics taken from random images (a freshly built network's features are nearly constant,
    so every anchor ties), class biases raised so some boxes pass the default 0.25 score threshold, and a pose
    head's keypoint offsets scaled to a trained model's size."""
    import torch
    from ultralytics import YOLO

    torch.manual_seed(seed)
    model = YOLO(yaml, verbose=False)
    net = model.model
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = 1.0
    net.train()
    with torch.no_grad():
        net(torch.rand(2, 3, size, size))
    net.eval()
    head = net.model[-1]
    with torch.no_grad():
        for branch in getattr(head, "cv3", []):
            branch[-1].bias += 4.5
        for branch in getattr(head, "cv4", []) if hasattr(head, "kpt_shape") else []:
            branch[-1].weight *= 0.05  # keypoint offsets of a trained model's size (a few strides, not hundreds)
    return model
