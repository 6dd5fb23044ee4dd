"""Which of the speech LLMs transformers registers onnx-nb serves, measured on the registry itself: every model type
whose default config is a speech LLM (an audio tower whose rows fill a causal LM's audio tokens, and no vision tower:
those go the vision-language route) built tiny (the text part as ``registry_sweep``'s causal LMs; the audio tower 2
layers, width 32; its projector between the two widths), random weights, saved as a folder, then: can PyTorch build it
and greedy-generate from two clips of their own lengths (noise through the family's feature extractor, as its
processor gives them: ``parts.audio_sample``) and prompts holding each clip's count of audio tokens? does one default
``onnx_nb.export(folder)`` write its parts, and does ``onnx_nb.generate(result, inputs)`` give PyTorch's tokens for
both clips? The clips' lengths (5.1 s and 1.4 s) are neither the export's samples (4.6 s and 3.2 s; 1 s for a
file of one length) nor its check's (2.3 s and
1.6 s). Each model runs in a process of its own with a time limit (``registry_sweep.run_rows``).

    .venv/bin/python benchmarks/speech_llm_sweep.py [--only voxtral,glmasr] [--timeout 240] [--again]

Rows land in ``benchmarks/results/speech_llm_sweep.json``; ``registry_sweep.py --page-only`` writes them into the
supported-architectures page.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import registry_sweep  # the causal LMs' sweep: its shrink, its runner, its page

JSON = registry_sweep.ROOT / "benchmarks" / "results" / "speech_llm_sweep.json"
AUDIO = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 4, "encoder_layers": 2, "encoder_attention_heads": 4, "encoder_ffn_dim": 64,
         "d_model": 32, "num_layers": 2, "num_heads": 4}
CLIPS = (5.1, 1.4)  # seconds: one over 4 s (two of Granite Speech's blocks of frames)
NEW_TOKENS = 8


def registry() -> dict[str, str]:
    """Every model type (of any Auto mapping) whose default config is a speech LLM without a vision tower: its
    class for generation (the mapping's ``...ForConditionalGeneration``)."""
    import transformers
    from transformers.models.auto import modeling_auto

    found: dict[str, str] = {}
    configs: dict[str, Any] = {}  # each type's default config, made once (a type sits in several mappings)
    for mapping in sorted(n for n in dir(modeling_auto) if n.endswith("MAPPING_NAMES")):
        for model_type, names in getattr(modeling_auto, mapping).items():
            for name in (names,) if isinstance(names, str) else names:
                if model_type in found or not name.endswith("ForConditionalGeneration"):
                    continue
                if model_type not in configs:
                    try:
                        configs[model_type] = transformers.AutoConfig.for_model(model_type)
                    except Exception:  # noqa: BLE001 - a type without a default config
                        configs[model_type] = None
                if configs[model_type] is not None and swept_here(configs[model_type], name):
                    found[model_type] = name
    return dict(sorted(found.items()))


def swept_here(config: Any, class_name: str) -> bool:
    """Whether a type of ``config`` and ``class_name`` is a speech LLM this sweep measures: no vision tower (those go
    the vision-language route), not an encoder-decoder (Dia speaks)."""
    from onnx_nb.kinds.speech_llm.adapter import is_speech_llm

    return (getattr(config, "vision_config", None) is None and not config.is_encoder_decoder
            and is_speech_llm(config.to_dict(), class_name))


def tiny_config(model_type: str, text_sizes: dict[str, int]) -> Any:
    """The text part shrunk as a causal LM's, the audio tower by :data:`AUDIO`, what joins them (a projector's
    widths, a tower's output width) as wide as each side; a default config without an audio token given one (24,
    Voxtral's), the vocabulary grown to hold it."""
    config = registry_sweep.tiny_config(model_type, text_sizes)
    audio_shrunk(config)
    if getattr(config, "audio_token_id", None) is None:
        config.audio_token_id = 24
    text = config.get_text_config()
    if isinstance(getattr(text, "vocab_size", None), int) and config.audio_token_id >= text.vocab_size:
        text.vocab_size = config.audio_token_id + 64
    return config


def audio_shrunk(config: Any) -> None:
    """The audio tower of ``config`` by :data:`AUDIO` and what joins it to the text part as wide as each side (the
    vision-language sweep's omni models have one beside their vision tower)."""
    from onnx_nb.kinds.speech_llm.names import AUDIO_TOWERS

    text = config.get_text_config()
    for name in AUDIO_TOWERS:
        tower = getattr(config, name, None)
        if tower is not None:
            registry_sweep.set_ints(tower, AUDIO)
            for width in ("output_dim", "out_hidden_size", "projector_hidden_size", "adapter_out_dim"):
                if isinstance(getattr(tower, width, None), int):
                    setattr(tower, width, text.hidden_size)
            for width in ("adapter_in_dim", "codebook_dim"):  # from the tower's width: dots.ocr-3's adapter,
                if isinstance(getattr(tower, width, None), int) and isinstance(getattr(tower, "hidden_size", None),
                                                                               int):  # Apertus 1.5's WavTokenizer
                    setattr(tower, width, tower.hidden_size)
    projector = getattr(config, "projector_config", None)
    if projector is not None:  # Granite Speech's Q-Former between the two
        registry_sweep.set_ints(projector, AUDIO)
        if hasattr(projector, "encoder_hidden_size"):
            projector.encoder_hidden_size = AUDIO["hidden_size"]
        if hasattr(projector, "llm_dim"):
            projector.llm_dim = text.hidden_size


def one(model_type: str, class_name: str, folder: Path) -> dict[str, Any]:
    """Everything about one type (in a child process)."""
    import numpy as np
    import torch
    import transformers

    import onnx_nb
    from onnx_nb.errors import InvalidArgumentError
    from onnx_nb.kinds.speech_llm.parts import audio_inputs, audio_sample, audio_token_of, features_of
    from onnx_nb.kinds.vlm.prompts import prompt_sample

    row: dict[str, Any] = {"type": model_type, "class": class_name}
    started = time.perf_counter()
    cases: list[tuple[Any, dict[str, Any], list[int]]] = []
    try:
        config = tiny_config(model_type, registry_sweep.TINY)
        with torch.device("meta"):
            count = sum(p.numel() for p in getattr(transformers, class_name)(config).parameters())
        if count > registry_sweep.MAX_PARAMETERS:
            raise ValueError(f"{count / 1e6:.0f}M parameters shrunk")
        torch.manual_seed(0)
        getattr(transformers, class_name)(config).save_pretrained(folder)
        model = getattr(transformers, class_name).from_pretrained(folder).eval()
        token = audio_token_of(model.config)
        vocab = int(model.get_input_embeddings().num_embeddings)
        try:
            audio_inputs(model)
        except InvalidArgumentError as exc:  # built, but onnx-nb makes no clip for it: counted, its export refused
            row.update(pytorch="ok", size="tiny", pytorch_note=f"built; not driven from a clip: {exc}"[:300])
            registry_sweep.exported(row, folder, folder.parent / "onnx", started)
            return row
        for seed, seconds in zip((5, 6), CLIPS):
            audio = audio_sample(model, 1, seed=seed, seconds=seconds)
            ids = prompt_sample(token, features_of(model, audio).shape[0], 1, vocab, seed=seed)
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **audio,
                                     max_new_tokens=NEW_TOKENS, do_sample=False)
            cases.append((ids, audio, out[0, ids.shape[1]:].tolist()))
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        registry_sweep.refused(row, "build or generate", "tiny", exc)
        return row
    row.update(pytorch="ok", size="tiny", parameters=sum(p.numel() for p in model.parameters()),
               audio_changes_tokens=cases[0][2] != cases[1][2])
    print("PYTORCH_OK", flush=True)
    result = registry_sweep.exported(row, folder, folder.parent / "onnx", started)
    if result is None:
        return row
    row["audio_file"] = result.parts["audio"].status + f" ({result.parts['audio'].exporter})"
    return registry_sweep.chain_generated(row, result, cases, lambda ids, audio: onnx_nb.generate(
        result, {"input_ids": ids.numpy(), "attention_mask": np.ones_like(ids.numpy()),
                 **{k: v.numpy() for k, v in audio.items()}}, max_new_tokens=NEW_TOKENS, num_beams=1).tokens[0],
        started)


def main() -> None:
    registry_sweep.chain_main(__file__, __doc__, JSON, registry, one, "from a clip")


if __name__ == "__main__":
    main()
