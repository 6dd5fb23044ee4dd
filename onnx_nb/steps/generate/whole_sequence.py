"""Generation with a decoder file that has no cache inputs (a causal LM whose cache onnx-nb cannot carry between
steps, exported with ``cache=False``): each step runs the whole sequence so far and takes the last positions'
logits, as PyTorch's ``generate()`` does for such a model. The same step interface as :class:`OnnxDecoder`; the
"cache" it passes along is the token ids so far."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidArgumentError


class WholeSequenceDecoder:
    def __init__(self, path: Any, provider: str = "CPUExecutionProvider", **options: Any) -> None:
        from ...runtime.sessions import session

        options.pop("io_binding", None)  # nothing stays on the device between steps
        self.session = session(path, provider, **{"stop_spinning": True, **options})
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = {o.name: o for o in self.session.get_outputs()}
        if "input_ids" not in self.inputs or len(getattr(outputs.get("logits"), "shape", None) or []) != 3:
            raise InvalidArgumentError(
                f"{path} is not a decoder: generate() needs an input_ids input and a logits output per token (it has "
                f"{', '.join(self.inputs)} -> {', '.join(outputs)}). Export a generative model (*ForCausalLM) with "
                "onnx_nb.export(model).")
        unknown = set(self.inputs) - {"input_ids", "attention_mask", "position_ids", "token_type_ids"}
        if unknown:
            raise InvalidArgumentError(f"{path} takes {', '.join(sorted(unknown))}, which generate() cannot fill.")

    def empty_cache(self, batch: int, capacity: int | None = None) -> dict[str, Any]:
        return {"ids": np.zeros((batch, 0), np.int64)}

    def step(self, ids: np.ndarray, mask: np.ndarray, cache: dict[str, Any],
             keep: bool = True) -> tuple[np.ndarray, dict[str, Any]]:
        seen = np.concatenate([cache["ids"], ids.astype(np.int64)], axis=1)
        feed: dict[str, Any] = {"input_ids": seen}
        if "attention_mask" in self.inputs:
            feed["attention_mask"] = mask.astype(np.int64)
        if "position_ids" in self.inputs:
            feed["position_ids"] = np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int64)
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(seen)
        logits = self.session.run(["logits"], feed)[0]
        return logits[:, -ids.shape[1]:, :], {"ids": seen}
