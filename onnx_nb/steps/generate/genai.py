"""``generate(..., runtime="onnxruntime-genai")``: onnx-nb's GroupQueryAttention decoder file driven by
onnxruntime-genai's C++ generation loop instead of onnx-nb's Python one.

onnx-nb's own loop spends ~0.1 ms of Python between two decode runs, and on a small machine the run after such a
gap is itself slower (measured: a 100 us gap between two ~2.5 ms runs of a 99M-parameter INT4 Llama adds
60-230 us to the next run), so at a few ms per token the C++ loop is 5-10 % faster. The file is the same: the
folder onnxruntime-genai reads is made here (a ``genai_config.json`` describing the file, which is linked, not
copied) in a temporary directory that lives as long as the runner.

Needs ``pip install "onnx-nb[genai]"`` (onnxruntime-genai, which runs on the onnxruntime onnx-nb already uses).
CPU only: the file's GroupQueryAttention is fp32, a kernel only the CPU has.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError
from ...runtime.facts import cache_dims

RUNTIMES = ("onnx-nb", "onnxruntime-genai")


def config_for(path: Path, proto: Any, threads: int | None) -> dict[str, Any]:
    """The ``genai_config.json`` that describes one of onnx-nb's GroupQueryAttention decoder files (``proto``, read
    without its weights): names, heads, head size and context length read from the file itself."""
    from ...runtime.onnxfile import GQA_OP, gqa_node, rotary_positions

    gqa = gqa_node(proto)
    if gqa is None:
        raise InvalidArgumentError(
            f"{path.name} has no GroupQueryAttention: runtime='onnxruntime-genai' runs the decoder files "
            "optimize() writes for rotary models (Llama, Qwen2, Mistral: attention='gqa'); use runtime='onnx-nb' "
            "for this one.")
    attrs = {a.name: a.i for a in gqa.attribute if a.type == a.INT}
    layers = sum(n.op_type == GQA_OP for n in proto.graph.node)
    shapes = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
              for v in [*proto.graph.input, *proto.graph.output]}
    _, head_size = cache_dims(path, shapes["past_key_values.0.key"])  # a builder's folder names it: its config
    positions = rotary_positions(proto, gqa)
    context = positions if positions is not None else 4096
    options: dict[str, Any] = {"log_id": "onnx-nb", "provider_options": []}
    if threads:
        options["intra_op_num_threads"] = threads
    return {
        "model": {
            "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0, "context_length": context,
            "decoder": {
                "session_options": options, "filename": path.name, "head_size": head_size,
                "hidden_size": attrs["num_heads"] * head_size, "num_attention_heads": attrs["num_heads"],
                "num_key_value_heads": attrs["kv_num_heads"], "num_hidden_layers": layers,
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
            },
            "type": "llama",  # any decoder-only type: onnxruntime-genai runs them all with one loop
            "vocab_size": int(shapes["logits"][2]),
        },
        "search": {"do_sample": False, "max_length": context, "min_length": 0, "num_beams": 1,
                   "num_return_sequences": 1, "past_present_share_buffer": True, "top_k": 1, "top_p": 1.0,
                   "temperature": 1.0, "repetition_penalty": 1.0},
    }


class GenaiRunner:
    """An onnxruntime-genai model over one decoder file, loaded once (``generate()`` keeps it like a session)."""

    def __init__(self, path: Path, provider: str, threads: int | None) -> None:
        if provider != "CPUExecutionProvider":
            raise InvalidArgumentError(
                f"runtime='onnxruntime-genai' runs onnx-nb's decoder files on the CPU only (their fp32 "
                f"GroupQueryAttention has no {provider} kernel); drop provider= or use runtime='onnx-nb'.")
        try:
            import onnxruntime_genai as og
        except ImportError as exc:
            raise InvalidArgumentError("runtime='onnxruntime-genai' needs onnxruntime-genai: "
                                       "pip install 'onnx-nb[genai]' (or runtime='onnx-nb').") from exc
        from ...runtime.onnxfile import files_of, load_proto

        proto = load_proto(path)  # read once: the config and the list of files both come from it
        config = config_for(path, proto, threads)
        self.context = int(config["model"]["context_length"])
        self.folder = Path(tempfile.mkdtemp(prefix="onnx-nb-genai-"))
        for file in files_of(path, proto):  # the .onnx and its external data, linked by their names
            link = self.folder / file.relative_to(path.parent)
            link.parent.mkdir(parents=True, exist_ok=True)
            try:
                link.symlink_to(file.resolve())
            except OSError:  # no symlinks here (some Windows setups): a copy
                shutil.copy2(file, link)
        (self.folder / "genai_config.json").write_text(json.dumps(config, indent=2))
        self.og = og
        self.vocab = int(config["model"]["vocab_size"])
        self.model = og.Model(str(self.folder))

    def __del__(self) -> None:  # the links and the config go with the runner
        folder = getattr(self, "folder", None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, do_sample: bool, temperature: float,
                 top_k: int, top_p: float, seed: int, eos: set[int], stream: Any,
                 ) -> tuple[list[list[int]], float, list[float]]:
        """Each prompt on its own (no padding in onnxruntime-genai's batch: it masks by pad id): the new tokens,
        the first prompt's time to first token and every decode step's ms (each ``generate_next_token()``)."""
        new: list[list[int]] = []
        first_ms: float | None = None
        steps: list[float] = []
        for prompt in prompts:
            length = min(len(prompt) + max_new_tokens, self.context)
            if len(prompt) >= length:
                raise InvalidArgumentError(f"{len(prompt)} tokens leave no room in the model's {self.context} "
                                           "positions.")
            params = self.og.GeneratorParams(self.model)
            search: dict[str, Any] = {"max_length": length, "min_length": length, "do_sample": do_sample}
            if do_sample:
                search.update(temperature=temperature, top_p=top_p, random_seed=seed,
                              top_k=top_k or self.vocab)
            params.set_search_options(**search)
            generator = self.og.Generator(self.model, params)
            tokens: list[int] = []
            start = time.perf_counter()
            generator.append_tokens(list(prompt))  # the prompt runs here (genai 0.18: prefill on append)
            while not generator.is_done():
                generator.generate_next_token()
                token = int(generator.get_next_tokens()[0])
                now = time.perf_counter()
                if first_ms is None:
                    first_ms = (now - start) * 1e3
                elif tokens:
                    steps.append((now - start) * 1e3)
                start = now
                tokens.append(token)
                if stream is not None:
                    stream([token])
                if token in eos:
                    break
            new.append(tokens)
        return new, first_ms or 0.0, steps


def check_runtime(runtime: str) -> str:
    if runtime not in RUNTIMES:
        raise InvalidArgumentError(f"runtime={runtime!r}: use one of {', '.join(map(repr, RUNTIMES))}.")
    return runtime

