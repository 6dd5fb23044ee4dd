"""Generation with a decoder file that has no cache inputs (a causal LM whose cache onnx-nb cannot carry between
steps, exported with ``cache=False``): each step runs the whole sequence so far and takes the last positions'
logits, as PyTorch's ``generate()`` does for such a model. The same step interface as :class:`OnnxDecoder`; the
"cache" it passes along is the token ids so far."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...runtime.facts import APPENDED  # the token the model's own generate() appends at every step (XLM's mask)


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
        fixed = self.inputs["input_ids"].shape[1]
        if isinstance(fixed, int):
            raise InvalidArgumentError(
                f"{path} takes exactly {fixed} tokens: its export fixed the sequence length (the model's forward "
                "decides in Python from the length, which the trace fixed), and "
                "generating needs a file whose sequence grows at each step. Generate with the PyTorch model, or "
                "export with a cache the file can carry.")
        appended = self.session.get_modelmeta().custom_metadata_map.get(APPENDED)
        self.appended = None if appended is None else int(appended)
        unknown = set(self.inputs) - {"input_ids", "attention_mask", "position_ids", "token_type_ids"}
        if unknown:
            raise InvalidArgumentError(f"{path} takes {', '.join(sorted(unknown))}, which generate() cannot fill.")

    def empty_cache(self, batch: int, capacity: int | None = None) -> dict[str, Any]:
        return {"ids": np.zeros((batch, 0), np.int64)}

    def step(self, ids: np.ndarray, mask: np.ndarray, cache: dict[str, Any],
             keep: bool = True) -> tuple[np.ndarray, dict[str, Any]]:
        seen = np.concatenate([cache["ids"], ids.astype(np.int64)], axis=1)
        if self.appended is not None:  # fed after the ids, every step anew; its logits end the returned rows
            mask = np.concatenate([mask, np.ones((mask.shape[0], 1), mask.dtype)], axis=1)
            fed = np.concatenate([seen, np.full((seen.shape[0], 1), self.appended, np.int64)], axis=1)
        else:
            fed = seen
        feed: dict[str, Any] = {"input_ids": fed}
        if "attention_mask" in self.inputs:
            feed["attention_mask"] = mask.astype(np.int64)
        if "position_ids" in self.inputs:
            feed["position_ids"] = np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int64)
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(fed)
        logits = self.session.run(["logits"], feed)[0]
        return logits[:, -ids.shape[1]:, :], {"ids": seen}
