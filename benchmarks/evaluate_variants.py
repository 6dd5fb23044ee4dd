"""Every candidate's task metric, latency and size side by side in one run, on data that ships with Python and
scikit-learn (``onnx_nb.frontends.demo_tasks``), no download:

- all-MiniLM-L6-v2 (real weights): recall@1 on Python's documentation paragraphs, fp32 and dynamic INT8, each in ONNX
  Runtime and in the OpenVINO runtime;
- a digits CNN trained here: accuracy, fp32 and static INT8, in both runtimes;
- a small LM trained here on Python's documentation: perplexity on held-out text, fp32 and INT4 by each algorithm,
  the one quantize() keeps by error and the one it keeps by perplexity on another half of the held-out text.

    .venv/bin/python benchmarks/evaluate_variants.py

Latency is onnx_nb.benchmark's p50 (interleaved rounds, untimed runs first, PyTorch eager beside the files); the load
average is printed with it. Read the metrics with their intervals: a difference whose interval holds zero is one the
examples cannot tell.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    import torch

    import onnx_nb
    from onnx_nb.frontends import demo_tasks

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        minilm = onnx_nb.export(onnx_nb.default_model_path(), out=root / "minilm" / "model.onnx", progress=False)
        int8 = onnx_nb.quantize(minilm)
        print(onnx_nb.evaluate([minilm, int8], demo_tasks.docs_retrieval(), openvino=True, progress=False), "\n")

        model = demo_tasks.digits_cnn()
        x, _y, tx, ty = demo_tasks.digits()
        cnn = onnx_nb.export(model, sample={"input": torch.from_numpy(tx[:4])}, out=root / "cnn.onnx",
                             progress=False)
        static = onnx_nb.quantize(cnn, method="static", calibration=[{"input": x[i:i + 32]} for i in range(0, 320, 32)])
        print(onnx_nb.evaluate([cnn, static], (tx, ty), openvino=True, progress=False), "\n")

        lm = onnx_nb.export(str(demo_tasks.docs_lm(root / "lm")), out=root / "lm.onnx", progress=False)
        _train, held = demo_tasks.docs_text()
        choose_on, judge_on = held[:len(held) // 2], held[len(held) // 2:]
        settings = {"method": "int4", "mixed_precision": None, "lm_head_bits": 4}
        files = {"fp32": lm}
        for algorithm in ("rtn", "rtn_asym", "k_quant", "hqq", "gptq", "awq"):
            files[algorithm] = onnx_nb.quantize(lm, algorithm=algorithm, out=root / f"{algorithm}.onnx", **settings)
        by_error = onnx_nb.quantize(lm, out=root / "by_error.onnx", **settings)
        by_task = onnx_nb.quantize(lm, data=[choose_on], out=root / "by_task.onnx", **settings)
        files[f"by error ({by_error.recipe['int4_algorithm']})"] = by_error
        files[f"by perplexity ({by_task.recipe['int4_algorithm']})"] = by_task
        print(onnx_nb.evaluate(files, [judge_on], progress=False))
    print(f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
