"""The MiniLM numbers: onnx-nb's variants against PyTorch eager and ONNX Runtime's own tools.

    .venv/bin/python benchmarks/minilm.py [--threads 2] [--rounds 15] [--out onnx_nb_out/bench]

all-MiniLM-L6-v2 on a batch of 8 real sentences of mixed lengths padded to 128 (six of 15-20 tokens,
two of 100+), every candidate timed on the same inputs, interleaved round by round so that drift in
the machine's load hits all of them alike. Prints two tables:

1. the whole latency table from ``onnx_nb.benchmark`` (eager, plain export, each variant, each
   available backend: ORT CPU and the OpenVINO runtime when installed);
2. the targets: best fp32 variant >= 1.5x PyTorch eager with max abs error <= 1e-4 on the real
   tokens, best INT8 >= 2.5x with sentence-embedding cosine >= 0.99, both ahead of ONNX Runtime's
   transformer optimizer and quantizer at their best settings.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from sentences import BATCH


def embeddings(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean-pooled, normalised sentence embeddings (how all-MiniLM-L6-v2 is used)."""
    e = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return np.asarray(e / np.linalg.norm(e, axis=1, keepdims=True))


def anchors(export_path: Path, folder: Path, model_dir: Path) -> dict[str, Path]:
    """ONNX Runtime's own transformer optimizer and quantizer at their best settings: the optimizer on
    an eager-attention export (the route where it fuses Attention; on an sdpa export it fuses nothing),
    and per-channel dynamic INT8 on that, after symbolic shape inference (without which it fails)."""
    import onnx
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    from onnxruntime.transformers import optimizer

    import onnx_nb

    eager = transformers.AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    eager_export = onnx_nb.export(eager, out=folder / "anchor-eager.onnx", exporter="torchscript",
                                  overwrite=True, progress=False)
    fused = optimizer.optimize_model(str(eager_export.path), model_type="bert", num_heads=12, hidden_size=384)
    fused.save_model_to_file(str(folder / "anchor-ort-optimizer.onnx"))
    model = onnx.load(str(folder / "anchor-ort-optimizer.onnx"))
    del model.graph.value_info[:]
    onnx.save(SymbolicShapeInference.infer_shapes(model, auto_merge=True), str(folder / "anchor-prep.onnx"))
    quantize_dynamic(str(folder / "anchor-prep.onnx"), str(folder / "anchor-ort-int8.onnx"),
                     weight_type=QuantType.QInt8, per_channel=True)
    return {"ORT transformer optimizer": folder / "anchor-ort-optimizer.onnx",
            "ORT quantizer (INT8 per-channel)": folder / "anchor-ort-int8.onnx"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=3, help="timed runs per candidate per round")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch
    import transformers

    import onnx_nb
    from onnx_nb.benchmarking import OrtRunner, TorchRunner, time_runs
    from onnx_nb.parity.references import torch_reference

    load = os.getloadavg()[0]
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, {platform.processor() or platform.platform()}; "
          f"load average {load:.2f}; torch {torch.__version__}; threads {args.threads}")
    folder = Path(args.out or tempfile.mkdtemp(prefix="onnx-nb-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    model_dir = onnx_nb.default_model_path()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    enc = tok(BATCH, padding="max_length", max_length=128, truncation=True, return_tensors="np")
    feed = {k: v.astype(np.int64) for k, v in enc.items()}
    mask = feed["attention_mask"].astype(bool)
    print(f"batch: {len(BATCH)} sentences, real lengths {mask.sum(1).tolist()}, padded to 128")

    export = onnx_nb.export(str(model_dir), out=folder / "model.onnx", overwrite=True, progress=False,
                            name="all-MiniLM-L6-v2")
    fp32 = onnx_nb.optimize(export, out=folder / "model.optimized.onnx", overwrite=True)
    int8 = onnx_nb.quantize(fp32, out=folder / "model.int8.onnx", overwrite=True)
    int8_padded = onnx_nb.quantize(onnx_nb.optimize(export, unpad=False, out=folder / "model.opt-padded.onnx",
                                                    overwrite=True, validate=False),
                                   out=folder / "model.int8-padded.onnx", overwrite=True, validate=False)
    for v in (fp32, int8):
        print(f"{v.name}: parity {'passed' if v.parity else 'FAILED'}; fused {v.fused}")
    candidates: dict[str, Any] = {"onnx-nb export (fp32, as exported)": export, f"onnx-nb {fp32.name}": fp32,
                                  "onnx-nb int8 (without unpad)": int8_padded, f"onnx-nb {int8.name}": int8}
    candidates.update(anchors(export.path, folder, model_dir))

    # 1. The whole table from onnx_nb.benchmark (every available backend).
    table = onnx_nb.benchmark(candidates, providers="available", sample=feed, reference=export,
                              threads=args.threads, min_seconds=2.0, progress=False)
    print("\n" + repr(table))

    # 2. Targets, interleaved round by round.
    ref = torch_reference(export.source, {k: torch.from_numpy(v) for k, v in feed.items()}, "PyTorch eager")
    torch.set_num_threads(args.threads)
    runners: dict[str, Any] = {"PyTorch eager (sdpa)": TorchRunner(ref, feed, args.threads)}
    for name, model in candidates.items():
        runners[name] = OrtRunner(Path(getattr(model, "path", model)), "CPUExecutionProvider", feed, args.threads,
                                  "all", runtime=getattr(model, "runtime", None))
    times: dict[str, list[float]] = {n: [] for n in runners}
    for run in runners.values():
        time_runs(run, warmup=3, runs=1, min_seconds=0)
    for _ in range(args.rounds):
        for name, run in runners.items():
            times[name] += time_runs(run, warmup=0, runs=args.runs, min_seconds=0)
    reference = ref.run(feed)["last_hidden_state"]
    ref_emb = embeddings(reference, mask)
    eager_ms = float(np.median(times["PyTorch eager (sdpa)"])) * 1e3
    print(f"\n{'candidate':40s} {'p50 ms':>8s} {'speedup':>8s} {'max abs (real tokens)':>22s} {'emb cosine':>11s}")
    rows = {}
    for name, run in runners.items():
        ms = float(np.median(times[name])) * 1e3
        if name.startswith("PyTorch"):
            hidden = reference
        else:
            hidden = run.session.run(None, run.feed)[0]
        err = float(np.abs(hidden - reference).max(-1)[mask].max())
        cos = float((embeddings(hidden, mask) * ref_emb).sum(1).min())
        rows[name] = (ms, eager_ms / ms, err, cos)
        print(f"{name:40s} {ms:8.1f} {eager_ms / ms:7.2f}x {err:22.2e} {cos:11.5f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    best_fp32 = rows[f"onnx-nb {fp32.name}"]
    best_int8 = rows[f"onnx-nb {int8.name}"]
    anchor_fp32 = rows["ORT transformer optimizer"]
    anchor_int8 = rows["ORT quantizer (INT8 per-channel)"]
    checks = [
        ("fp32 >= 1.5x eager", best_fp32[1] >= 1.5),
        ("fp32 max abs <= 1e-4 on real tokens", best_fp32[2] <= 1e-4),
        ("fp32 faster than ORT's transformer optimizer", best_fp32[0] < anchor_fp32[0]),
        ("INT8 >= 2.5x eager", best_int8[1] >= 2.5),
        ("INT8 embedding cosine >= 0.99", best_int8[3] >= 0.99),
        ("INT8 faster than ORT's quantizer", best_int8[0] < anchor_int8[0]),
    ]
    print()
    for text, ok in checks:
        print(f"{'PASS' if ok else 'MISS'}  {text}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
