"""Which of the encoder-task models transformers registers onnx-nb serves, measured on the registry itself: for each
task mapping below (``AutoModelForSequenceClassification``'s, ``AutoModelForTokenClassification``'s, ...), every
model type in it built tiny from its own default config (as ``registry_sweep``'s causal LMs: 2 layers, width 64,
random weights), saved as a folder, then: can PyTorch build it and run its forward on onnx-nb's own sample for it
(``hf.samples.build``: token ids, pixels or audio from the config; a model PyTorch builds but that rejects the
sample is counted, as the export would fail on it too)? does one default ``onnx_nb.export(folder)``
write a file whose outputs match PyTorch's at the sample's shapes and at others (the export's own check)? do INT8
(``quantize()``) and INT4 (``method="int4"``) pass their parity? Each model runs in a process of its own with a time
limit (``registry_sweep.run_rows``).

    .venv/bin/python benchmarks/task_sweep.py [--task fill-mask,image-classification] [--only bert,vit]
        [--timeout 240] [--no-variants] [--again]

Rows land in ``benchmarks/results/tasks/<task>.json``, one file per task; ``registry_sweep.py --page-only`` writes
them into the supported-architectures page. The whole set is about 740 types (6 to 7 hours on 2 cores): run a task
or some at a time.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import registry_sweep  # the causal LMs' sweep: its shrink, its runner, its page

RESULTS = registry_sweep.ROOT / "benchmarks" / "results" / "tasks"
# the sizes tried in turn, the first PyTorch builds and runs kept: the tiny shrink, depth only, then the tiny shrink
# reaching the sub-configs' own sub-configs (a wrapper of a vision-language model: its towers stayed full size)
SIZES = (("tiny", registry_sweep.TINY), ("depth only", registry_sweep.DEPTH), ("nested", registry_sweep.TINY))
# task (onnx-nb's and the Hub's name) -> transformers' mapping of model type -> class, smallest first
TASKS = {
    "audio-classification": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    "ctc": "MODEL_FOR_CTC_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "fill-mask": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "question-answering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "token-classification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "text-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "depth-estimation": "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",
    "semantic-segmentation": "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
    "object-detection": "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
    "zero-shot-image-classification": "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "zero-shot-object-detection": "MODEL_FOR_ZERO_SHOT_OBJECT_DETECTION_MAPPING_NAMES",
    "instance-segmentation": "MODEL_FOR_INSTANCE_SEGMENTATION_MAPPING_NAMES",
    "universal-segmentation": "MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES",
    "mask-generation": "MODEL_FOR_MASK_GENERATION_MAPPING_NAMES",
    "keypoint-detection": "MODEL_FOR_KEYPOINT_DETECTION_MAPPING_NAMES",
    "image-to-image": "MODEL_FOR_IMAGE_TO_IMAGE_MAPPING_NAMES",
    "masked-image-modeling": "MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES",
    "video-classification": "MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES",
    "audio-frame-classification": "MODEL_FOR_AUDIO_FRAME_CLASSIFICATION_MAPPING_NAMES",
    "audio-xvector": "MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES",
    "multiple-choice": "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",
    "next-sentence-prediction": "MODEL_FOR_NEXT_SENTENCE_PREDICTION_MAPPING_NAMES",
    "time-series-classification": "MODEL_FOR_TIME_SERIES_CLASSIFICATION_MAPPING_NAMES",
    "time-series-regression": "MODEL_FOR_TIME_SERIES_REGRESSION_MAPPING_NAMES",
    "time-series-prediction": "MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES",
    "text-to-waveform": "MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES",
    "image-feature-extraction": "MODEL_FOR_IMAGE_MAPPING_NAMES",
    "text-encoding": "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES",
    "backbone": "MODEL_FOR_BACKBONE_MAPPING_NAMES",
    "image-matting": "MODEL_FOR_IMAGE_MATTING_MAPPING_NAMES",
    "normal-estimation": "MODEL_FOR_NORMAL_ESTIMATION_MAPPING_NAMES",
    "pointmap-estimation": "MODEL_FOR_POINTMAP_ESTIMATION_MAPPING_NAMES",
    "pose-estimation": "MODEL_FOR_POSE_ESTIMATION_MAPPING_NAMES",
    "keypoint-matching": "MODEL_FOR_KEYPOINT_MATCHING_MAPPING_NAMES",
    "image-segmentation": "MODEL_FOR_IMAGE_SEGMENTATION_MAPPING_NAMES",
    "causal-image-modeling": "MODEL_FOR_CAUSAL_IMAGE_MODELING_MAPPING_NAMES",
    "text-recognition": "MODEL_FOR_TEXT_RECOGNITION_MAPPING_NAMES",
    "table-recognition": "MODEL_FOR_TABLE_RECOGNITION_MAPPING_NAMES",
    "document-question-answering": "MODEL_FOR_DOCUMENT_QUESTION_ANSWERING_MAPPING_NAMES",
    "table-question-answering": "MODEL_FOR_TABLE_QUESTION_ANSWERING_MAPPING_NAMES",
    "visual-question-answering": "MODEL_FOR_VISUAL_QUESTION_ANSWERING_MAPPING_NAMES",
    "retrieval": "MODEL_FOR_RETRIEVAL_MAPPING_NAMES",
    "text-to-spectrogram": "MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES",
    "rnnt": "MODEL_FOR_RNNT_MAPPING_NAMES",
    "tdt": "MODEL_FOR_TDT_MAPPING_NAMES",
    "decision": "MODEL_FOR_DECISION_MAPPING_NAMES",
}
# what a task's check covers, where that is less than the task's natural output
COVERS = {
    "text-to-waveform": "What is checked is the forward as it runs on onnx-nb's sample (token ids): for the generative "
                        "text-to-speech models that is one step's logits over their audio codes (a multi-file "
                        "export such as VibeVoice's, the chain's logits), not audio; the loop that samples the codes "
                        "and the codec or vocoder that makes them a waveform are not in the file. VITS draws noise "
                        "(its stochastic duration predictor, its prior): its file takes the noise scales and the "
                        "speaking rate as inputs, and is checked at no noise, where PyTorch repeats itself; "
                        "FastSpeech 2 and VITS give their waveform.",
    "text-to-spectrogram": "What is checked is the forward on token ids and, for SpeechT5, the spectrogram frames so "
                           "far and a speaker embedding: one step of its decoder, not the loop that stops at its "
                           "end-of-speech score nor the vocoder. SpeechT5's decoder prenet drops out at inference "
                           "too (a fresh Bernoulli mask per layer on each call): its file takes the masks' uniform "
                           "draws as an input, so it is checked run for run at the sample's draws; FastSpeech 2 "
                           "expands each token by its predicted duration, as tensor operations over every row.",
    "zero-shot-object-detection": "What is checked is the forward on an image and its text queries as the "
                                  "processor gives them (OWL-ViT's and Grounding DINO's prompt of token ids; "
                                  "OmDet-Turbo's class names, flattened into rows with how many are each image's, "
                                  "and a task prompt per image): every query's logits and boxes, not the "
                                  "post-processing that keeps those above a threshold.",
    "keypoint-matching": "Each matcher runs its keypoint detector at full width on the processor's 480 x 640 pairs "
                         "(only the depth is shrunk where the width shrink breaks its ties): SuperGlue's export "
                         "does not finish in the sweep's time, LightGlue prunes keypoints and stops early by "
                         "their values (a data-dependent branch no exporter follows).",
    "rnnt": "What is checked is the forward as training runs it: the encoder on the features and the joint network "
            "over the given labels; the transducer's greedy decoding loop is not in the file.",
    "tdt": "What is checked is the forward as training runs it: the encoder on the features and the joint network "
           "over the given labels (tokens and durations); the decoding loop is not in the file.",
    "visual-question-answering": "BLIP's answer is decoded: what is checked is its forward on the image, the question "
                                 "and answer ids so far (one step), not the loop. ViLT draws its image patches in a "
                                 "random order; the file takes them in raster order (the answer does not depend on "
                                 "it) and takes the processor's pixel mask.",
}
# the names a vision encoder gives its stages (one entry per stage): their count is kept, each stage one block deep
STAGE_LISTS = ("depths", "hidden_sizes")
STAGE_COUNTS = ("num_stages", "num_hidden_layers", "num_layers")
IMAGE_SIDE = 224  # a larger default image size is brought down to this


def registry(task: str) -> dict[str, str]:
    from transformers.models.auto import modeling_auto

    # a type with two classes (DeiT's with and without its teacher) is swept with the first, the plain one
    return {t: c if isinstance(c, str) else c[0] for t, c in getattr(modeling_auto, TASKS[task]).items()}


def own_config(config: Any, class_name: str) -> Any:
    """The config ``class_name`` takes: where the type's config holds others (Llama 4's, Mllama's), the one of the
    class's own config class (Llama4TextModel's text config, the text- and image-encoding mappings' towers)."""
    import transformers

    wanted = getattr(getattr(transformers, class_name, None), "config_class", None)
    if not isinstance(wanted, type) or isinstance(config, wanted):
        return config
    return next((v for v in vars(config).values() if isinstance(v, wanted)), config)


def path_of(task: str) -> Path:
    return RESULTS / f"{task}.json"


def tiny_config(model_type: str, sizes: dict[str, int], task: str = "", nested: bool = False) -> Any:
    """``registry_sweep.tiny_config``; a config with per-stage lists (ConvNeXt's, Swin's, ResNet's ``depths`` and
    ``hidden_sizes``) keeps its stage count (which some alias as ``num_hidden_layers``: shrunk, it would drop
    stages the head's width is read from) and its widths, with each stage one block deep. ``nested``: the
    sub-configs' own sub-configs too (ColPali's vision-language model's towers), the sweep's last size."""
    import transformers

    default = transformers.AutoConfig.for_model(model_type)
    config = registry_sweep.tiny_config(model_type, sizes)
    for sub in [config, *(sub_configs(config) if nested else vars(config).values())]:  # the other sub-configs
        # (CLIP's vision tower, LASR's encoder) too
        if isinstance(getattr(sub, "image_size", None), int) and sub.image_size > IMAGE_SIDE:
            sub.image_size = IMAGE_SIDE  # EfficientNet's default config is B7's, at 600 x 600 ...
        if isinstance(getattr(sub, "img_size", None), int) and sub.img_size > IMAGE_SIDE:
            sub.img_size = IMAGE_SIDE  # ... and a timm backbone's fixed size follows (OmDet-Turbo's Swin at 640)
        if isinstance(getattr(sub, "depth_coefficient", None), float):  # ... and 3.1 x as deep as B0
            sub.depth_coefficient = 1.0
        for name in ("num_frames", "frames_per_clip"):  # a video model's clip: 8 frames (V-JEPA 2's 64 frames of
            if isinstance(getattr(sub, name, None), int) and getattr(sub, name) > 8:  # 256 x 256 exhausted the
                setattr(sub, name, 8)                                                 # machine's memory)
        if isinstance(getattr(sub, "crop_size", None), int) and sub.crop_size > IMAGE_SIDE:
            sub.crop_size = IMAGE_SIDE
        if isinstance(sub, transformers.PretrainedConfig) and sub is not config:
            heads, kv_heads = getattr(sub, "num_attention_heads", None), getattr(sub, "num_key_value_heads", None)
            registry_sweep.set_ints(sub, sizes)
            if isinstance(heads, int) and isinstance(kv_heads, int) and kv_heads >= heads:
                sub.num_key_value_heads = sub.num_attention_heads  # multi-head stays multi-head, as at the top
                # (Granite Speech 5's encoder has no grouped key/value heads)
            if isinstance(getattr(sub, "depths", None), (list, tuple)):  # a backbone's stages (RT-DETR's ResNet,
                sub.depths = type(sub.depths)([1] * len(sub.depths))      # D-FINE's HGNetV2): one block each
            if getattr(sub, "model_type", None) == "timm_backbone" and getattr(sub, "backbone", None) == "resnet50":
                sub.backbone = "resnet18"  # DETR's timm ResNet-50 (25M parameters): its family's smallest
        for name in [n for n in vars(sub) if n.endswith("_attention_heads")] if isinstance(
                getattr(sub, "hidden_size", None), int) and "num_attention_heads" in sizes else ():
            if isinstance(getattr(sub, name), int) and sub.hidden_size % getattr(sub, name):
                setattr(sub, name, sizes["num_attention_heads"])  # SpeechT5's decoder's heads beside the encoder's
        if isinstance(getattr(sub, "coordinate_size", None), int) and isinstance(getattr(sub, "shape_size", None), int):
            # LayoutLMv2/v3: a box's four coordinates and its two sides are embedded side by side, the width in all
            sub.coordinate_size = sub.hidden_size // 6
            sub.shape_size = (sub.hidden_size - 4 * sub.coordinate_size) // 2
        if isinstance(getattr(sub, "part_features", None), int) and isinstance(getattr(sub, "hidden_size", None), int):
            sub.part_features = sub.hidden_size // 3  # ViTPose's experts' share of the width (256 of 768)
    stages = next((len(v) for n in STAGE_LISTS if isinstance(v := getattr(default, n, None), (list, tuple))), None)
    if stages:
        for name in STAGE_COUNTS:
            if getattr(default, name, None) == stages and not isinstance(getattr(type(config), name, None), property):
                setattr(config, name, stages)  # (DINOv3 ConvNeXt's num_stages is read from its depths)
        if isinstance(getattr(config, "depths", None), (list, tuple)):
            config.depths = type(config.depths)([1] * len(config.depths))
    text, vision = getattr(config, "text_config", None), getattr(config, "vision_config", None)
    if isinstance(getattr(text, "encoder_hidden_size", None), int) and hasattr(vision, "hidden_size"):
        text.encoder_hidden_size = vision.hidden_size  # BLIP's text cross-attends to the image (its config ties them)
    if isinstance(getattr(text, "projection_size", None), int) and isinstance(getattr(vision, "hidden_size", None),
                                                                              int):
        text.projection_size = vision.hidden_size  # SigLIP's text head projects into the image's width
    if vision is not None:
        registry_sweep.pooled_image_tokens(config, vision)
    audio_width = getattr(getattr(config, "audio_config", None), "hidden_size", None)
    for sub in vars(config).values() if isinstance(audio_width, int) else ():
        if isinstance(getattr(sub, "audio_hidden_size", None), int):  # Nemotron 3's diarization head reads its
            sub.audio_hidden_size = audio_width                          # audio tower's width
    if task == "zero-shot-object-detection" and isinstance(getattr(config, "projection_dim", None), int) \
            and isinstance(getattr(text, "hidden_size", None), int):
        config.projection_dim = text.hidden_size  # OWL-ViT's box classes compare both in the text's width
    if getattr(config, "model_type", None) == "timm_backbone" and not config.backbone:
        config.backbone = "resnet18"  # the wrapper's default config names no timm model: the one DETR's uses
    if task == "image-segmentation" and isinstance(getattr(config, "d_model", None), int):
        config.encoder_attention_heads = 8  # DETR's mask head groups its width and heads in eights (64 + 8)
    if model_type == "esm" and config.vocab_size is None:
        # a default config without its vocabulary (ESM's: each checkpoint names its alphabet): ESM-2's 33 tokens, its
        # padding and mask ids where unset (the embedding was built from None, positions counted from None padding)
        config.vocab_size = 33
        for name, value in (("pad_token_id", 1), ("mask_token_id", 32)):
            if getattr(config, name, None) is None:
                setattr(config, name, value)
    blocks = getattr(config, "num_blocks", None)
    if isinstance(blocks, int) and isinstance(layers := getattr(config, "num_hidden_layers", None), int) \
            and isinstance(getattr(config, "num_queries", None), int) and blocks >= layers > 1:
        config.num_blocks = layers - 1  # EoMT's last layers that attend with its queries: within the shrunk depth,
        # one plain layer before them (its queries join at layer depth - num_blocks: never, past the depth)
    if isinstance(getattr(config, "conv_dim", None), int) and isinstance(getattr(config, "hidden_dim", None), int) \
            and getattr(config, "enforce_input_proj", None) is False:
        config.conv_dim = config.mask_dim = config.hidden_dim  # OneFormer's pixel decoder feeds its transformer
        # in the transformer's width (256, 256 and 256 in every checkpoint): shrunk apart, its input projections (a
        # plain list, not registered modules) are never saved, and the folder loads them on the meta device
    if isinstance(getattr(config, "text_projection_in_dim", None), int) and isinstance(
            getattr(text, "hidden_size", None), int):
        # OmDet-Turbo: its text tower's width, the classes' projection and the task prompt's encoder all at CLIP's
        # 512 in its checkpoints (the prompt's token states go to the task encoder unprojected): shrunk together
        config.text_projection_in_dim = config.text_projection_out_dim = config.class_embed_dim = text.hidden_size
    necked_backbone(config)  # first: a neck's reads decide its backbone's depth
    prompted_segmenter(config, sizes)
    headed(config, task)
    for sub in [] if stages else [config, *vars(config).values()]:
        if isinstance(getattr(sub, "stage_names", None), list) and getattr(sub, "out_features", None) \
                and isinstance(getattr(sub, "num_hidden_layers", None), int) \
                and len(sub.stage_names) != sub.num_hidden_layers + 1:
            # a backbone-capable ViT (BEiT, DINOv2; TIPS' vision tower) names a stage per layer and reads its output
            # at the last one: both follow the shrunk depth, else its saved config no longer loads (out_features
            # outside stage_names)
            sub.stage_names = ["stem"] + [f"stage{i}" for i in range(1, sub.num_hidden_layers + 1)]
            sub.out_features = [sub.stage_names[-1]]
    # as the saved folder gives it back (its JSON): a default left a tuple where the model adds a list to it
    # (ViTMatte's fusion_hidden_sizes), and a checkpoint's config.json holds lists
    return type(config).from_dict(json.loads(config.to_json_string(use_diff=False)))


def sub_configs(config: Any) -> list[Any]:
    """Every config ``config`` holds, at any depth, each once (outermost first)."""
    import transformers

    found: dict[int, Any] = {}
    stack = [config]
    while stack:
        for value in vars(stack.pop(0)).values():
            if isinstance(value, transformers.PretrainedConfig) and id(value) not in found and value is not config:
                found[id(value)] = value
                stack.append(value)
    return list(found.values())


def necked_backbone(config: Any) -> None:
    """A dense-prediction model whose neck reads several of its ViT backbone's layers (DPT's ``backbone_out_indices``;
    Depth Anything's, ZoeDepth's, TIPS' backbone config ``out_indices``, e.g. layers 9 to 12 of 12) keeps one layer
    per output, each read: the shrunk depth (2) would leave the indices past its last layer and the neck without its
    inputs. The neck's reassembly width follows the backbone's shrunk width where it is tied to it."""
    own = getattr(config, "backbone_out_indices", None)
    if isinstance(own, (list, tuple)) and len(own) > 1 and max(own) >= getattr(config, "num_hidden_layers", 0):
        config.num_hidden_layers = len(own)
        config.backbone_out_indices = list(range(len(own)))
    backbone = getattr(config, "backbone_config", None)
    indices = getattr(backbone, "out_indices", None)
    if isinstance(indices, (list, tuple)) and len(indices) > 1 and isinstance(getattr(backbone, "stage_names", None),
                                                                              list) \
            and max(indices) > getattr(backbone, "num_hidden_layers", len(backbone.stage_names)):
        backbone.num_hidden_layers = len(indices)
        backbone.stage_names = ["stem"] + [f"stage{i}" for i in range(1, len(indices) + 1)]
        backbone.set_output_features_output_indices(out_features=None, out_indices=list(range(1, len(indices) + 1)))
    if backbone is not None and isinstance(getattr(config, "reassemble_hidden_size", None), int):
        config.reassemble_hidden_size = getattr(backbone, "hidden_size", config.reassemble_hidden_size)


def headed(config: Any, task: str) -> None:
    """A dense head whose layers only a checkpoint names (Sapiens2's default config has no head: each released
    model's config gives its task's upsampling and refinement channels; the pointmap model a branch for its
    focal-length scale too): two upsampling blocks and one refinement layer, 32 channels each."""
    head = getattr(config, "head_config", None)
    if head is None or not hasattr(head, "upsample_out_channels") or head.upsample_out_channels is not None:
        return
    head.upsample_out_channels, head.upsample_kernel_sizes = [32, 32], [4, 4]
    head.conv_out_channels, head.conv_kernel_sizes = [32], [1]
    if task == "pointmap-estimation":
        head.scale_conv_out_channels, head.scale_conv_kernel_sizes = [32], [1]
        head.scale_final_hidden_sizes = [32, 32]
        head._init_scale_final_input_size(image_size=config.image_size, patch_size=config.patch_size)


def prompted_segmenter(config: Any, sizes: dict[str, int]) -> None:
    """A promptable segmenter (SAM, SAM-HQ, SAM 2, EdgeTAM, SAM 3's tracker: a vision encoder, a prompt encoder and a
    mask decoder) keeps what its three configs tie: the vision tower's output width (SAM's ``output_channels``, its
    positional features; SAM 2's FPN width) is the prompt encoder's and the mask decoder's; the image grid the prompt
    encoder is built for (``image_size // patch_size``) is the one the vision tower gives at the shrunk image size, and
    SAM 2's feature sizes (three levels, each twice the next) follow it. Its backbone, one level further down, is
    shrunk too: SAM 2's Hiera one block per stage (two in the stage with the global block, which may not open a
    stage), SAM 3's ViT to the tiny widths at 336 x 336 (24 x 24 patches, one of its 24-wide windows); EdgeTAM's
    timm backbone is the RepViT its config means (transformers 5.24 spells the field ``archirecture`` and the
    wrapper falls back to ResNet-50, whose widths its neck does not take)."""
    prompt, decoder = getattr(config, "prompt_encoder_config", None), getattr(config, "mask_decoder_config", None)
    vision = getattr(config, "vision_config", None)
    if prompt is None or decoder is None or vision is None:
        return
    width, side = prompt.hidden_size, prompt.image_size
    backbone = getattr(vision, "backbone_config", None)
    if isinstance(getattr(backbone, "blocks_per_stage", None), list):  # Hiera
        backbone.blocks_per_stage = [1, 1, 2, 1][:len(backbone.blocks_per_stage)]
        backbone.global_attention_blocks = [3]
        backbone.image_size = [side, side]
    if getattr(backbone, "archirecture", None):
        backbone.architecture = backbone.archirecture
    if isinstance(getattr(backbone, "global_attn_indexes", None), list):  # SAM 3's ViT
        registry_sweep.set_ints(backbone, sizes)
        backbone.global_attn_indexes = [backbone.num_hidden_layers - 1]
        side = prompt.image_size = backbone.image_size = 24 * backbone.patch_size
    if isinstance(getattr(vision, "output_channels", None), int):  # SAM, SAM-HQ: the ViT is the vision config
        vision.output_channels, vision.num_pos_feats = width, width // 2
        vision.global_attn_indexes = [vision.num_hidden_layers - 1]
        vision.mlp_dim = 4 * vision.hidden_size
        prompt.image_embedding_size = side // prompt.patch_size
    if isinstance(getattr(decoder, "vit_dim", None), int):  # SAM-HQ's decoder reads the ViT's own width
        decoder.vit_dim = vision.hidden_size
    if isinstance(getattr(vision, "fpn_hidden_size", None), int):
        vision.fpn_hidden_size = width
        levels = len(vision.backbone_feature_sizes)
        vision.backbone_feature_sizes = [[side // prompt.patch_size * 2 ** (levels - 1 - i)] * 2
                                         for i in range(levels)]
    decoder.mlp_dim, decoder.iou_head_hidden_dim = 4 * decoder.hidden_size, decoder.hidden_size


def runs_plainly(model: Any) -> bool:
    """Whether a model runs on the plainest input (a text model: one row of token ids ending with its end-of-sequence
    token, where encoder-decoder classifiers pool; an image model: random pixels at its own image size), or it takes
    something else: a model that refuses even that fails at this size whatever onnx-nb's sample holds (a backbone
    whose neck reads layers the shrink removed)."""
    import torch

    if getattr(model, "main_input_name", "input_ids") == "pixel_values":  # random pixels at its own image size
        vision = getattr(model.config, "vision_config", None) or getattr(model.config, "backbone_config", None) \
            or model.config
        side = getattr(model.config, "image_size", None) or getattr(vision, "image_size", None) or IMAGE_SIDE
        side = int(side[0] if isinstance(side, (list, tuple)) else side)
        channels = int(getattr(vision, "num_channels", 3) or 3)
        try:
            with torch.no_grad():
                model(pixel_values=torch.randn(1, channels, side, side))
            return True
        except Exception:  # noqa: BLE001 - the answer, not a crash
            return False
    if getattr(model, "main_input_name", "input_ids") != "input_ids":
        return True
    ids = torch.arange(3, 10).reshape(1, 7)
    eos = getattr(registry_sweep.text_of(model.config), "eos_token_id", None)
    if isinstance(eos, int):
        ids[0, -1] = eos
    try:
        with torch.no_grad():
            model(input_ids=ids)
        return True
    except Exception:  # noqa: BLE001 - the answer, not a crash
        return False


def float_outputs(model: Any) -> list[Any]:
    """The model's non-empty float outputs on onnx-nb's sample; none where the sample does not run (the sample's own
    refusal is the row's, later)."""
    import torch

    from onnx_nb.kinds.hf import samples
    from onnx_nb.steps.export.machinery.wrap import output_paths, pick

    try:
        with torch.no_grad():
            out = model(**samples.build(model).as_dict())
    except Exception:  # noqa: BLE001 - the row's, later
        return []
    # the tensors the export takes as the model's outputs (a backbone's feature maps, each one)
    tensors = [pick(out, path) for _, path in output_paths(out, hf=True)]
    return [v for v in tensors if v.is_floating_point() and v.numel()]


def underflows(outputs: list[Any]) -> bool:
    """Whether one of the model's float outputs (:func:`float_outputs`) is nonzero but below 1e-20 everywhere (random
    weights at the model's own init scale through many layers: an output no parity check can judge, as a backbone's
    first feature map while its last is of a usable size); False where the sample did not run."""
    return any(0 < float(v.abs().max()) < 1e-20 for v in outputs)


def flat(outputs: list[Any]) -> bool:
    """Whether one of the model's float outputs (:func:`float_outputs`) is flat: at least 64 nonzero values all within
    1% of the largest (random weights at the init scale: every keypoint score of a detector near 1/65), where which
    values survive an exact comparison (non-maximum suppression's ``scores == max_pool(scores)``) is decided by
    rounding, so two correct runtimes keep different keypoints; False where the sample did not run."""
    for value in outputs:
        nonzero = value[value != 0].abs()
        if nonzero.numel() >= 64 and float(nonzero.max() - nonzero.min()) < 0.01 * float(nonzero.max()):
            return True
    return False


def built(task: str, model_type: str, class_name: str, folder: Path, row: dict[str, Any]) -> bool:
    """The type for ``task`` at the first size PyTorch builds and runs on onnx-nb's own sample, saved in ``folder``;
    False (the reason in ``row``) where it cannot, or where the sample is refused (an export note in ``row``)."""
    import torch
    import transformers

    from onnx_nb.errors import first_line
    from onnx_nb.kinds.hf import samples

    for size, sizes in SIZES:
        row.pop("init", None)  # this size's own draw
        try:
            config = own_config(tiny_config(model_type, sizes, task, nested=size == "nested"), class_name)
            if task == "text-classification":  # a decoder's classifier pools at the last token that is not padding
                for owner in {id(c): c for c in (config, registry_sweep.text_of(config))}.values():
                    if getattr(owner, "pad_token_id", 0) is None:
                        owner.pad_token_id = 0
            if task == "ctc" and getattr(config, "vocab_size", 0) is None:
                config.vocab_size = 32  # a CTC head's letters: the fine-tuning's tokenizer names them
            with torch.device("meta"):
                count = sum(p.numel() for p in getattr(transformers, class_name)(config).parameters())
            if count > registry_sweep.MAX_PARAMETERS:
                raise ValueError(f"{count / 1e6:.0f}M parameters at the {size} size")
            torch.manual_seed(0)
            model = getattr(transformers, class_name)(config).eval()
            scale = getattr(config, "initializer_range", 0.02)
            outputs = float_outputs(model)  # one run of the sample for both judgements
            widened = underflows(outputs) or (task == "keypoint-detection" and flat(outputs))
            if widened and isinstance(scale, float):
                # at its own init scale the outputs underflow (MobileViT's logits: ~1e-40), which no check can
                # tell from another model's, or a detector's scores are flat (see flat): ten times wider, noted
                # (a config without the field, PP-LCNet's, is drawn at the library's 0.02, which the field
                # overrides)
                row["init"] = f"initializer_range {scale:g} -> {scale * 10:g}"
                config.initializer_range = scale * 10
                torch.manual_seed(0)
                model = getattr(transformers, class_name)(config).eval()
            registry_sweep.spread_zero_routers(model, config)
            model.save_pretrained(folder)
        except Exception as exc:  # noqa: BLE001 - a row, not a crash
            registry_sweep.refused(row, "build", size, exc)
            continue
        try:  # onnx-nb's own sample: a model that rejects it is counted (the export would build the same one)
            with torch.no_grad():
                model(**samples.build(model).as_dict())
        except Exception as exc:  # noqa: BLE001
            if not runs_plainly(model):  # no input runs it at this size: the shrink's, not the sample's
                registry_sweep.refused(row, "run", size, exc)
                continue
            if size == "tiny":  # the depth-only size may take it (a config whose widths the shrink tied wrong)
                row["sample_tiny"] = f"{type(exc).__name__}: {first_line(exc)}"[:200]
                continue
            row.update(pytorch="ok", size=size, export=f"onnx-nb's sample: {type(exc).__name__}: "
                                                          f"{first_line(exc)}"[:300])
            return False
        row.update(pytorch="ok", size=size, parameters=sum(p.numel() for p in model.parameters()))
        print("PYTORCH_OK", flush=True)
        break
    if row.get("pytorch") != "ok" and "sample_tiny" in row:  # built tiny, rejected the sample; no other size built
        row.update(pytorch="ok", size="tiny", export=f"onnx-nb's sample: {row['sample_tiny']}")
    return row.get("pytorch") == "ok" and not row.get("export")


def one(task: str, model_type: str, class_name: str, folder: Path, variants: bool) -> dict[str, Any]:
    """Everything about one type for one task (in a child process)."""
    import onnx_nb

    row: dict[str, Any] = {"type": model_type, "class": class_name, "task": task}
    started = time.perf_counter()
    if not built(task, model_type, class_name, folder, row):
        return row
    result = registry_sweep.exported(row, folder, folder.parent / "onnx" / "model.onnx", started)
    if result is None:
        return row
    if isinstance(result, onnx_nb.SamExport):  # two files: judged chained, by their masks for prompts of points
        parity = onnx_nb.check_sam(result, points=3)
        row["export"], row["check"] = ("ok" if parity else "check failed"), parity.summary[:300]
        if variants and parity:  # the variants of its vision encoder (nearly all its weights), each by its parity
            registry_sweep.quantized(row, result.parts["vision_encoder"], folder.parent / "onnx")
        row["seconds"] = round(time.perf_counter() - started, 1)
        return row
    if not hasattr(result, "check_text"):  # files chained (a speech LLM's, VibeVoice's): the chain's own check
        row["check"] = str(getattr(result, "chain", {}).get("summary", "") or result.status)[:300]
        if variants and result and "decoder" in result.parts:  # the variants of its decoder, judged on the chain
            registry_sweep.quantized(row, result.parts["decoder"], folder.parent / "onnx")
        row["seconds"] = round(time.perf_counter() - started, 1)
        return row
    row["check"] = result.check_text()[:300]
    fixed = [f"{f.input}[{f.axis}]" for f in result.fixed_axes if hasattr(f, "input")]
    if fixed:
        row["fixed_axes"] = fixed
    if variants and result:
        registry_sweep.quantized(row, result, folder.parent / "onnx")
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def served(row: dict[str, Any]) -> bool:
    return row.get("export") == "ok"


def section(task: str) -> list[str]:
    """One task's part of the page, from its rows."""
    path = path_of(task)
    if not path.exists():
        return [f"### {task}", "", f"Not swept yet: run `benchmarks/task_sweep.py --task {task}`.", ""]
    saved = json.loads(path.read_text())
    rows, meta = saved["rows"], saved["meta"]
    base = [r for r in rows if registry_sweep.counted(r)]
    good = [r for r in base if served(r)]
    return [f"### {task}", "",
            f"`{TASKS[task].replace('_NAMES', '')}`, swept {meta['date']} on transformers {meta['transformers']}: "
            f"**{len(good)} of the {len(base)} types PyTorch builds "
            f"({100 * len(good) / max(1, len(base)):.1f}%) export with one default call and match PyTorch** at "
            f"the sample's shapes and others; {_swept(rows, task)}." + unquantized(good), "",
            *([COVERS[task], ""] if task in COVERS else []), *table(rows), ""]


def unquantized(good: list[dict[str, Any]]) -> str:
    """What the page says of served rows run without their INT8 and INT4 variants (``--no-variants``)."""
    bare = [r["type"] for r in good if "int8" not in r and "int4" not in r]
    if not bare:
        return ""
    if len(bare) == len(good):
        return " This run exported only (`--no-variants`): the INT8 and INT4 columns are left empty."
    return (f" INT8 and INT4 run for {len(good) - len(bare)} of the {len(good)} served so far; exported only "
            f"(`--no-variants`), their INT8 and INT4 cells empty: {', '.join(bare)}.")


def _swept(rows: list[dict[str, Any]], task: str) -> str:
    """How many of the task's registered types the rows cover: all, or so far (a sweep stopped partway)."""
    registered = len(registry(task))
    if len(rows) >= registered:
        return f"{registered} types registered"
    return f"{len(rows)} of its {registered} registered types swept so far (the rest not yet run)"


def table(rows: list[dict[str, Any]]) -> list[str]:
    """Rows of a sweep without generation (export, INT8, INT4), with the reason for every gap."""
    import html

    cell = registry_sweep.cell
    lines = ["| type | class | export | INT8 | INT4 | what stopped it |", "|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (not registry_sweep.counted(r), not served(r), r["type"])):
        if not registry_sweep.counted(r):
            why = f"PyTorch {r.get('pytorch', 'did not finish')}"
            lines.append(f"| {r['type']} | {r['class']} | – | – | – | {html.escape(why).replace('|', '/')} |")
            continue
        if not served(r):
            why = r.get("check") if str(r.get("export", "")).startswith("check") else r.get("export", "")
        else:
            why = "; ".join(f"{k.upper()}: {r[k]}" for k in ("int8", "int4") if r.get(k) not in (None, "ok"))
        if r.get("init"):  # drawn wider than its own init scale (see underflows and flat)
            why = "; ".join(filter(None, (str(why or ""), f"weights drawn at {r['init']}")))
        lines.append(f"| {r['type']} | {r['class']} | {cell(r.get('export'))} | {cell(r.get('int8'))} | "
                     f"{cell(r.get('int4'))} | {html.escape(str(why or '')).replace('|', '/')} |")
    return lines


def summary() -> list[str]:
    """The encoder tasks' section of the page: a line per task (swept or not), then each task's table."""
    lines = ["`benchmarks/task_sweep.py` builds every model type transformers registers for each encoder task's Auto "
             "class the same way (2 layers, width 64, random weights; a vision encoder with stages keeps them, one "
             "block deep each), saves it as a folder, runs its forward on onnx-nb's own sample (token ids, pixels "
             "or audio from its config: a model that rejects it is counted, not served) and runs one default "
             "`onnx_nb.export(folder)`, whose own check compares ONNX "
             "Runtime with PyTorch at the sample's shapes and at others; then INT8 and INT4 with their parity.", "",
             "| task | served | of those PyTorch builds | registered | swept |", "|---|---|---|---|---|"]
    for task in TASKS:
        path = path_of(task)
        if not path.exists():
            lines.append(f"| {task} | – | – | {len(registry(task))} | not yet |")
            continue
        saved = json.loads(path.read_text())
        base = [r for r in saved["rows"] if registry_sweep.counted(r)]
        good = sum(served(r) for r in base)
        swept = saved["meta"]["date"] if len(saved["rows"]) >= len(registry(task)) else \
            f"{len(saved['rows'])} so far, {saved['meta']['date']}"
        lines.append(f"| {task} | {good} ({100 * good / max(1, len(base)):.1f}%) | {len(base)} | "
                     f"{len(registry(task))} | {swept} |")
    lines.append("")
    for task in TASKS:
        lines += section(task)
    return lines


def main() -> None:
    parser = registry_sweep.parser_for(__doc__, 240)
    parser.add_argument("--task", default=",".join(TASKS), help="tasks to sweep, comma-separated")
    args = parser.parse_args()
    tasks = [t for t in args.task.split(",") if t]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown task {', '.join(unknown)}; the tasks: {', '.join(TASKS)}")
    if args.one:
        print("ROW " + json.dumps(one(tasks[0], args.one, registry(tasks[0])[args.one], Path(args.folder),
                                      not args.no_variants)))
        return
    for task in tasks:
        types = registry(task)
        only = ",".join(t for t in args.only.split(",") if t in types)
        if args.only and not only:
            continue
        rows = registry_sweep.run_rows(__file__, types, path_of(task), only, args.again, args.timeout,
                                       ["--task", task] + (["--no-variants"] if args.no_variants else []))
        base = [r for r in rows if registry_sweep.counted(r)]
        print(f"{task}: served {sum(served(r) for r in base)} of {len(base)} that PyTorch builds "
              f"({len(rows)} swept)", flush=True)


if __name__ == "__main__":
    main()
