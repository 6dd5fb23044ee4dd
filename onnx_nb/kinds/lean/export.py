"""``export(folder, precision=...)`` around the lean writer (:mod:`~onnx_nb.kinds.lean.graph`): where the checkpoint
comes from, whether it fits, the export's own check against PyTorch, and the ExportResult. Only imported by
functions that already need torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...results.export import ExportCheck
from ...steps.export.precision import Blocks
from .families import family_of
from .graph import build
from .safetensors_file import Checkpoint

CHECK_PROMPT, CHECK_DECODE = 8, 3  # the export's own check: a prefill of 8 tokens, then 3 decode steps


def _reference_logits(location: str, ids: np.ndarray) -> tuple[np.ndarray, str]:
    """PyTorch's next-token logits after each prefix of ``ids`` from ``CHECK_PROMPT`` on (one forward pass, no
    cache), in the checkpoint's own dtype; the model is gone when this returns."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(location, dtype="auto", trust_remote_code=False)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids)).logits[0, CHECK_PROMPT - 1:].float().numpy()
    del model
    return logits, dtype


def _onnx_logits(path: Path, ids: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    """The file's next-token logits: a prefill of ``CHECK_PROMPT`` tokens, then one token per decode step with
    its cache fed back."""
    from ...runtime.sessions import session as open_session

    sess = open_session(path)
    dtype = np.float16 if info["cache_dtype"] == "float16" else np.float32
    past = {f"past_key_values.{i}.{kv}": np.zeros((1, info["kv_heads"], 0, info["head_size"]), dtype)
            for i in range(info["layers"]) for kv in ("key", "value")}
    names = [o.name for o in sess.get_outputs()]
    out = []
    start, end = 0, CHECK_PROMPT
    while end <= ids.shape[1]:
        feed = {"input_ids": ids[:, start:end], "attention_mask": np.ones((1, end), np.int64), **past}
        got = dict(zip(names, sess.run(None, feed)))
        out.append(got["logits"][0, -1])
        past = {k.replace("present.", "past_key_values."): v for k, v in got.items() if k.startswith("present.")}
        start, end = end, end + 1
    return np.stack(out)


def reference_check(location: str, path: Path, precision: str, info: dict[str, Any]) -> ExportCheck:
    """The export's own check: teacher-forced next-token logits of the file (prefill, then decode steps with the
    cache) against PyTorch's, judged with the tolerance of the file's precision (or of the reference's, when the
    checkpoint is in half precision)."""
    from ...errors import first_line
    from ...results.tolerance import measure, tolerance_for

    rng = np.random.default_rng(0)
    ids = rng.integers(min(3, info["vocab"] - 1), info["vocab"], (1, CHECK_PROMPT + CHECK_DECODE), dtype=np.int64)
    shapes = {"prompt": [1, CHECK_PROMPT], "decode steps": [CHECK_DECODE]}
    try:
        ref, ref_dtype = _reference_logits(location, ids)
        got = _onnx_logits(path, ids, info)
    except Exception as exc:  # noqa: BLE001 - either side failing is the check's verdict, not a crash
        return ExportCheck(False, shapes=shapes, route="decode steps", error=f"{type(exc).__name__}: {first_line(exc)}")
    order = ["fp32", "fp16", "int8", "int4"]
    judged = precision if ref_dtype == "float32" else max(precision, "fp16", key=order.index)
    tol = tolerance_for(judged, "logits", None, None, None)
    stats, errors = measure(got, ref, "logits")
    verdict = errors.judge(tol)
    worst = float(stats["max_abs"] or 0.0)
    summary = (f"prefill + {CHECK_DECODE} decode steps against PyTorch ({ref_dtype}): cosine {stats['cosine']:.5f}, "
               f"max abs diff {worst:.3g}, judged as {judged}" + (f" ({verdict['note']})" if verdict["note"] else ""))
    return ExportCheck(bool(verdict["passed"]), summary, shapes, max_abs_diff=worst, route="decode steps",
                       figures={"cosine": stats["cosine"], "argmax_agreement": stats["argmax_agreement"],
                                "reference_dtype": ref_dtype})


def checkpoint_folder(model: Any) -> tuple[Path, str]:
    """(local folder, kind) of a folder or hub id; a hub id's config, tokenizer and safetensors are downloaded
    (only those: no PyTorch ``.bin``, no other formats)."""
    from ..hf.loading import hub_error, load_config, looks_like_path

    name = str(model)
    if looks_like_path(name):
        load_config(name)  # its errors name what is missing
        return Path(name).expanduser().resolve(), "hf-dir"
    _, kind = load_config(name)
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(name, allow_patterns=["*.json", "*.safetensors", "tokenizer*", "*.model",
                                                         "*.txt", "*.tiktoken"])
    except Exception as exc:
        raise hub_error(name, exc) from exc
    return Path(folder), kind


_BYTES_PER_PARAM = {"fp32": 4.0, "fp16": 2.0, "int8": 1.13, "int4": 0.63}  # with MatMulNBits' scales


def export_checkpoint(model: Any, precision: str, target: Path, label: str, progress: bool,
                      blocks: Blocks | None = None) -> Any:
    """``export(folder_or_hub_id, precision=...)``: the lean route, checked against PyTorch, as an ExportResult
    (``blocks``: how an int4 / int8 file's weights are rounded, in its ``exporter`` label and metadata)."""
    import time

    from ...progress import Steps
    from ...render import human_bytes
    from ...results.export import ExportResult, ModelSource
    from ...runtime import onnxfile
    from ...runtime.files import check_space, total_size
    from ...runtime.memory import FACTORS, Peak, available_bytes, peak_memory
    from ...steps.export.caches.decoder import CacheLayout
    from ...steps.export.machinery.attempts import first_that_passes
    from ...steps.export.machinery.logs import quiet_loading
    from ..hf.loading import load_config, load_preprocessor

    warnings_seen: list[str] = []
    with Steps(4, f"export ({precision}, layer by layer)", progress) as steps:
        steps.step("reading the checkpoint")
        folder, kind = checkpoint_folder(model)
        with quiet_loading(warnings_seen, kind == "hf-dir"):
            config, _ = load_config(str(folder))
        fam = family_of(config)
        ckpt = Checkpoint(folder)
        stored = ckpt.stored_dtype()
        params = ckpt.bytes // (4 if stored == "float32" else 2)
        embed = fam.hidden * int(getattr(config, "vocab_size", 0) or 0) * (2 if precision == "fp16" else 4)
        check_space(target.parent, int(params * _BYTES_PER_PARAM[precision]) + embed)
        steps.add(fam.layers)
        unverified: list[str] = []
        peaks = {"build": Peak(), "check": Peak()}
        built_in: list[float] = []  # the file alone, without its check (benchmarks/lean_decoder.py's figure)

        def write(_name: str, staged: Path) -> Any:  # the file, layer by layer, into the staging folder
            started = time.perf_counter()
            with peak_memory() as peaks["build"]:
                info = build(ckpt, config, staged, precision, steps.step, blocks)
            built_in.append(time.perf_counter() - started)
            return info

        def check_it(_name: str, staged: Path, info: Any) -> ExportCheck:  # against PyTorch, where it fits
            have, needed = available_bytes(), int(ckpt.bytes * FACTORS["reload"])  # PyTorch's, in its own dtype
            if have is not None and needed > have:
                unverified.append(f"not checked against PyTorch: loading the model takes about {human_bytes(needed)}"
                                  f", this machine has {human_bytes(have)} available; run check_parity(result) "
                                  "where it fits")
                return ExportCheck(skipped=True, route="none")
            with peak_memory() as peaks["check"], quiet_loading(warnings_seen, True):
                return reference_check(str(folder), staged, precision, info)

        done = first_that_passes([precision], target, write, check_it, steps, verb="building", against="PyTorch")
        if not done.name:
            raise done.errors[precision]
        info, check, files, seconds = done.written, done.check, done.files, built_in[-1]
        build_peak, check_peak = peaks["build"], peaks["check"]
    if not check["passed"]:
        warnings_seen.append(f"ONNX Runtime does not match PyTorch: {check.get('error') or check['summary']}")
    proto = onnxfile.load_proto(target)
    ins, outs = onnxfile.signature(proto)
    layout = CacheLayout(info["layers"], info["kv_heads"], info["head_size"], info["cache_dtype"])
    source = ModelSource(kind, label, location=str(folder), task="text-generation", model_type=fam.model_type,
                         preprocessor=load_preprocessor(str(folder)), cache_layout=layout,
                         load_warnings=list(warnings_seen), adapter="lean", generation="decoder")
    memory = {"weights_bytes": ckpt.bytes, "weights_dtype": stored, "build_peak_bytes": build_peak.added_bytes,
              "build_process_peak_bytes": build_peak.high_bytes,
              "check_peak_bytes": check_peak.added_bytes}
    return ExportResult(
        path=target, exporter=f"lean ({precision}{blocks.label() if blocks else ''})",
        fallback_reason={}, opset=onnxfile.opset(proto),
        inputs=ins, outputs=outs, op_histogram=onnxfile.op_histogram(proto),
        parameters=params, file_size=total_size(files), files=files, export_seconds=seconds,
        warnings=warnings_seen, source=source, check=check, memory=memory, unverified=unverified)
