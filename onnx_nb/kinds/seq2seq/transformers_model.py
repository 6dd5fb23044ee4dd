"""An encoder-decoder's two files as a transformers model (the seq2seq shape's answer to
:func:`onnx_nb.to_transformers`): :class:`~onnx_nb.steps.generate.hf_model.OnnxForSeq2SeqLM` over
:class:`~.runner.OnnxSeq2Seq`, or Whisper's own ``generate()`` for a model whose class generates with it. Only
imported by functions that already need torch and transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def seq2seq_model(model: Any, config: Any, path: Path, provider: str, threads: int | None,
                  io_binding: bool | None) -> Any:
    """An encoder-decoder's two files as a transformers model (Whisper's with Whisper's own ``generate()``): the
    seq2seq shape's answer to :func:`onnx_nb.to_transformers`."""
    from ...steps.generate.hf_model import OnnxForSeq2SeqLM, speech_class
    from .runner import OnnxSeq2Seq, encoder_of

    runner = OnnxSeq2Seq(path, provider, encoder_of(model), threads, io_binding)
    cls = speech_class() if generates_as_whisper(model, config) else OnnxForSeq2SeqLM
    return cls(config, path, provider, runner)


def generates_as_whisper(model: Any, config: Any) -> bool:
    """Whether the model's own class generates with Whisper's ``generate()`` (language and task tokens, timestamps,
    long-form audio): asked of its class (the export's model, else the class its config names)."""
    import transformers
    from transformers.models.whisper.generation_whisper import WhisperGenerationMixin

    from ...results.export import source_of

    torch_model = getattr(source_of(model), "model", None)
    names = getattr(config, "architectures", None) or []
    cls = type(torch_model) if torch_model is not None else getattr(transformers, names[0], None) if names else None
    return isinstance(cls, type) and issubclass(cls, WhisperGenerationMixin)
