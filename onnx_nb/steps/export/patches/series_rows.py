"""A forecaster that takes its series as a list and handles them one at a time in Python (TimesFM: each series cut
to the context, front-padded, its padding mask built, then stacked; the minimum taken per series).

Given a tensor ``[batch, length]`` (what a file takes), that loop iterates over the batch: torch.export unrolls it
at the sample's batch and TorchScript splits the rows into as many outputs, so the file ran at the sample's batch
only (ONNX Runtime: "Cannot split using values in 'split' attribute"). Within :func:`batched_series` a tensor's
rows are cut, padded and masked together, the same values as the model's own loop; the decoding steps after it are
the model's own (its decoder, its output projection, per output patch). A list, a trend/residual split
(``window_size``) or a loss (``future_values``) goes to the model's own forward.

TimesFM 2.5's forecaster loops the same way and its model keeps running statistics of the series in a second Python
loop, over the context's patches (Welford's update, one patch at a time: 512 steps unrolled at its 16k context, an
export that did not finish in ten minutes). Within :func:`batched_series` its forecaster takes a tensor's rows
together too (:func:`batched_forward_2_5`: the same cut, front padding and mask, then the model's own global
normalisation, flip invariance, quantile head and truncation), and its model's running mean and deviation come from
cumulative sums over the patches (:func:`running_stats`: the same statistics, the sums in double about the series'
overall mean so a plateau or a trend does not cancel them).

Recognised by what the module holds, not by family: a ``_preprocess`` of the series and ``_postprocess_output`` of
the decoder's states, with ``context_len``, ``horizon_len`` and a ``decoder``; or a ``_preprocess`` and
``_decode_and_project`` with ``context_len``, ``horizon_len`` and a ``model`` holding ``_update_running_stats``,
``_revin``, ``input_ff_layer``, ``rotary_emb`` and ``layers``.
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
    series, padding = front_padded(series, self.context_len, self.horizon_len)
    batch = series.shape[0]
    if freq is None:
        frequency = torch.zeros(batch, 1, dtype=torch.int32, device=series.device)
    else:
        frequency = torch.as_tensor(freq, device=series.device)[:batch].to(torch.int32).reshape(-1, 1)
    return _decoded(self, series, padding, frequency, context, lowest, return_forecast_on_context, truncate_negative,
                    kwargs)


def front_padded(series: Any, width: int, horizon: int) -> tuple[Any, Any]:
    """Rows ``[batch, length]`` (length at most ``width``) front-padded with zeros to ``width``, and their padding
    mask over ``width + horizon`` (1 on the padding), as the forecasters' ``_preprocess`` builds them one series at a
    time. No branch on the length (no padding at ``width``), which a file taking every length cannot keep."""
    import torch

    batch, length = series.shape
    front = width - length
    padding = torch.cat([series.new_ones(batch, front), series.new_zeros(batch, length + horizon)], dim=1)
    return torch.cat([series.new_zeros(batch, front), series], dim=1), padding


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


def batched_forward_2_5(self: Any, past_values: Any, window_size: int | None = None, future_values: Any = None,
                        forecast_context_len: int | None = None, truncate_negative: bool | None = None,
                        force_flip_invariance: bool | None = None, **kwargs: Any) -> Any:
    """TimesFM 2.5's forecaster on a tensor of series, its rows handled together; anything else by its own."""
    import torch

    if not isinstance(past_values, torch.Tensor) or past_values.dim() != 2 or window_size is not None \
            or future_values is not None:
        return type(self).forward(self, past_values, window_size, future_values, forecast_context_len,
                                  truncate_negative, force_flip_invariance, **kwargs)
    wanted_dict = kwargs.pop("return_dict", None)
    wanted_dict = getattr(self.config, "return_dict", True) if wanted_dict is None else wanted_dict
    context = forecast_context_len or self.context_len
    series = past_values[:, -context:]
    lowest = series.min()
    series, padding = front_padded(series, context, self.horizon_len)  # the model's _preprocess
    truncate = self.config.infer_is_positive if truncate_negative is None else truncate_negative
    flip = self.config.force_flip_invariance if force_flip_invariance is None else force_flip_invariance
    mu, sigma = series.mean(dim=1, keepdim=True), series.std(dim=1, keepdim=True)
    normalized = self.model._revin(series, mu, sigma, reverse=False)
    points, spreads, outputs = self._decode_and_project(normalized, padding, **kwargs)
    if flip:
        flipped_points, flipped_spreads, _ = self._decode_and_project(-normalized, padding, **kwargs)

        def flipped(x: Any) -> Any:
            return torch.cat([x[..., :1], torch.flip(x[..., 1:], dims=(-1,))], dim=-1)

        points, spreads = (points - flipped(flipped_points)) / 2, (spreads - flipped(flipped_spreads)) / 2
    horizon = min(self.horizon_len, points.shape[1])
    forecast = points[:, :horizon, :].clone()
    median = min(self.config.decode_index, forecast.shape[-1] - 1)
    if self.config.use_continuous_quantile_head:
        reach = min(horizon, spreads.shape[1])
        for index in range(1, len(self.config.quantiles) + 1):
            if index == median or index >= forecast.shape[-1]:
                continue
            forecast[:, :reach, index] = spreads[:, :reach, index] - spreads[:, :reach, median] + \
                forecast[:, :reach, median]
    full = self.model._revin(forecast, mu, sigma, reverse=True)
    means = full[:, :, min(self.config.decode_index, full.shape[-1] - 1)]
    if truncate:
        clamp = lowest >= 0
        means = torch.where(clamp, means.clamp_min(0.0), means)
        full = torch.where(clamp, full.clamp_min(0.0), full)
    out = output_class(self)(last_hidden_state=outputs.last_hidden_state, hidden_states=outputs.hidden_states,
                             attentions=outputs.attentions, mean_predictions=means, full_predictions=full, loss=None)
    return out if wanted_dict else out.to_tuple()  # as the model's can_return_tuple gives it


def running_stats(values: Any, masked: Any) -> tuple[Any, Any]:
    """The mean and deviation of every prefix of patches ``values [batch, patches, length]`` over the positions not
    ``masked``, each ``[batch, patches]``: Welford's running update in closed form (per-patch counts, means and
    variances combined by cumulative sums), 0 where no value came yet."""
    import torch

    kind = values.dtype
    valid = (~masked).to(kind)
    counts = valid.sum(dim=-1)
    safe = torch.where(counts == 0, torch.ones_like(counts), counts)
    means = torch.where(counts == 0, torch.zeros_like(counts), (values * valid).sum(dim=-1) / safe)
    variances = torch.where(counts == 0, torch.zeros_like(counts),
                            (((values - means[..., None]) * valid) ** 2).sum(dim=-1) / safe)
    # the prefix sums in double, about the series' overall mean: a stretch far from that mean with a small spread
    # of its own (a plateau, a trend) subtracts two near-equal sums, which float32 loses (Welford's update never
    # subtracts them)
    counts, means, variances = counts.double(), means.double(), variances.double()
    centre = (means * counts).sum(dim=1, keepdim=True) / counts.sum(dim=1, keepdim=True).clamp_min(1)
    total = counts.cumsum(dim=1)
    total_safe = torch.where(total == 0, torch.ones_like(total), total)
    mean = torch.where(total == 0, torch.zeros_like(total), (counts * means).cumsum(dim=1) / total_safe)
    spread = (counts * variances).cumsum(dim=1) + (counts * (means - centre) ** 2).cumsum(dim=1) - \
        total * (mean - centre) ** 2
    variance = torch.where(total == 0, torch.zeros_like(total), spread / total_safe)
    return mean.to(kind), torch.sqrt(torch.clamp(variance, min=0.0)).to(kind)


def stats_forward(self: Any, past_values: Any, past_values_padding: Any = None, **kwargs: Any) -> Any:
    """TimesFM 2.5's model with its running statistics from :func:`running_stats`; the rest its own."""
    import torch
    from transformers.masking_utils import create_causal_mask

    batch, length = past_values.shape
    patch = self.config.patch_length
    if past_values_padding is None:
        past_values_padding = torch.zeros_like(past_values, dtype=torch.long)
    patches = past_values.view(batch, -1, patch)
    masked = past_values_padding[:, :length].view(batch, -1, patch) >= 0.5
    mu, sigma = running_stats(patches, masked)
    normed = self._revin(patches, mu, sigma, reverse=False, mask=masked)
    embeddings = self.input_ff_layer(torch.cat([normed, masked.to(dtype=normed.dtype)], dim=-1))
    patch_padding = masked[..., -1]
    positions = torch.arange(embeddings.shape[1], device=embeddings.device).unsqueeze(0) - \
        patch_padding.to(torch.int32).sum(dim=-1, keepdim=True)
    mask = create_causal_mask(self.config, embeddings, (~patch_padding).to(torch.int64), cache=None)
    rotary = self.rotary_emb(embeddings, positions)
    hidden = embeddings
    for layer in self.layers:
        hidden = layer(hidden, position_embeddings=rotary, attention_mask=mask, position_ids=positions, **kwargs)
    return output_class(self)(last_hidden_state=hidden, loc=mu[:, -1],
                              scale=torch.clamp(sigma[:, -1], min=self.tolerance), context_mu=mu,
                              context_sigma=sigma)


STATS = ("_update_running_stats", "_revin", "input_ff_layer", "rotary_emb", "layers", "tolerance")


def _is_forecaster(module: Any) -> bool:
    return all(hasattr(module, name) for name in HOLDS) and callable(getattr(module, "_preprocess", None))


def _is_forecaster_2_5(module: Any) -> bool:
    return all(hasattr(module, name) for name in ("_preprocess", "_decode_and_project", "context_len",
                                                  "horizon_len", "model")) and _keeps_stats(module.model)


def _keeps_stats(module: Any) -> bool:
    return all(hasattr(module, name) for name in STATS)


@contextlib.contextmanager
def batched_series(model: Any) -> Iterator[list[str]]:
    """Within: every such forecaster of ``model`` handles a tensor's series together; yields their names. Their own
    forwards come back on leaving."""
    from .lending import lent

    modules = list(model.named_modules()) if hasattr(model, "named_modules") else []
    found = [(name or type(m).__name__, m, batched_forward) for name, m in modules if _is_forecaster(m)] + \
        [(name or type(m).__name__, m, batched_forward_2_5) for name, m in modules if _is_forecaster_2_5(m)] + \
        [(name or type(m).__name__, m, stats_forward) for name, m in modules if _keeps_stats(m)]
    with lent([(m, "forward", forward.__get__(m)) for _, m, forward in found]):
        yield [name for name, _, _ in found]


PATCH = Patch(
    name="series_rows",
    applies_to="forecasters holding _preprocess (of a list of series), _postprocess_output, context_len, horizon_len "
               "and a decoder, or _preprocess, _decode_and_project, context_len, horizon_len and a model keeping "
               "running statistics (_update_running_stats, _revin, input_ff_layer, rotary_emb, layers)",
    replaces="the Python loop over the series (cut, front-padded, masked, stacked) and the per-series minimum; the "
             "loop of running statistics over the context's patches",
    why="the loop iterates over the batch: torch.export unrolls it and TorchScript splits the rows, so the file ran "
        "at the sample's batch only; the patch loop unrolled into an export that did not finish",
    during=batched_series)
