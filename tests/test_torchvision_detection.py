"""torchvision's detection and segmentation models in one call (random weights, from their constructors): a
detector's list-of-images call becomes one image tensor in and a ``detections`` output (``masks`` beside it for Mask
R-CNN, compared box by box by IoU), height and width dynamic, the batch fixed at one; parity matches boxes by IoU
at a second image size; DeepLabV3 exports as the plain module it is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onnx_nb

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
detection = pytest.importorskip("torchvision.models.detection")


def test_faster_rcnn_exports_in_one_default_call_and_matches_at_another_size(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=5)
    r = onnx_nb.export(model, out=tmp_path / "frcnn.onnx", progress=False)
    assert [i.name for i in r.inputs] == ["images"] and r.inputs[0].shape == [1, 3, "height", "width"]
    assert [o.name for o in r.outputs] == ["detections"] and r.exporter == "torchscript"
    assert r.check["passed"] and r.check["shapes"]["images"][2:] != [480, 640] and "matched" in r.check["summary"]
    # dynamo cannot trace the data-dependent postprocessing; the TorchScript trace is said to be unverified
    assert r.status == "unverified" and r.unverified
    assert r.fixed_axes[0].axis == 0 and "one image per call" in r.fixed_axes[0].reason
    report = onnx_nb.check_parity(r, progress=False)
    assert report.unverified and all(row.passed for row in report.rows) and not report.passed  # never "passed"
    assert any("height=" in row.shape and "480" not in row.shape for row in report.rows)
    # torchvision's own call on a list of one image gives the rows the file gives
    import onnxruntime as ort

    x = torch.rand(1, 3, 300, 400, generator=torch.Generator().manual_seed(3))
    got = ort.InferenceSession(str(r.path)).run(None, {"images": x.numpy()})[0]
    with torch.no_grad():
        want = model([x[0]])[0]
    assert len(want["boxes"]) > 0 and got.shape == (len(want["boxes"]), 7)
    np.testing.assert_allclose(got[:, 1:5], want["boxes"].numpy(), atol=1e-3)
    np.testing.assert_array_equal(got[:, 6], want["labels"].numpy())


def test_per_box_outputs_follow_the_matched_boxes_and_masks_compare_by_iou() -> None:
    from onnx_nb.results import detections

    rows = np.array([[0, 10, 10, 50, 50, 0.9, 1], [0, 60, 60, 100, 100, 0.8, 2], [0, 5, 60, 40, 90, 0.7, 1]],
                    np.float32)
    masks = np.zeros((3, 1, 120, 120), np.float32)
    for k, (x1, y1, x2, y2) in enumerate(rows[:, 1:5].astype(int)):
        masks[k, 0, y1:y2, x1:x2] = 0.9
    order = [2, 0, 1]  # the other run kept the same boxes in another order
    got, want = detections.align_per_box({"detections": rows[order], "masks": masks[order]},
                                         {"detections": rows, "masks": masks}, "fp32", 1e-4)
    np.testing.assert_array_equal(got["masks"], want["masks"])
    assert detections.mask_agreement(got["masks"], want["masks"], "fp32")[0]
    shifted = got["masks"].copy()
    shifted[0] = np.roll(shifted[0], 25, axis=2)  # one mask moved by 25 of its 40 pixels: IoU 0.23
    agree, worst, note = detections.mask_agreement(shifted, want["masks"], "fp32")
    assert not agree and worst is not None and worst < 0.3 and "IoU" in note
    edge = got["masks"].copy()
    edge[0, 0, 10:50, 50] = 0.9  # a one-pixel edge: a large element-wise error, the same mask by IoU
    assert detections.mask_agreement(edge, want["masks"], "fp32")[0]


def test_deeplabv3_exports_with_dynamic_image_size(tmp_path: Path) -> None:
    from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large

    torch.manual_seed(0)
    model = deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=5, aux_loss=False).eval()
    r = onnx_nb.export(model, torch.rand(1, 3, 224, 224), out=tmp_path / "deeplab.onnx", progress=False)
    assert r.status == "verified" and [o.name for o in r.outputs] == ["out"]
    assert r.inputs[0].shape[2:] == ["height", "width"] and r.check["shapes"]["x"][2] > 224
