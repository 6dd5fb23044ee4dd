"""sentence-transformers models: the transformer, its pooling and its normalisation in one graph.

A ``SentenceTransformer`` is a chain of modules (``Transformer``, ``Pooling``, optionally ``Dense`` and
``Normalize``); ``encode()`` runs that chain and returns the ``sentence_embedding`` it produces.
:class:`SentenceEmbedding` wraps the same chain as a model with token inputs and two outputs,
``token_embeddings`` and ``sentence_embedding``, so the ONNX file gives what ``encode()`` gives, pooling and
normalisation included. Only imported when a sentence-transformers model is exported.
"""

from __future__ import annotations

from typing import Any

import torch

from ...errors import ModelLoadError, first_line

TASK = "sentence-embedding"


def is_sentence_transformer(model: Any) -> bool:
    return any(c.__name__ == "SentenceTransformer" and c.__module__.startswith("sentence_transformers")
               for c in type(model).__mro__)


class SentenceEmbedding(torch.nn.Module):
    """``forward(input_ids, attention_mask[, token_type_ids]) -> {token_embeddings, sentence_embedding}``: the
    SentenceTransformer's own modules, the computation ``encode()`` makes (without its batching and sorting)."""

    main_input_name = "input_ids"

    def __init__(self, st: Any) -> None:
        super().__init__()
        self.st = st
        self.config = _transformer(st).auto_model.config
        self.uses_token_types = "token_type_ids" in (getattr(st.tokenizer, "model_input_names", None) or [])

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        features = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None and self.uses_token_types:
            features["token_type_ids"] = token_type_ids
        out = self.st(features)
        return {"token_embeddings": out["token_embeddings"], "sentence_embedding": out["sentence_embedding"]}


def _transformer(st: Any) -> Any:
    first = st[0]
    if not hasattr(first, "auto_model"):
        raise ModelLoadError(f"The first module of this SentenceTransformer is a {type(first).__name__}, not a "
                             "Transformer: onnx-nb exports sentence-transformers models built on a Hugging Face "
                             "transformer.")
    return first


def wrap(st: Any) -> SentenceEmbedding:
    st.eval()
    wrapped: SentenceEmbedding = SentenceEmbedding(st).eval()
    return wrapped


def load(location: str) -> Any:
    """A SentenceTransformer from a folder (or a hub id), never running code shipped with it."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ModelLoadError("Exporting a sentence-transformers model needs the sentence-transformers package: "
                             "pip install 'onnx-nb[sentence]'.") from exc
    try:
        return SentenceTransformer(location, device="cpu", trust_remote_code=False)
    except Exception as exc:
        raise ModelLoadError(f"Could not load {location} as a sentence-transformers model: {first_line(exc)}") from exc
