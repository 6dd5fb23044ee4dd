"""SkipLayerNormalization written back as Add + LayerNormalization where the pair is measured faster: the same
outputs, a form ONNX Runtime's session does not fuse again, and the measurement in the recipe."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import onnx_nb
from onnx_nb.steps.variants.norms import timings, unfuse


def test_unfused_norms_match_and_stay_unfused(tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    from onnxruntime.transformers import optimizer

    export = onnx_nb.export(tiny_dirs["bert"], out=tmp_path / "bert.onnx", progress=False)
    variant = onnx_nb.optimize(export, out=tmp_path / "variant.onnx", validate=False)
    note = variant.recipe.get("skip_layernorm")
    assert note and note["fused_ms"] > 0 and note["unfused_ms"] > 0, variant.recipe  # measured, whatever it decided
    if hasattr(os, "getloadavg"):  # how busy the machine was when it measured
        assert note["load"].endswith(f"on {os.cpu_count()} cores"), note
    left = [n.op_type for n in onnx.load(str(variant.path)).graph.node].count("SkipLayerNormalization")
    assert (left == 0) == note["rule"].endswith(f"faster on [8, 128, {variant.recipe['hidden_size']}]"), note
    fused = tmp_path / "fused.onnx"  # ORT's optimizer alone: its SkipLayerNormalization kept
    optimizer.optimize_model(str(export.path), model_type="bert", num_heads=2, hidden_size=32,
                             opt_level=0).save_model_to_file(str(fused))
    proto = onnx.load(str(fused))
    skip = [n for n in proto.graph.node if n.op_type == "SkipLayerNormalization"]
    count = unfuse(proto)
    assert count == len(skip) == 4  # two layers: after attention and after the MLP
    ops = [n.op_type for n in proto.graph.node]
    assert "SkipLayerNormalization" not in ops and ops.count("LayerNormalization") >= 4
    ours = [n for n in proto.graph.node if n.op_type == "LayerNormalization" and n.name.endswith("/skipnorm_norm")]
    assert len(ours) == 4 and all(a.i == 2 for n in ours for a in n.attribute if a.name == "axis")
    onnx.save(proto, str(tmp_path / "unfused.onnx"))
    feed = {k: v.numpy() for k, v in export.source.sample.items()}
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "as-loaded.onnx")  # what a default session runs
    a = ort.InferenceSession(str(fused), providers=["CPUExecutionProvider"]).run(None, feed)
    b = ort.InferenceSession(str(tmp_path / "unfused.onnx"), opts, providers=["CPUExecutionProvider"]).run(None, feed)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
    loaded = [n.op_type for n in onnx.load(str(tmp_path / "as-loaded.onnx")).graph.node]
    assert "SkipLayerNormalization" not in loaded and "LayerNormalization" in loaded


def test_timings_are_measured() -> None:
    fused, unfused = timings(64)
    assert 0 < fused < 1000 and 0 < unfused < 1000
