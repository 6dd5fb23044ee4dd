"""Vision: a ResNet-50 and a ViT-B/16 (Hugging Face, random weights from their configs; nothing to download),
torchvision's ResNet-50 and MobileNetV3-Large and timm's EfficientNet-B0 (constructors, random weights) where those
packages import, onnx-nb's files against PyTorch eager, ONNX Runtime's own tools, the OpenVINO runtime and NNCF's
INT8, side by side in one run, at batch 1 and batch 8 of 224x224 images.

    .venv/bin/python benchmarks/vision.py [--threads 2] [--rounds 8] [--models resnet,vit]
    <side venv>/bin/python benchmarks/vision.py \
        --models resnet,vit,tv-resnet50,tv-mobilenet_v3_large,timm-efficientnet_b0

(torchvision does not import beside torch 2.13.0 on this machine: docs/performance.md says how to make the side venv
with torch 2.14.1 and torchvision 0.29.1 that runs the torchvision and timm rows.)

Per model, in plain sessions (the file alone), every candidate on the same images, visited in a new shuffled
order each round with untimed runs first (``onnx_nb.runtime.timing.interleaved``):

- PyTorch eager;
- the plain export in ONNX Runtime's default session (graph level "all"): ORT's own fp32 route;
- ``onnx_nb.optimize()`` (fp32);
- ORT's quantizer at its best setting for the family: ``quantize_static`` QDQ per-channel after
  ``quant_pre_process`` for the CNN, ``quantize_dynamic`` per-channel for the ViT; the same 32 calibration
  images (a fixed generator) as onnx-nb;
- ``onnx_nb.quantize(method="auto", calibration=<the 32 images>)`` of the optimized file (static QDQ for the
  CNN, dynamic for the ViT: the family decides);
- the OpenVINO runtime on the plain export and on onnx-nb's INT8 file when that is a QDQ file it can read;
- NNCF's post-training INT8 (``nncf.quantize``, default preset, the same 32 calibration images) of the plain
  export, on the OpenVINO runtime: OpenVINO's own INT8 route.

Accuracy on 64 other images: logits cosine (lowest) and top-1 agreement with PyTorch. Prints the load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CALIBRATION, EVALUATION = 32, 64


def build(name: str) -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    if name.startswith(("tv-", "timm-")):
        if name.startswith("tv-"):
            import torchvision

            model = getattr(torchvision.models, name[3:])(weights=None)
            head = getattr(getattr(model, "heads", None), "head", None)
            if head is not None:  # torchvision's ViT starts its classifier at zero: all logits 0, cosine 0/0
                torch.nn.init.normal_(head.weight, std=0.02)
        else:
            import timm

            model = timm.create_model(name[5:], pretrained=False)
        return settle_batch_norm(model)
    if name == "resnet":
        config = transformers.ResNetConfig(layer_type="bottleneck", depths=[3, 4, 6, 3],
                                           hidden_sizes=[256, 512, 1024, 2048], embedding_size=64, num_labels=1000)
        return transformers.ResNetForImageClassification(config).eval()
    config = transformers.ViTConfig(image_size=224, patch_size=16, hidden_size=768, num_hidden_layers=12,
                                    num_attention_heads=12, intermediate_size=3072, num_labels=1000)
    return transformers.ViTForImageClassification(config).eval()


def settle_batch_norm(model: Any) -> Any:
    """Batch-norm statistics from a few batches of images (train-mode forward passes, no gradients): a freshly
    initialised MobileNetV3's logits are ~1e-9 (its activations vanish through unit-variance-less layers), which
    makes accuracy figures 0/0; with settled statistics its logits have a scale, like a trained network's."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None  # a plain average over the batches
    model.train()
    with torch.no_grad():
        for seed in range(4):
            model(torch.from_numpy(images(16, 500 + seed)))
    return model.eval()


def images(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 3, 224, 224)).astype(np.float32)


def ort_anchor(export_path: Path, folder: Path, family: str, calibration: list[dict[str, np.ndarray]]) -> Path:
    """ONNX Runtime's quantizer at its best setting for the family."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = folder / f"{family}.anchor-prep.onnx"
    try:
        quant_pre_process(str(export_path), str(prepared))
    except AssertionError:  # ORT's symbolic shape inference stops on torchvision's ViT (a Reshape of unknown rank)
        print(f"{family}: ORT's symbolic shape inference failed on the export; the anchor is pre-processed "
              "without it (skip_symbolic_shape=True)", flush=True)
        quant_pre_process(str(export_path), str(prepared), skip_symbolic_shape=True)
    out = folder / f"{family}.anchor-ort-int8.onnx"
    if "vit" not in family:  # a CNN: static QDQ; a ViT (Hugging Face or torchvision): dynamic
        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.items = iter(calibration)

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self.items, None)

        quantize_static(str(prepared), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
    else:
        quantize_dynamic(str(prepared), str(out), weight_type=QuantType.QInt8, per_channel=True)
    return out


def nncf_int8(export_path: Path, folder: Path, family: str, calibration: list[dict[str, np.ndarray]]) -> Path:
    """NNCF's post-training INT8 of the plain export for the OpenVINO runtime (default preset; the same images)."""
    import nncf
    import openvino as ov

    model = ov.Core().read_model(str(export_path))
    name = model.inputs[0].get_any_name()
    quantized = nncf.quantize(model, nncf.Dataset(calibration, lambda item: item[name]),
                              subset_size=len(calibration))
    out = folder / f"{family}.nncf-int8.xml"
    ov.save_model(quantized, str(out))
    return out


def has_contrib_ops(path: Path) -> bool:
    import onnx

    return any(n.domain == "com.microsoft" for n in onnx.load(str(path), load_external_data=False).graph.node)


def run_model(family: str, args: Any, folder: Path) -> None:
    import torch

    import onnx_nb
    from onnx_nb.runtime.onnxfile import load_proto, signature
    from onnx_nb.runtime.timing import interleaved
    from onnx_nb.steps.benchmark.benchmarking import OpenVinoRunner, OrtRunner

    model = build(family)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    hf = not family.startswith(("tv-", "timm-"))
    export = onnx_nb.export(model, None if hf else torch.from_numpy(images(1, 0)), out=folder / f"{family}.onnx",
                            overwrite=True, progress=False)
    input_name = signature(load_proto(export.path))[0][0].name
    calib = [{input_name: images(1, 1000 + i)} for i in range(CALIBRATION)]
    fp32 = onnx_nb.optimize(export, out=folder / f"{family}.optimized.onnx", overwrite=True, then="int8")
    int8 = onnx_nb.quantize(fp32, method="auto", calibration=calib, out=folder / f"{family}.int8.onnx",
                            overwrite=True)
    anchor = ort_anchor(export.path, folder, family, calib)
    print(f"\n{family}: {params:.1f}M parameters; export {export.exporter}, dynamic axes "
          f"{ {k: v for k, v in export.source.input_axes.items()} }; optimize route "
          f"{fp32.recipe.get('attention_route', fp32.recipe.get('level'))}; quantize {int8.recipe['method']} "
          f"({int8.recipe.get('method_rule', '')}), parity {'passed' if int8.parity else 'FAILED'}", flush=True)
    files = {"ORT default session, plain export (fp32)": export.path, "onnx-nb optimize() fp32": fp32.path,
             "ORT quantizer INT8 (" + ("dynamic" if "vit" in family else "static QDQ") + ")": anchor,
             f"onnx-nb quantize(auto) INT8 ({int8.recipe['method']})": int8.path}
    try:
        nncf_file: Path | None = nncf_int8(export.path, folder, family, calib)
    except ImportError:
        print("NNCF is not installed: no NNCF row")
        nncf_file = None
    evaluation = images(EVALUATION, 7)
    with torch.inference_mode():
        x = torch.from_numpy(evaluation)
        reference = model(pixel_values=x).logits.numpy() if hf else model(x).numpy()
    torch.set_num_threads(args.threads)
    accuracy: dict[str, tuple[float, float]] = {"PyTorch eager": (1.0, 1.0)}
    for batch in (1, 8):
        feed = {input_name: images(batch, 3)}
        ref_feed = torch.from_numpy(feed[input_name])
        runners: dict[str, Any] = {"PyTorch eager": (lambda x=ref_feed: model(pixel_values=x)) if hf else
                                   (lambda x=ref_feed: model(x))}
        for name, path in files.items():
            runners[name] = OrtRunner(Path(path), "CPUExecutionProvider", feed, args.threads, "all")
        try:
            runners["OpenVINO runtime, plain export"] = OpenVinoRunner(export.path, feed, args.threads)
            # OpenVINO computes an fp32 file in bf16 where the CPU has bf16 instructions (its default precision
            # hint): the like-with-like fp32 row forces f32
            runners["OpenVINO runtime, plain export, f32 forced"] = OpenVinoRunner(
                export.path, feed, args.threads, config={"INFERENCE_PRECISION_HINT": "f32"})
            if not has_contrib_ops(Path(int8.path)):
                runners["OpenVINO runtime, onnx-nb INT8 file"] = OpenVinoRunner(Path(int8.path), feed, args.threads)
            if nncf_file is not None:
                runners["NNCF INT8 on the OpenVINO runtime"] = OpenVinoRunner(nncf_file, feed, args.threads)
        except ImportError:
            print("OpenVINO is not installed: no OpenVINO rows")
        if batch == 1:
            for label, runner in runners.items():
                if hasattr(runner, "compiled"):
                    print(f"  {label}: OpenVINO inference precision {runner.options['precision']}")
        with torch.inference_mode():
            times = interleaved(runners, rounds=args.rounds, warmup=2, runs=3)
        base = float(np.median(times["PyTorch eager"])) * 1e3
        print(f"\n{family}, batch {batch}, 224x224, {args.threads} threads, median of {args.rounds} rounds x 3 runs; "
              f"load average {os.getloadavg()[0]:.2f}")
        print(f"{'candidate':48} {'p50 ms':>8} {'vs eager':>9} {'cosine (lowest)':>16} {'top-1 agreement':>16}")
        for name, runner in runners.items():
            ms = float(np.median(times[name])) * 1e3
            if name not in accuracy:  # the same file at either batch size: measured once
                logits = logits_of(runner, evaluation, input_name)
                accuracy[name] = (float(((logits * reference).sum(1) / (np.linalg.norm(logits, axis=1) *
                                                                         np.linalg.norm(reference, axis=1))).min()),
                                  float((logits.argmax(1) == reference.argmax(1)).mean()))
            cosine, top1 = accuracy[name]
            print(f"{name:48} {ms:8.2f} {base / ms:8.2f}x {cosine:16.5f} {top1:16.3f}")


def logits_of(runner: Any, evaluation: np.ndarray, name: str) -> np.ndarray:
    """The runner's file on the evaluation images, one at a time (the batch-1 graph, or the batch-8 one)."""
    out = []
    for image in evaluation:
        x = image[None]
        if hasattr(runner, "request"):
            result = runner.request.infer({name: x})
            out.append(np.asarray(next(iter(result.values()))))
        else:
            out.append(runner.session.run(None, {name: x})[0])
    return np.concatenate(out)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--models", default="resnet,vit")
    args = parser.parse_args()
    import onnxruntime as ort
    import torch

    versions = {"onnxruntime": ort.__version__, "torch": torch.__version__}
    for package in ("openvino", "nncf", "torchvision", "timm"):
        try:
            versions[package] = __import__(package).__version__
        except Exception as exc:  # noqa: BLE001 - a package that does not import here: its rows are left out
            versions[package] = f"not importable ({type(exc).__name__}: {str(exc)[:80]})"
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
          + ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)
    folder = Path(tempfile.mkdtemp(prefix="onnx-nb-vision-"))
    for family in args.models.split(","):
        run_model(family, args, folder)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
