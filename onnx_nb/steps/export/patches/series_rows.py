"""A forecaster that takes its series as a list and handles them one at a time in Python (TimesFM: each series cut
to the context, front-padded, its padding mask built, then stacked; the minimum taken per series).

Given a tensor ``[batch, length]`` (what a file takes), that loop iterates over the batch: torch.export unrolls it
at the sample's batch and TorchScript splits the rows into as many outputs, so the file ran at the sample's batch
only (ONNX Runtime: "Cannot split using values in 'split' attribute"). Within :func:`batched_series` a tensor's
rows are cut, padded and masked together, the same values as the model's own loop; the decoding steps after it are
the model's own (its decoder, its output projection, per output patch). A list, a trend/residual split
(``window_size``) or a loss (``future_values``) goes to the model's own forward.

Recognised by what the module holds, not by family: a ``_preprocess`` of the series and ``_postprocess_output`` of
the decoder's states, with ``context_len``, ``horizon_len`` and a ``decoder``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .contract import Patch

HOLDS = ("_preprocess", "_postprocess_output", "context_len", "horizon_len", "decoder")


def batched_forward(self: Any, past_values: Any, freq: Any = None, window_size: int | None = None,
                    future_values: Any = None, forecast_context_len: int | None = None,
                    return_forecast_on_context: bool = False, truncate_negative: bool = False, **kwargs: Any) -> Any:
    """The forecaster's forward on a tensor of series, its rows handled together; anything else by its own."""
    import torch

    if not isinstance(past_values, torch.Tensor) or past_values.dim() != 2 or window_size is not None \
            or future_values is not None:
        return type(self).forward(self, past_values, freq, window_size, future_values, forecast_context_len,
                                  return_forecast_on_context, truncate_negative, **kwargs)
    context = forecast_context_len or self.context_len
    series = past_values[:, -context:]
    lowest = series.min()
    series = series[:, -self.context_len:]  # longer than the model's context: its last part
    batch, length = series.shape
    # front-padded to the context, the padding marked (no padding at the context's length: no branch on the length,
    # which a file taking every length cannot keep)
    front = self.context_len - length
    padding = torch.cat([series.new_ones(batch, front), series.new_zeros(batch, length + self.horizon_len)], dim=1)
    series = torch.cat([series.new_zeros(batch, front), series], dim=1)
    if freq is None:
        frequency = torch.zeros(batch, 1, dtype=torch.int32, device=series.device)
    else:
        frequency = torch.as_tensor(freq, device=series.device)[:batch].to(torch.int32).reshape(-1, 1)
    return _decoded(self, series, padding, frequency, context, lowest, return_forecast_on_context, truncate_negative,
                    kwargs)


def _decoded(self: Any, series: Any, padding: Any, frequency: Any, context: int, lowest: Any, on_context: bool,
             truncate_negative: bool, kwargs: dict[str, Any]) -> Any:
    """The model's own decoding after its preprocessing: one decoder call per output patch, each patch's mean fed
    back (as the model's forward does)."""
    import torch

    out, full, steps = series, [], (self.horizon_len + self.config.horizon_length - 1) // self.config.horizon_length
    decoded: Any = None
    mask = padding
    for step in range(steps):
        window = out[:, -context:]
        mask = mask[:, :out.shape[1]][:, -context:]  # cut from the last step's cut, as the model's loop does
        decoded = self.decoder(past_values=window, past_values_padding=mask, freq=frequency, **kwargs)
        projected = self._postprocess_output(decoded.last_hidden_state, (decoded.loc, decoded.scale))
        if on_context and step == 0:
            first = projected[:, :-1, :self.config.patch_length, :]
            full.append(first.reshape(first.size(0), -1, first.size(3)))
        full.append(projected[:, -1, :self.config.horizon_length, :])
        out = torch.cat([out, projected[:, -1, :self.config.horizon_length, 0]], dim=-1)
    keep = series.shape[1] - self.config.patch_length + self.horizon_len if on_context else self.horizon_len
    forecasts = torch.cat(full, dim=1)[:, :keep, :]
    means = forecasts[:, :, 0]
    if truncate_negative:
        clamp = lowest >= 0
        means = torch.where(clamp, means.clamp_min(0.0), means)
        forecasts = torch.where(clamp, forecasts.clamp_min(0.0), forecasts)
    return output_class(self)(last_hidden_state=decoded.last_hidden_state, attentions=decoded.attentions,
                               hidden_states=decoded.hidden_states, mean_predictions=means,
                               full_predictions=forecasts, loss=None)


def output_class(model: Any) -> Any:
    """The output class the model's forward is annotated to return (its ``ModelOutput``)."""
    import typing

    from transformers.utils import ModelOutput

    hint = typing.get_type_hints(type(model).forward).get("return")
    found = [c for c in typing.get_args(hint) or (hint,) if isinstance(c, type) and issubclass(c, ModelOutput)]
    return found[0]


def _is_forecaster(module: Any) -> bool:
    return all(hasattr(module, name) for name in HOLDS) and callable(getattr(module, "_preprocess", None))


@contextlib.contextmanager
def batched_series(model: Any) -> Iterator[list[str]]:
    """Within: every such forecaster of ``model`` handles a tensor's series together; yields their names. Their own
    forwards come back on leaving."""
    from .lending import lent

    found = [(name or type(m).__name__, m) for name, m in
             (model.named_modules() if hasattr(model, "named_modules") else []) if _is_forecaster(m)]
    with lent([(m, "forward", batched_forward.__get__(m)) for _, m in found]):
        yield [name for name, _ in found]


PATCH = Patch(
    name="series_rows",
    applies_to="forecasters holding _preprocess (of a list of series), _postprocess_output, context_len, horizon_len "
               "and a decoder",
    replaces="the Python loop over the series (cut, front-padded, masked, stacked) and the per-series minimum",
    why="the loop iterates over the batch: torch.export unrolls it and TorchScript splits the rows, so the file ran "
        "at the sample's batch only",
    during=batched_series)
