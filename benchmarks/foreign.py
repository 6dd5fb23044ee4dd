"""Models from beyond PyTorch and a file made elsewhere (issue 31's targets), side by side in one run:

- a Keras MobileNetV2 (96x96, 10 classes, random weights, logits), a Keras LSTM text classifier and a scikit-learn
  pipeline (StandardScaler + GradientBoostingClassifier) each exported in one call, then checked at a second batch
  size against their own framework (MobileNetV2's image size is fixed in its Keras model);
- a "downloaded" file: the same MobileNetV2 converted by tf2onnx outside onnx-nb, handed over with the inputs and
  outputs its author saved (io.npz), adopted with ``export(path, sample="io.npz")``, optimized, quantized with
  ``quantize(method="auto")`` (the graph decides the method) and checked against the file as it came; then the
  fp32 file, the optimized one and the INT8 file timed in one ``onnx_nb.benchmark`` run (plain sessions, shuffled
  order per round, untimed runs first) at batch 1 and 8.

    .venv/bin/python benchmarks/foreign.py [--threads 2] [--side 96]   # --side 224: docs/performance.md

Prints export seconds, parity verdicts and worst differences, the p50 latencies, the INT8/fp32 ratio, which row the
table calls best, and the load average.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--side", type=int, default=96)
    args = parser.parse_args()

    import keras
    import tensorflow as tf
    import tf2onnx
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    import onnx_nb

    work = Path(tempfile.mkdtemp(prefix="onnx_nb_foreign_"))
    rng = np.random.default_rng(0)
    keras.utils.set_random_seed(0)
    side = args.side
    mobilenet = keras.applications.MobileNetV2(input_shape=(side, side, 3), weights=None, classes=10,
                                               classifier_activation=None)
    for weight in mobilenet.weights:  # He-scaled kernels: Keras's default init leaves random logits at ~1e-12
        if weight.name.endswith("kernel"):
            fan_in = int(np.prod(weight.shape[:2] if "depthwise" in weight.path else weight.shape[:-1]))
            weight.assign(rng.standard_normal(weight.shape).astype(np.float32) * np.sqrt(2.0 / fan_in))
    images = rng.random((8, side, side, 3), dtype=np.float32) * 2 - 1

    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.LSTM(32)(keras.layers.Embedding(1000, 32)(tokens))
    lstm = keras.Model(tokens, keras.layers.Dense(3, name="classes")(x))

    features = rng.standard_normal((1000, 20)).astype(np.float32)
    labels = (features[:, 0] + features[:, 1] * features[:, 2] > 0).astype(int) + (features[:, 3] > 1)
    pipe = Pipeline([("scale", StandardScaler()), ("gbc", GradientBoostingClassifier(n_estimators=100))])
    pipe.fit(features, labels)

    print(f"{'model':34s} {'export s':>8s} {'export check':>12s} {'parity':>8s} {'worst diff':>10s}  at")
    cases = [("Keras MobileNetV2", mobilenet, images[:2], [{"batch": 5}]),
             ("Keras LSTM text classifier", lstm, None, [{"batch": 5, "sequence": 24}]),
             ("scikit-learn scaler + GBC(100)", pipe, features[:16], [{"batch": 37}])]
    for label, model, sample, shapes in cases:
        started = time.perf_counter()
        result = onnx_nb.export(model, sample, out=work / f"{label.split()[1].lower()}.onnx", progress=False)
        seconds = time.perf_counter() - started
        report = onnx_nb.check_parity(result, shapes=shapes, probes=False, progress=False)
        worst = max((r.max_abs or 0.0) for r in report.rows)
        print(f"{label:34s} {seconds:8.2f} {'passed' if result else 'FAILED':>12s} "
              f"{'PASSED' if report else 'FAILED':>8s} {worst:10.2e}  {', '.join(report.shapes)}")

    # a file made elsewhere: tf2onnx outside onnx-nb, and the outputs its author saved
    vendor = work / "vendor" / "mobilenet_v2.onnx"
    vendor.parent.mkdir()
    tf2onnx.convert.from_keras(mobilenet, [tf.TensorSpec((None, side, side, 3), tf.float32, name="input")],
                               opset=13, output_path=str(vendor))
    import onnx

    output = onnx.load(str(vendor), load_external_data=False).graph.output[0].name
    logits = np.asarray(mobilenet(images, training=False))
    np.savez(vendor.parent / "io.npz", input=images, **{output: logits})
    print(f"\nMobileNetV2 logits (random weights): rms {np.sqrt(np.mean(logits ** 2)):.3g}, "
          f"top-1 classes seen {len(set(logits.argmax(1)))} of 10")
    adopted = onnx_nb.export(vendor, sample=vendor.parent / "io.npz", progress=False)
    print(f"adopted {vendor.name}: {adopted.status}, {adopted.check['against']}, "
          f"max abs diff {adopted.check['max_abs_diff']:.2e} (file untouched, exporter={adopted.exporter})")
    calibration = [{"input": rng.random((1, side, side, 3), dtype=np.float32) * 2 - 1} for _ in range(32)]
    started = time.perf_counter()
    fast = onnx_nb.optimize(adopted, out=work / "vendor.opt.onnx")  # Pad folded into Conv, as the PyTorch route
    int8 = onnx_nb.quantize(fast, method="auto", calibration=calibration, out=work / "vendor.int8.onnx")
    print(f"quantize(method='auto'): {int8.recipe['method']} ({int8.recipe.get('method_rule', '')[:60]}), "
          f"{time.perf_counter() - started:.1f} s; parity vs {int8.parity.reference}: "
          f"{'PASSED' if int8.parity else 'FAILED'}, lowest cosine "
          f"{min(r.cosine for r in int8.parity.rows if r.cosine is not None):.4f}")
    table = onnx_nb.benchmark([adopted, fast, int8], providers=["cpu"], shapes=[{"batch": 1}, {"batch": 8}],
                              threads=args.threads, progress=False)
    rows = [r for r in table.rows if r.status == "ok" and r.p50_ms]
    print()
    for r in rows:
        print(f"{r.variant:28s} {r.backend:10s} {r.shape:10s} p50 {r.p50_ms:7.2f} ms  p90 {r.p90_ms:7.2f} ms  {r.note}")
    for shape in dict.fromkeys(r.shape for r in rows):
        fp32, _, q = [r.p50_ms for r in rows if r.shape == shape][:3]
        print(f"{shape}: INT8 / fp32 p50 = {q / fp32:.2f}  ({'faster' if q < fp32 else 'SLOWER'})")
    best = table.best()
    print(f"best row: {best.variant if best else '-'} {best.shape if best else ''}")
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
