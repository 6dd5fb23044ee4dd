"""The audio features of a family whose rows carry a rotary time embedding of each clip's place in its audio
(MusicFlamingo: a processor cuts a long audio into 30-second windows, one clip per row, and the model reads from the
prompt's audio-token runs which window of which audio each clip is). Its ``get_audio_features`` takes the prompt's
``input_ids`` for that alone; here the same steps take ``window_index`` (each clip's window within its audio: 0 for a
clip alone), which the runner counts from the prompt (:func:`window_indices`) as the model does. Only imported by
functions that already need torch."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

WINDOW = "window_index"


def windowed_features(model: Any) -> Callable[..., Any] | None:
    """``get_audio_features(input_features, input_features_mask, window_index)`` for a model that builds its audio
    rows' timestamps from the prompt (``_build_audio_timestamps``, a ``pos_emb`` and its module's
    ``apply_rotary_time_emb``), else None."""
    import torch

    inner = getattr(model, "model", model)
    rotate = getattr(sys.modules.get(type(inner).__module__), "apply_rotary_time_emb", None)
    tower, projector = getattr(inner, "audio_tower", None), getattr(inner, "multi_modal_projector", None)
    if not (callable(getattr(inner, "_build_audio_timestamps", None)) and callable(rotate) and
            hasattr(inner, "pos_emb") and tower is not None and projector is not None):
        return None
    step = inner.config.audio_frame_step * 4  # a row of the tower's output: its convolution and pooling, 4 frames

    def get_audio_features(input_features: torch.Tensor, input_features_mask: torch.Tensor,
                           window_index: torch.Tensor, **kwargs: Any) -> Any:
        """The model's ``get_audio_features`` with ``_build_audio_timestamps``'s window indices given: each clip's
        timestamps its window's start plus the tower's row times, rotated in, projected, the valid rows kept."""
        kwargs.pop("return_dict", None)  # a model output, always
        out = tower(input_features, input_features_mask=input_features_mask, return_dict=True, **kwargs)
        hidden = out.last_hidden_state
        _, rows_kept = tower._get_feat_extract_output_lengths(input_features_mask.sum(-1).to(torch.long))
        rows = hidden.shape[-2]
        offsets = torch.arange(rows, device=hidden.device, dtype=torch.float32) * step
        stamps = window_index.to(torch.long).unsqueeze(1) * rows * step + offsets
        cos, sin = inner.pos_emb(stamps, seq_len=rows)
        features = projector(rotate(hidden, cos, sin))
        kept = torch.arange(features.shape[1], device=features.device)[None, :] < rows_kept[:, None]
        out.pooler_output = features[kept]
        return out

    return get_audio_features


def audio_ends(ids: np.ndarray, token: int) -> np.ndarray:
    """Where each audio's rows end among all the audio rows: the prompt's runs of audio tokens, row by row, are the
    audios, as the model's ``_build_audio_timestamps`` reads them."""
    flags = np.pad((np.asarray(ids) == token).astype(np.int8), ((0, 0), (1, 1))).ravel()
    change = np.diff(flags)
    return np.cumsum(np.flatnonzero(change == -1) - np.flatnonzero(change == 1))


def window_of(ends: np.ndarray, done: int, clip: int, starts: dict[int, int]) -> int:
    """Clip ``clip``'s window within its audio: the audio its first row falls in (``done`` rows came before it),
    counted from that audio's first clip (``starts``: audio -> its first clip, filled as the clips come)."""
    return clip - starts.setdefault(int((ends <= done).sum()), clip)
