"""A speech LLM (Voxtral, Granite Speech, Audio Flamingo 3, Qwen3-ASR, GLM-ASR, OmniASR, ...): an audio tower whose
features take the place of the audio tokens in a causal LM's prompt. Recognised from its config and class (an object,
a folder or a hub id) and written as three files, ``audio``, ``embed`` and ``decoder`` (:mod:`.parts`), the decoder
through the causal-LM route with its cache and embeddings in place of token ids; the result is a
:class:`~.result.SpeechLlmExport`, and ``onnx_nb.generate(result, processor_output)`` runs the chain."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from ...errors import InvalidArgumentError
from ...steps.export.adapters.base import is_torch_module, require_float32_cpu
from ...steps.export.args import ExportArgs
from ..hf.adapter import HfAdapter, location_config
from ..vlm.adapter import VlmAdapter
from .names import AUDIO_TOKENS, AUDIO_TOWERS


def is_speech_llm(config: dict[str, Any], class_name: str, main_input: str | None = None) -> bool:
    """Whether a model of ``class_name`` with ``config`` (a dict) takes token ids and fills audio tokens from an
    audio tower: its config names an audio token and has the tower (a text-only Gemma 4 names the token, with no
    tower), or it is a speech-recognition class whose first input is token ids (Voxtral names no token).
    ``main_input``: the model's own (an object's); else its transformers class's."""
    if not any(config.get(n) is not None for n in AUDIO_TOWERS):
        return False
    from ..hf.tasks import task_from_class_name

    if main_input is None:
        import transformers

        main_input = getattr(getattr(transformers, class_name, None), "main_input_name", None)
    if main_input != "input_ids":
        return False  # Whisper, CTC models and other encoders of audio take the audio itself
    token = any(isinstance(config.get(n), int) for n in AUDIO_TOKENS)
    return token or task_from_class_name(class_name, config.get("model_type")) == "automatic-speech-recognition"


class SpeechLlmAdapter(VlmAdapter):
    """The vision-language route's three files with the audio tower in the vision tower's place: ``audio``,
    ``embed``, ``decoder``, generated as an ``"audio chain"``."""

    key = "speech-llm"
    what = "a speech LLM"
    instead = ("; its three parts get their own samples and axes. Quantize a part afterwards: "
               "quantize(speech.parts['decoder'], method='int4').")
    takes: ClassVar[frozenset[str]] = frozenset({"opset"})
    chained: ClassVar[tuple[str, ...]] = ("audio", "embed", "decoder")
    token_key = "audio_token"
    shape = "audio chain"

    @staticmethod
    def token_of(config: Any) -> int | None:
        from .parts import audio_token_of

        return audio_token_of(config)

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        if isinstance(model, (str, os.PathLike)):
            config = location_config(model)
            return is_speech_llm(config, next(iter(config.get("architectures") or []), ""))
        own = getattr(model, "config", None)  # (a SentenceTransformer has none)
        if own is None or not (is_torch_module(model) and HfAdapter.is_object(model)) or not hasattr(own, "to_dict"):
            return False
        return is_speech_llm(own.to_dict(), type(model).__name__, getattr(model, "main_input_name", None))

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from ...errors import ExportError
        from ...steps.export.machinery.wrap import eval_mode
        from ...steps.export.machinery.writing import folder_for
        from .parts import audio_token_of, parts
        from .result import SpeechLlmExport

        record = cls.open(model, ExportArgs())  # loaded (a folder, a hub id) or wrapped, its processor too
        speech = record.model
        first = next(speech.parameters())
        require_float32_cpu(first.dtype, first.device, "The model", "model", "speech.parts['audio']")
        token = audio_token_of(speech.config)
        if token is None:
            raise ExportError(
                f"{type(speech).__name__}'s config names no audio token (audio_token_id): the speech LLM route "
                "places the audio tower's rows at that token. Set model.config.audio_token_id to the id its "
                "processor puts in the prompt for each audio row, then export again.")
        record.name, folder = folder_for(model, args)
        with eval_mode(speech):
            layout = cls.decoder_layout(speech)
            try:
                built = parts(speech, record.preprocessor)
            except InvalidArgumentError as why:  # a family this route does not take (its features need the prompt)
                raise ExportError(str(why)) from None
            folder, files, seconds = cls.write_chain(record, layout, built, folder, args)
        return cls.checked(SpeechLlmExport(folder, files, speech, seconds, audio_token=token), check_audio_chain)


def check_audio_chain(result: Any) -> dict[str, Any]:
    """The three files chained in ONNX Runtime (a clip per prompt through the audio file, the embed file, the
    decoder's prefill) against the model's own forward with the audio, two prompts in a batch."""
    import torch

    from ..vlm.adapter import chain_files, judged_chain
    from ..vlm.prompts import prompt_sample
    from .parts import audio_sample, features_of
    from .runner import SpeechDecoder

    model = result.model
    audio = audio_sample(model, clips=2, seed=3, processor=result.preprocessor)
    rows = features_of(model, audio).shape[0]
    ids = prompt_sample(result.audio_token, rows, 2, int(model.get_input_embeddings().num_embeddings), seed=3)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=torch.ones_like(ids), **audio, return_dict=True).logits
    given = {k: v.numpy() for k, v in audio.items()}

    def run() -> Any:
        runner = SpeechDecoder(chain_files(result))
        runner.set_images(given)
        return runner.step(ids.numpy(), torch.ones_like(ids).numpy(), runner.empty_cache(ids.shape[0]))[0]

    return judged_chain(ids.numpy(), result.audio_token, want.float().numpy(), "audio clip", run)
