"""Inputs a Hugging Face model takes beside its main one and its text's, each with the rule that says this model
takes it and how the sample makes it: a document model's word boxes, an adapter or expert chosen per row, a region
model's image features, a masked autoencoder's noise, a text-to-speech model's noise scales and its prenet's
draws, an open-vocabulary detector's class names and task prompt. :mod:`.samples` asks here for the names and the
values."""

from __future__ import annotations

from typing import Any

import torch

from ...runtime.shapes import SAMPLE_SIZES
from ...steps.export.machinery.inputs import AxisSpec
from . import noise

REGIONS = 6  # a region model's image: this many detected boxes, each with its features
QUERY_COUNTS = (1, 3)  # an open-vocabulary detector's sample: each image's count of class names, in turn
QUERIES = ("classes_input_ids", "classes_attention_mask", "tasks_input_ids", "tasks_attention_mask",
           "classes_structure")

AXES: AxisSpec = {
    "bbox": {0: "batch", 1: "sequence"},
    "lang_ids": {0: "batch"},
    "dataset_index": {0: "batch"},
    "visual_feats": {0: "batch", 1: "regions"},
    "visual_pos": {0: "batch", 1: "regions"},
    "noise": {0: "batch"},
    "noise_scale": {},  # a text-to-speech model's scales and rate (noise.py): scalars
    "noise_scale_duration": {},
    "speaking_rate": {},
    noise.PRENET_DRAWS: {1: "decoder_sequence"},  # SpeechT5's prenet masks' draws: one per decoder frame
    # OmDet-Turbo's text queries as its processor gives them: every image's class names flattened into rows
    # (classes_structure: how many are each image's), and one task prompt per image
    "classes_input_ids": {0: "classes", 1: "class_sequence"},
    "classes_attention_mask": {0: "classes", 1: "class_sequence"},
    "tasks_input_ids": {0: "batch", 1: "task_sequence"},
    "tasks_attention_mask": {0: "batch", 1: "task_sequence"},
    "classes_structure": {0: "batch"},
}
SPEECH_SCALES = (*noise.SCALES, noise.RATE)


def names(params: dict[str, Any], config: Any, text: bool) -> list[str]:
    """The side inputs a model with forward parameters ``params`` and ``config`` takes; ``text``: its main input is
    token ids."""
    found = []
    if text and "bbox" in params:  # a document model's words' boxes (LayoutLM's)
        found.append("bbox")
    if text and "visual_feats" in params and isinstance(getattr(config, "visual_feat_dim", None), int):
        found += ["visual_feats", "visual_pos"]  # LXMERT: the image as its detector's regions, features and boxes
    if "lang_ids" in params and getattr(config, "languages", None):  # X-MOD's language adapters: one per row
        found.append("lang_ids")
    experts = getattr(getattr(config, "backbone_config", None) or config, "num_experts", 1)
    if "dataset_index" in params and isinstance(experts, int) and experts > 1:  # ViTPose+'s expert per dataset
        found.append("dataset_index")
    if "noise" in params and (getattr(config, "mask_ratio", 0) or 0) > 0 and isinstance(
            getattr(config, "patch_size", None), (int, list, tuple)) and not hasattr(config, "masked_unit_size"):
        # a masked autoencoder (ViT-MAE) keeps the patches this noise ranks lowest: drawn inside the model when not
        # given, which no file can repeat, so the file takes it as the model's forward does (one draw per patch;
        # Hiera ranks its mask units, not its patches, and masks only when pretraining: left as it was)
        found.append("noise")
    if all(n in params for n in QUERIES):  # an open-vocabulary detector's class names and task prompt
        found += list(QUERIES)
    if all(n in params for n in SPEECH_SCALES):  # a text-to-speech model's noise scales and rate (noise.py)
        found += list(SPEECH_SCALES)
    return found


def _boxes(count: int, page: int, gen: torch.Generator) -> torch.Tensor:
    """``[batch, count, 4]`` boxes on a ``page`` x ``page`` grid: x0, y0, x1, y1, each corner before the other."""
    batch = SAMPLE_SIZES["batch"]
    corners = torch.randint(0, page + 1, (batch, count, 2, 2), generator=gen).sort(dim=2).values
    return corners.reshape(batch, count, 4)  # (x0, y0), then (x1, y1): sorted over the corners


def _queries(config: Any, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Class names as token rows, each image its own count (1, then 3, ...: :data:`QUERY_COUNTS`), and one task
    prompt per image, each as its processor pads them (here to the sample's sequence, within the text tower's
    positions); every prompt shorter than the padding, each by another count of tokens."""
    batch, seq = SAMPLE_SIZES["batch"], SAMPLE_SIZES["sequence"]
    text = getattr(config, "text_config", None) or config
    seq = min(seq, int(getattr(text, "max_position_embeddings", seq) or seq))
    vocab = int(getattr(text, "vocab_size", 100) or 100)
    counts = torch.tensor([QUERY_COUNTS[i % len(QUERY_COUNTS)] for i in range(batch)])
    tasks_mask = torch.ones(batch, seq, dtype=torch.long)
    for row in range(batch):
        tasks_mask[row, seq - 1 - row % max(seq - 1, 1):] = 0
    rows = int(counts.sum())
    return {"classes_input_ids": torch.randint(3, vocab, (rows, seq), generator=gen),
            "classes_attention_mask": torch.ones(rows, seq, dtype=torch.long),
            "tasks_input_ids": torch.randint(3, vocab, (batch, seq), generator=gen),
            "tasks_attention_mask": tasks_mask,
            "classes_structure": counts}


def value(name: str, config: Any, values: dict[str, torch.Tensor], seq: int,
          gen: torch.Generator) -> torch.Tensor | None:
    """The sample's tensor for side input ``name`` (after the main input, in ``values``), or None when it is not one
    of this module's."""
    batch = SAMPLE_SIZES["batch"]
    if name == "bbox":  # each word's box on a page of 1000 x 1000 (or the config's table)
        page = min(1000, int(getattr(config, "max_2d_position_embeddings", 1024)) - 1)  # its position table
        return _boxes(seq, page, gen)
    if name == "visual_feats":
        return torch.randn(batch, REGIONS, int(config.visual_feat_dim), generator=gen)
    if name == "visual_pos":  # boxes normalised to the image, as its detector gives them
        return _boxes(REGIONS, 1000, gen).float() / 1000
    if name in ("lang_ids", "dataset_index"):  # the first language (dataset) the config lists, every row
        return torch.zeros(batch, dtype=torch.long)
    if name == "noise":  # one draw per patch of the image
        pixels = values["pixel_values"]
        patch = config.patch_size if isinstance(config.patch_size, int) else config.patch_size[0]
        return torch.rand(batch, (pixels.shape[-2] // patch) * (pixels.shape[-1] // patch), generator=gen)
    if name in QUERIES:  # all five at once, the others kept in values (the sample's loop skips them)
        made = _queries(config, gen)
        values.update({n: v for n, v in made.items() if n != name})
        return made[name]
    if name in noise.SCALES:  # no noise: PyTorch repeats itself, and the file is checked run for run
        return torch.tensor(0.0)
    if name == noise.PRENET_DRAWS:  # a step's worth of draws, one per decoder frame the sample gives
        return noise.draws_for(config, int(values["decoder_input_values"].shape[1]), gen)
    if name == "speaking_rate":
        return torch.tensor(float(getattr(config, "speaking_rate", 1.0)))
    return None
