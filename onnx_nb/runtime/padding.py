"""Sessions that skip padding: a padded batch is split into length buckets, each run trimmed to its
longest real sequence, and the outputs put back in place (zeros at padded positions).

Padding is wasted work: a batch of short sentences padded to 128 beside one long one spends most
of its time on pad tokens. ONNX Runtime's padding-free (packed) attention is CUDA-only, so onnx-nb
does it at the session level, for any model whose inputs carry a right-padded ``attention_mask``
over ``[batch, sequence]``. :class:`UnpaddedSession` has the ``run`` / ``get_inputs`` /
``get_outputs`` of an ``onnxruntime.InferenceSession``, so it drops into existing code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

RUN_COST_TOKENS = 24  # fixed cost of one extra run, in padded-token equivalents, for the bucket plan


def plan_buckets(lengths: np.ndarray, cost: int = RUN_COST_TOKENS) -> list[np.ndarray]:
    """Group rows so that sum(rows x longest) + cost x runs is smallest (exact DP over sorted lengths)."""
    order = np.argsort(lengths, kind="stable")
    sorted_len = lengths[order]
    n = len(order)
    best = [0.0] + [float("inf")] * n
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            c = best[i] + (j - i) * float(sorted_len[j - 1]) + cost
            if c < best[j]:
                best[j], cut[j] = c, i
    groups, j = [], n
    while j > 0:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]


def trimmed_buckets(feed: dict[str, np.ndarray], lengths: np.ndarray,
                    sequence_inputs: set[str]) -> list[tuple[np.ndarray, int, dict[str, np.ndarray]]]:
    """The batch cut by :func:`plan_buckets`: each bucket's rows, the length it is trimmed to (its longest row),
    and the feed of those rows with the sequence inputs trimmed. ONNX Runtime's padding skip and the PyTorch
    baseline given the same skip both run these."""
    buckets = []
    for rows in plan_buckets(np.maximum(lengths, 1)):
        keep = int(max(lengths[rows].max(), 1))
        buckets.append((rows, keep, {k: (v[rows][:, :keep] if k in sequence_inputs else v[rows])
                                     for k, v in feed.items()}))
    return buckets


class UnpaddedSession:
    """An ORT session wrapper that runs each length bucket of a padded batch separately.

    Example::

        fast = onnx_nb.optimize(result)                    # unpad="auto"
        session = fast.session()                           # an UnpaddedSession when padding is skipped
        outputs = session.run(None, feed)                  # as onnxruntime.InferenceSession.run
    """

    def __init__(self, session: Any, mask_input: str = "attention_mask") -> None:
        self.session = session
        self.mask_input = mask_input
        inputs = {i.name: i for i in session.get_inputs()}
        mask = inputs.get(mask_input)
        self.seq_name = mask.shape[1] if mask is not None and len(mask.shape) == 2 else None
        self.seq_inputs = {n for n, i in inputs.items()
                           if len(i.shape) > 1 and i.shape[1] == self.seq_name and isinstance(self.seq_name, str)}
        self.outputs = session.get_outputs()
        self.last_plan: list[np.ndarray] = []

    def get_inputs(self) -> Any:
        return self.session.get_inputs()

    def get_outputs(self) -> Any:
        return self.outputs

    def get_providers(self) -> Any:
        return self.session.get_providers()

    def end_profiling(self) -> Any:
        return self.session.end_profiling()

    def run(self, output_names: Any, feed: dict[str, np.ndarray], *args: Any) -> list[np.ndarray]:
        mask = feed.get(self.mask_input)
        if self.seq_name is None or mask is None or mask.ndim != 2:
            return list(self.session.run(output_names, feed, *args))
        lengths = mask.sum(axis=1).astype(np.int64)
        right_padded = bool(np.all(mask == (np.arange(mask.shape[1])[None, :] < lengths[:, None])))
        if not right_padded or lengths.min() == mask.shape[1]:
            return list(self.session.run(output_names, feed, *args))
        names = [o.name for o in self.outputs] if output_names is None else list(output_names)
        meta = {o.name: o for o in self.outputs}
        full: list[np.ndarray | None] = [None] * len(names)
        buckets = trimmed_buckets(feed, lengths, self.seq_inputs)
        self.last_plan = [rows for rows, _, _ in buckets]
        for rows, keep, part in buckets:
            results = self.session.run(names, part, *args)
            for i, (name, value) in enumerate(zip(names, results)):
                shape = meta[name].shape
                seq_axis = 1 if len(shape) > 1 and shape[1] == self.seq_name else None
                if full[i] is None:
                    dims = list(value.shape)
                    dims[0] = mask.shape[0]
                    if seq_axis is not None:
                        dims[1] = mask.shape[1]
                    full[i] = np.zeros(dims, dtype=value.dtype)
                target = full[i]
                assert target is not None
                if seq_axis is not None:
                    target[rows, :keep] = value
                else:
                    target[rows] = value
        return [f for f in full if f is not None]


def open_session(model: Any, provider: str = "CPUExecutionProvider", **options: Any) -> Any:
    """A session for a path, an ExportResult or a variant; a variant made to skip padding gets an
    :class:`UnpaddedSession`."""
    from .sessions import session

    path = getattr(model, "path", model)
    sess = session(path, provider, **options)
    runtime = getattr(model, "runtime", None) or {}
    if runtime.get("unpad"):
        return UnpaddedSession(sess, runtime.get("mask_input", "attention_mask"))
    return sess
