"""The audio features of a family that computes them inside its forward, with no ``get_audio_features`` to call
(Qwen2-Audio): the same steps as a method of that signature, so the audio file is written from it as from any
other family's. Only imported by functions that already need torch."""

from __future__ import annotations

from typing import Any

import torch


def inline_features(model: Any) -> Any:
    """``get_audio_features(input_features, feature_attention_mask)`` for a model whose forward runs its
    ``audio_tower`` and ``multi_modal_projector`` itself (Qwen2-Audio), else None."""
    inner = getattr(model, "model", model)
    tower, projector = getattr(inner, "audio_tower", None), getattr(inner, "multi_modal_projector", None)
    lengths = getattr(tower, "_get_feat_extract_output_lengths", None)
    if tower is None or projector is None or not callable(lengths):
        return None

    def get_audio_features(input_features: torch.Tensor, feature_attention_mask: torch.Tensor,
                           **kwargs: Any) -> Any:
        """Qwen2-Audio's forward, its audio steps: the tower under a bidirectional mask of each clip's frames, the
        projector, then each clip's valid rows one after another (what it scatters at the audio tokens)."""
        from transformers.masking_utils import create_bidirectional_mask
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        frames_kept, rows_kept = lengths(feature_attention_mask.sum(-1))
        batch, _, frames = input_features.shape
        steps = (frames - 2) // 2 + 1  # after the tower's strided convolution
        valid = torch.arange(steps, device=input_features.device)[None, :] < frames_kept[:, None]
        mask = create_bidirectional_mask(config=tower.config, attention_mask=valid.long(),
                                         inputs_embeds=input_features.new_zeros((batch, steps, 1)))
        hidden = tower(input_features, attention_mask=mask).last_hidden_state
        features = projector(hidden)
        kept = torch.arange(features.shape[1], device=features.device)[None, :] < rows_kept[:, None]
        return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=features[kept])

    return get_audio_features
