"""YOLOv8n (random weights, batch norm statistics from images) to a static INT8 file through onnx-nb, against
Ultralytics' own ONNX export and ONNX Runtime's ``quantize_static`` on that file, side by side in one run.

    .venv/bin/python benchmarks/yolo.py [--yaml yolov8n.yaml] [--rounds 5] [--threads 2] [--size 640]

Candidates (all ONNX Runtime, CPU provider, ``--threads`` intra-op threads, one 640x640 image, batch 1), visited in
a shuffled order each round with untimed runs first (``onnx_nb.runtime.timing.interleaved``):

- Ultralytics fp32: ``model.export(format="onnx", dynamic=True, simplify=False)`` (its default export, dynamic axes
  as onnx-nb's; simplify needs onnxslim, not installed here);
- ORT quantize_static on it: QDQ, per-channel INT8 weights, uint8 activations, MinMax calibration on the same
  images, every node quantized (what a user gets calling ONNX Runtime directly);
- onnx-nb fp32: ``onnx_nb.export(model)``;
- onnx-nb INT8: ``onnx_nb.quantize(export, method="auto", calibration=<folder>)``: static QDQ chosen for a
  convolutional network, the head's box decoding kept in float, re-validated.

Calibration: 16 images made from Ultralytics' two sample photos (crops, flips, scales). Accuracy: each file's
``output0`` against PyTorch's on bus.jpg (cosine of the class scores; mean box error in pixels of the 100 anchors
PyTorch scores highest). Prints ms per image, ratios, and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' YOLO builder


def calibration_images(folder: Path, count: int = 16) -> Path:
    import numpy as np
    import ultralytics
    from PIL import Image, ImageOps

    assets = Path(ultralytics.__file__).parent / "assets"
    photos = [Image.open(assets / n).convert("RGB") for n in ("bus.jpg", "zidane.jpg")]
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        photo = photos[i % 2]
        w, h = photo.size
        s = rng.uniform(0.5, 1.0)
        x, y = int(rng.uniform(0, w * (1 - s))), int(rng.uniform(0, h * (1 - s)))
        crop = photo.crop((x, y, x + int(w * s), y + int(h * s)))
        (ImageOps.mirror(crop) if i % 3 == 0 else crop).save(folder / f"calib{i:02d}.png")
    return folder


def image(path: Path, size: int) -> object:
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(path).convert("RGB").resize((size, size)), np.float32) / 255.0
    return pixels.transpose(2, 0, 1)[None].copy()


def ort_quantize_static(src: Path, dst: Path, calib: list[dict[str, object]]) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(calib)

        def get_next(self) -> dict[str, object] | None:
            return next(self.items, None)

    pre = dst.with_name("pre.onnx")
    quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)  # symbolic inference stops on its dynamic axes
    quantize_static(str(pre), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--yaml", default="yolov8n.yaml")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--size", type=int, default=640)
    args = parser.parse_args()

    import numpy as np
    import onnxruntime as ort
    import torch
    import ultralytics

    import onnx_nb
    import tiny_models
    from onnx_nb.runtime.timing import interleaved
    from onnx_nb.steps.variants.vision import image_calibration

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="onnx-nb-yolo-"))
    os.chdir(work)  # Ultralytics writes its file beside the yaml's name, in the working folder
    model = tiny_models.build_yolo(args.yaml, size=args.size)
    calib_dir = calibration_images(work / "calib")

    ultra_fp32 = Path(model.export(format="onnx", dynamic=True, simplify=False, imgsz=args.size, verbose=False))
    calib = image_calibration(calib_dir, ultra_fp32)
    ort_int8 = work / "ultralytics.ort-int8.onnx"
    ort_quantize_static(ultra_fp32, ort_int8, calib)
    export = onnx_nb.export(model, out=work / "onnx-nb" / "model.onnx")
    print(export)
    int8 = onnx_nb.quantize(export, method="auto", calibration=calib_dir)
    print(f"onnx-nb INT8: {int8.recipe.get('method_rule')}; {int8.recipe.get('float_rule')}; "
          f"parity {'passed' if int8.parity else 'FAILED'}")
    files = {"Ultralytics fp32": ultra_fp32, "ORT quantize_static on it": ort_int8,
             "onnx-nb fp32": export.path, "onnx-nb INT8": int8.path}

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    sessions = {name: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                for name, path in files.items()}
    bus = image(Path(ultralytics.__file__).parent / "assets" / "bus.jpg", args.size)
    feeds = {name: {s.get_inputs()[0].name: bus} for name, s in sessions.items()}
    with torch.no_grad():
        ref = onnx_nb.kinds.detection.yolo_export.YoloGraph(model)(torch.from_numpy(bus))["output0"].numpy()[0]
    top = np.argsort(-ref[4:].max(0))[:100]
    times = interleaved({name: (lambda s=s, f=feeds[name]: s.run(None, f)) for name, s in sessions.items()},
                        rounds=args.rounds, warmup=3, runs=10)
    base = statistics.median(times["Ultralytics fp32"])
    ort_base = statistics.median(times["ORT quantize_static on it"])
    print(f"\n{args.yaml}, random weights, {args.size}x{args.size}, batch 1, {args.threads} threads, CPU provider")
    for name, values in times.items():
        median = statistics.median(values)
        out = sessions[name].run(None, feeds[name])[0][0]
        scores, boxes = out[4:].ravel(), out[:4, top]
        cos = float(np.dot(scores, ref[4:].ravel()) / (np.linalg.norm(scores) * np.linalg.norm(ref[4:]) + 1e-12))
        print(f"  {name:28s} {median * 1e3:7.1f} ms   {base / median:5.2f}x Ultralytics fp32   "
              f"{ort_base / median:5.2f}x ORT INT8   {files[name].stat().st_size / 2**20:5.1f} MB   "
              f"scores cosine {cos:.4f}, box error {np.abs(boxes - ref[:4, top]).mean():.2f} px")
    print(f"  load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
