"""Which of the sequence-to-sequence LMs transformers registers onnx-nb serves, measured on the registry itself: every
model type in ``MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES`` built tiny from its own default config (as
``registry_sweep``'s causal LMs: 2 encoder and 2 decoder layers, width 64, random weights), saved as a folder, then:
can PyTorch build it and greedy-generate from a prompt? does one default ``onnx_nb.export(folder)`` write its
encoder and decoder files, and does ``onnx_nb.generate`` give PyTorch's tokens for two prompts of different lengths
(a difference judged a near-tie or a divergence by the export's generation parity)? do INT8 and INT4 pass their
parity? Each model runs in a process of its own with a time limit (``registry_sweep.run_rows``).

    .venv/bin/python benchmarks/seq2seq_sweep.py [--speech] [--only t5,bart] [--timeout 300] [--no-variants] [--again]

``--speech`` sweeps ``MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES`` instead (Whisper, Speech2Text, Moonshine, ...): the
sub-configs (an audio encoder's, a text decoder's) shrunk too, the two prompts the two rows of onnx-nb's own audio
sample for the model (``hf.samples.build``: a waveform or a spectrogram in the layout the model takes), loaded with
``AutoModelForSpeechSeq2Seq``.

A speech LLM registered in either mapping (Voxtral, Qwen2-Audio, ...: an audio tower filling a causal LM's audio
tokens) is not an encoder-decoder: its row here only says so, and the page shows ``speech_llm_sweep.py``'s row for it
(two clips, PyTorch's tokens), counted in both tables.

Rows land in ``benchmarks/results/seq2seq_sweep.json`` (``speech_sweep.json`` with ``--speech``);
``registry_sweep.py --page-only`` writes them into the supported-architectures page beside the causal LMs.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import registry_sweep  # the causal LMs' sweep: its shrink, its runner, its page
import speech_llm_sweep  # which types it measures (their rows stand for them here)
import task_sweep  # its shrink, sub-configs included (T5Gemma's encoder and decoder, a speech model's audio tower)

JSON = registry_sweep.ROOT / "benchmarks" / "results" / "seq2seq_sweep.json"
SPEECH_JSON = registry_sweep.ROOT / "benchmarks" / "results" / "speech_sweep.json"
# what an encoder-decoder calls its depths and widths beyond the causal LMs' names (T5's decoder depth, its key size)
TINY = {**registry_sweep.TINY, "num_decoder_layers": 2, "d_kv": 16, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4}
DEPTH = {**registry_sweep.DEPTH, "num_decoder_layers": 2}


def registry(speech: bool = False) -> dict[str, str]:
    from transformers.models.auto import modeling_auto

    return dict(modeling_auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES if speech else
                modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)


def torch_tokens(model: Any, prompt: Any) -> list[int]:
    """PyTorch's greedy tokens after the decoder's start token (what ``onnx_nb.generate`` returns); ``prompt``:
    token ids, or one row of audio inputs by name."""
    import torch

    inputs = {k: torch.as_tensor(v) for k, v in prompt.items()} if isinstance(prompt, dict) else {
        "input_ids": torch.tensor([prompt]), "attention_mask": torch.ones(1, len(prompt), dtype=torch.long)}
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=registry_sweep.NEW_TOKENS, do_sample=False, num_beams=1)
    full = out[0].tolist()
    if not isinstance(prompt, dict):
        return full[1:]
    generation = model.generation_config  # generate()'s start: the decoder's start token, else the BOS
    start = next((t for t in (generation.decoder_start_token_id, generation.bos_token_id) if t is not None), None)
    return full[1:] if full and full[0] == start else full  # a speech model's generate may leave its start out


def prompts_for(model: Any, speech: bool) -> list[Any]:
    """Two prompts: token ids of two lengths, or the two rows of onnx-nb's own audio sample for a speech model."""
    if not speech:
        vocab = int(model.get_input_embeddings().num_embeddings)
        return [[t % vocab for t in p] for p in registry_sweep.PROMPT]
    from onnx_nb.kinds.hf import samples

    sample = samples.build(model).as_dict()
    audio = {k: v for k, v in sample.items() if k in ("input_features", "input_values")}
    return [{k: v[i:i + 1].numpy() for k, v in audio.items()} for i in range(2)]


def built(model_type: str, class_name: str, folder: Path, row: dict[str, Any], speech: bool = False) -> tuple[
        Any, list[Any], list[list[int]]] | None:
    """The type at the first size PyTorch builds and runs (tiny, else its depth alone), saved in ``folder`` and loaded
    back as transformers loads it, with its two prompts and PyTorch's greedy tokens for each; None (the reason in
    ``row``) when it cannot."""
    import torch
    import transformers

    for size, sizes in (("tiny", TINY), ("depth only", DEPTH)):  # the first that PyTorch builds and runs
        try:
            config = task_sweep.tiny_config(model_type, sizes)  # sub-configs too (T5Gemma's, an audio tower's)
            if getattr(config, "decoder_start_token_id", None) is None and getattr(config, "bos_token_id",
                                                                                   None) is None:
                config.decoder_start_token_id = getattr(config, "pad_token_id", None) or 0  # T5's convention
            with torch.device("meta"):
                count = sum(p.numel() for p in getattr(transformers, class_name)(config).parameters())
            if count > registry_sweep.MAX_PARAMETERS:
                raise ValueError(f"{count / 1e6:.0f}M parameters with only its depth shrunk")
            torch.manual_seed(0)
            getattr(transformers, class_name)(config).save_pretrained(folder)
            # the reference is the model the folder holds, as transformers loads it (what export(folder) reads)
            auto = transformers.AutoModelForSpeechSeq2Seq if speech else transformers.AutoModelForSeq2SeqLM
            model = auto.from_pretrained(folder).eval()
            prompts = prompts_for(model, speech)
            want = [torch_tokens(model, p) for p in prompts]
        except Exception as exc:  # noqa: BLE001 - a row, not a crash
            registry_sweep.refused(row, "build or generate", size, exc)
            continue
        row.update(pytorch="ok", size=size, parameters=sum(p.numel() for p in model.parameters()))
        print("PYTORCH_OK", flush=True)
        return model, prompts, want
    return None


def one(model_type: str, class_name: str, folder: Path, variants: bool, speech: bool = False) -> dict[str, Any]:
    """Everything about one type (in a child process)."""
    import transformers

    import onnx_nb
    from onnx_nb.errors import first_line

    row: dict[str, Any] = {"type": model_type, "class": class_name}
    try:
        speech_llm = speech_llm_sweep.swept_here(transformers.AutoConfig.for_model(model_type), class_name)
    except Exception:  # noqa: BLE001 - no default config: the build below says why
        speech_llm = False
    if speech_llm:
        row["route"] = "speech LLM"  # measured from clips by speech_llm_sweep.py, whose row the page shows
        return row
    started = time.perf_counter()
    made = built(model_type, class_name, folder, row, speech)
    if made is None:
        return row
    _, prompts, want = made
    result = registry_sweep.exported(row, folder, folder.parent / "onnx" / "model.onnx", started)
    if result is None:
        return row
    try:
        tokens = [onnx_nb.generate(result, p if speech else [p], max_new_tokens=registry_sweep.NEW_TOKENS,
                                   num_beams=1).tokens[0] for p in prompts]
        registry_sweep.judged(row, result, tokens, want)
    except Exception as exc:  # noqa: BLE001
        row["generate"] = f"{type(exc).__name__}: {first_line(exc)}"[:300]
    if variants and row.get("generate") in ("same", "near-tie"):
        registry_sweep.quantized(row, result, folder.parent / "onnx")
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def main() -> None:
    parser = registry_sweep.parser_for(__doc__, 300)
    parser.add_argument("--speech", action="store_true", help="the speech-to-text registry instead")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    types = registry(args.speech)
    if args.one:
        print("ROW " + json.dumps(one(args.one, types[args.one], Path(args.folder), not args.no_variants,
                                      args.speech)))
        return
    extra = [*(["--no-variants"] if args.no_variants else []), *(["--speech"] if args.speech else [])]
    rows = registry_sweep.run_rows(__file__, types, Path(args.json or (SPEECH_JSON if args.speech else JSON)),
                                   args.only, args.again, args.timeout, extra)
    base = [r for r in rows if registry_sweep.counted(r)]
    print(f"served: {sum(registry_sweep.served(r) for r in base)} of {len(base)} that PyTorch builds and generates "
          f"({len(rows)} swept)")


if __name__ == "__main__":
    main()
