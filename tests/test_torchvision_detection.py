"""torchvision's detection and segmentation models in one call (random weights, from their constructors): a
detector's list-of-images call becomes one image tensor in and a ``detections`` output (``masks`` beside it for Mask
R-CNN, compared box by box by IoU; ``keypoints`` for Keypoint R-CNN), height and width dynamic, the batch fixed at
one; parity matches boxes by IoU at a second image size; DeepLabV3 exports as the plain module it is.

The small detectors (a MobileNetV3-Small FPN, 320-pixel images) are made to score apart: with random weights and
BatchNorm's initial statistics (mean 0, variance 1) the backbone's features fade to ~1e-7 and every box of a Mask
R-CNN ties at one score, so their BatchNorm statistics come from random images and the class layers are scaled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import onnx_nb
from onnx_nb.results import detections

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
detection = pytest.importorskip("torchvision.models.detection")


def test_faster_rcnn_exports_in_one_default_call_and_matches_at_another_size(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=5)
    # scores spread as the small detectors' are: straight from the constructor every box scores the same 0.2066,
    # and which of hundreds of tied boxes comes first is then a rounding of the CPU at hand (AVX2 vs AVX-512)
    _scaled(model.roi_heads.box_predictor.cls_score, 10.0)
    model = _calibrated(model.eval())
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
    assert len(want["boxes"]) > 0 and got.shape[1] == 7
    rows = torch.cat([torch.zeros(len(want["boxes"]), 1), want["boxes"], want["scores"][:, None],
                      want["labels"][:, None].float()], dim=1).numpy()
    assert len(set(np.round(rows[:, 5], 4))) > len(rows) // 2, "the scores must spread for the rows to compare"
    found = detections.match(got, rows, 0.99, 1e-4)  # fp32: the same boxes, same classes, same scores
    assert found.matched == len(rows) == len(got) and found.worst_iou > 0.999, found.note(0.99, 1e-4)


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
    # a mask pasted from a saturated one has pixels at exactly 0.5: a rounding decides their side. Within the
    # score tolerance of each other they are ties; a pixel that moved by more is a difference
    small = np.zeros((1, 1, 8, 8), np.float32)
    small[0, 0, 2:6, 2:6] = 0.9
    small[0, 0, 6, 2:6] = 0.5
    above = small.copy()
    above[0, 0, 6, 2:6] = 0.5 + 2e-6
    assert not detections.mask_agreement(above, small, "fp32")[0]  # 20 pixels against 16: IoU 0.8
    assert detections.judge("masks", above, small, "fp32", 1e-4)[0]
    assert "4 pixels at 0.5" in detections.judge("masks", above, small, "fp32", 1e-4)[2]
    above[0, 0, 6, 2:6] = 0.6
    assert not detections.judge("masks", above, small, "fp32", 1e-4)[0]
    # boxes of no area (an untrained regressor's points and lines): the same corners are the same box
    flat = np.array([[0, 30, 30, 30, 30, 0.5, 1], [0, 40, 10, 40, 20, 0.4, 1]], np.float32)
    assert detections.match(flat, flat.copy(), 0.9, 1e-3).matched == 2
    moved = flat.copy()
    moved[0, 1:5] += 1.0
    assert detections.match(moved, flat, 0.9, 1e-3).matched == 1


def test_deeplabv3_exports_with_dynamic_image_size(tmp_path: Path) -> None:
    from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large

    torch.manual_seed(0)
    model = deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=5, aux_loss=False).eval()
    r = onnx_nb.export(model, torch.rand(1, 3, 224, 224), out=tmp_path / "deeplab.onnx", progress=False)
    assert r.status == "verified" and [o.name for o in r.outputs] == ["out"]
    assert r.inputs[0].shape[2:] == ["height", "width"] and r.check["shapes"]["x"][2] > 224


def _calibrated(model: Any) -> Any:
    """BatchNorm statistics measured on two random images (the rest of the model in eval mode)."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a plain average over the batches
        norm.train()
    images = list(torch.rand(2, 3, 240, 320, generator=torch.Generator().manual_seed(123)).unbind(0))
    with torch.no_grad():
        features = model.backbone(model.transform(images)[0].tensors)
        if hasattr(model, "head"):  # RetinaNet, FCOS, SSD: SSDlite's head has BatchNorm of its own
            model.head(list(features.values()))
    for norm in norms:
        norm.eval()
    return model


def _scaled(layer: Any, factor: float, bias: float | None = None) -> None:
    with torch.no_grad():
        layer.weight.mul_(factor)
        if bias is not None:
            layer.bias.fill_(bias)


def small_detector(name: str, seed: int = 0) -> Any:
    """A torchvision detector on a MobileNetV3-Small FPN (320-pixel images, torchvision's 320 models' proposal
    counts and score cut), its scores spread: class layers scaled (RetinaNet and FCOS without their 1% prior, whose
    scores would all sit under the cut), FCOS's box distances offset from zero (its ReLU gives zero-area boxes)."""
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.backbone_utils import mobilenet_backbone
    from torchvision.models.detection.keypoint_rcnn import KeypointRCNNHeads, KeypointRCNNPredictor

    torch.manual_seed(seed)
    if name == "ssdlite":
        model = detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=3,
                                                        detections_per_img=50)
        for block in model.head.classification_head.module_list:
            _scaled(block[-1], 2.0)
        return _calibrated(model.eval())
    backbone = mobilenet_backbone(backbone_name="mobilenet_v3_small", weights=None, fpn=True, trainable_layers=6,
                                  norm_layer=torch.nn.BatchNorm2d)  # three maps: strides 32, 32, 64
    small = {"min_size": 320, "max_size": 512}
    if name in ("maskrcnn", "keypointrcnn"):
        rcnn = dict(small, rpn_anchor_generator=AnchorGenerator(((32, 64, 128, 256),) * 3, ((0.5, 1.0, 2.0),) * 3),
                    rpn_pre_nms_top_n_test=150, rpn_post_nms_top_n_test=150, box_score_thresh=0.05,
                    box_detections_per_img=20)
        if name == "maskrcnn":
            model = detection.MaskRCNN(backbone, num_classes=3, **rcnn)
            _scaled(model.roi_heads.mask_predictor.mask_fcn_logits, 10.0)
        else:  # a narrow keypoint head: the default's eight 512-channel layers cost seconds per call
            model = detection.KeypointRCNN(backbone, num_classes=2, keypoint_head=KeypointRCNNHeads(256, (64, 64)),
                                           keypoint_predictor=KeypointRCNNPredictor(64, 5), **rcnn)
        _scaled(model.roi_heads.box_predictor.cls_score, 10.0)
    elif name == "retinanet":
        sizes = tuple((s, round(s * 2 ** (1 / 3)), round(s * 2 ** (2 / 3))) for s in (32, 64, 128))
        model = detection.RetinaNet(backbone, num_classes=3, detections_per_img=50, **small,
                                    anchor_generator=AnchorGenerator(sizes, ((0.5, 1.0, 2.0),) * 3))
        _scaled(model.head.classification_head.cls_logits, 300.0, -2.0)
    else:
        model = detection.FCOS(backbone, num_classes=3, detections_per_img=50, **small,
                               anchor_generator=AnchorGenerator(((8,), (16,), (32,)), ((1.0,),) * 3))
        _scaled(model.head.classification_head.cls_logits, 10.0, 0.0)
        _scaled(model.head.regression_head.bbox_reg, 1.0, 1.0)
    return _calibrated(model.eval())


def test_traced_resize_gives_pytorchs_size_and_pixels(tmp_path: Path) -> None:
    """torchvision's traced resize works the size out in float32 (a 992-row image to 799 rows where PyTorch makes
    800) and ONNX's Resize places its samples with other roundings (pixels off by 1e-3): the file resizes as PyTorch
    does, for a min/max size and for SSD's fixed size."""
    from torchvision.models.detection.transform import GeneralizedRCNNTransform

    from onnx_nb.kinds.detection.torchvision_export import DetectorGraph
    from onnx_nb.steps.export.args import DEFAULT_OPSET
    from onnx_nb.steps.export.machinery.torch_exporters import export_torchscript, quiet

    class Resized(torch.nn.Module):  # the transform's padded batch as the "masks" of one empty box
        def __init__(self, fixed_size: tuple[int, int] | None) -> None:
            super().__init__()
            self.transform = GeneralizedRCNNTransform(800, 1333, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225],
                                                      fixed_size=fixed_size)

        def forward(self, images: list[Any]) -> list[dict[str, Any]]:
            batch = self.transform(images)[0].tensors
            return [{"boxes": batch.new_zeros(1, 4), "scores": batch.new_zeros(1),
                     "labels": batch.new_zeros(1, dtype=torch.int64), "masks": batch}]

    gen = torch.Generator().manual_seed(0)
    for fixed_size in (None, (320, 320)):
        graph = DetectorGraph(Resized(fixed_size))
        path = tmp_path / f"resize-{fixed_size}.onnx"
        with quiet([], []):
            export_torchscript(graph, (torch.rand(1, 3, 480, 640, generator=gen),), path, ["images"],
                               ["detections", "masks"], {"images": {2: "height", 3: "width"}}, DEFAULT_OPSET)
        import onnxruntime as ort

        session = ort.InferenceSession(str(path))
        for size in [(992, 1312), (1000, 750), (333, 500), (480, 640)]:
            x = torch.rand(1, 3, *size, generator=gen)
            got = session.run(["masks"], {"images": x.numpy()})[0]
            with torch.no_grad():
                want = graph(x)["masks"].numpy()
            assert got.shape == want.shape, (fixed_size, size)
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"{fixed_size} {size}")


def test_traced_box_decoding_runs_on_no_boxes(tmp_path: Path) -> None:
    """A box head decodes the proposals the RPN kept; with none kept, torchvision's ``reshape(0, -1)`` stopped the
    file in ONNX Runtime (a Mask R-CNN on an image whose proposals were all removed) where PyTorch returns no
    boxes."""
    import onnxruntime as ort
    from torchvision.models.detection._utils import BoxCoder

    from onnx_nb.kinds.detection.torchvision_export import DetectorGraph
    from onnx_nb.steps.export.args import DEFAULT_OPSET
    from onnx_nb.steps.export.machinery.torch_exporters import export_torchscript, quiet

    class Decoding(torch.nn.Module):  # an image's rows as proposals, kept by their first value, two classes' codes
        def forward(self, images: list[Any]) -> list[dict[str, Any]]:
            rows = images[0][0]
            kept = rows[rows[:, 0] > 0.5]
            boxes = BoxCoder((10.0, 10.0, 5.0, 5.0)).decode(kept[:, 4:12], [kept[:, :4].cumsum(1)])
            boxes = boxes.reshape(-1, 2, 4)[:, 1]  # PyTorch leaves no boxes' codes unshaped: (0, 8)
            return [{"boxes": boxes, "scores": kept[:, 0], "labels": torch.ones_like(kept[:, 0]).long()}]

    graph = DetectorGraph(Decoding())
    path = tmp_path / "decode.onnx"
    with quiet([], []):
        export_torchscript(graph, (torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(0)),), path,
                           ["images"], ["detections"], {"images": {2: "height", 3: "width"}}, DEFAULT_OPSET)
    session = ort.InferenceSession(str(path))
    for x in (torch.rand(1, 3, 20, 16, generator=torch.Generator().manual_seed(1)), torch.zeros(1, 3, 20, 16)):
        with torch.no_grad():
            want = graph(x)["detections"].numpy()
        got = session.run(None, {"images": x.numpy()})[0]
        assert got.shape == want.shape and (len(want) > 0) == bool(x.any())
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def _rows(out: dict[str, Any]) -> np.ndarray:
    boxes = out["boxes"].numpy()
    return np.concatenate([np.zeros((len(boxes), 1), np.float32), boxes, out["scores"].numpy()[:, None],
                           out["labels"].numpy()[:, None].astype(np.float32)], axis=1)


@pytest.mark.parametrize("name", ["maskrcnn", "keypointrcnn", "retinanet", "fcos", "ssdlite"])
def test_small_detectors_give_torchvisions_boxes_at_other_sizes(name: str, tmp_path: Path) -> None:
    """Each detector exports (TorchScript: the default call's dynamo attempt is the Faster R-CNN test's), its check
    matches every box at a second size, and at a third size the file gives the boxes (masks, keypoints) of
    torchvision's own call on a list of one image, every box matched; Mask R-CNN's parity (masks by IoU) passes
    at the sample's size, a larger one and the probes."""
    import onnxruntime as ort

    model = small_detector(name)
    r = onnx_nb.export(model, out=tmp_path / f"{name}.onnx", progress=False, exporter="torchscript")
    extra = {"maskrcnn": ["masks"], "keypointrcnn": ["keypoints"]}.get(name, [])
    assert [o.name for o in r.outputs] == ["detections", *extra] and r.exporter == "torchscript"
    assert r.status == "unverified" and "traced with TorchScript" in r.unverified[0]  # one path, asked for or not
    count = int(r.check["summary"].split("detections: ")[1].split(" of ")[0])
    assert r.check["passed"] and count > 0 and f"{count} of {count} reference boxes matched by {count} " in \
        r.check["summary"]
    # 301 columns: torchvision's traced resize (float32) makes 319 of them where PyTorch makes 320; portrait
    x = torch.rand(1, 3, 401, 301, generator=torch.Generator().manual_seed(3))
    got = dict(zip([o.name for o in r.outputs], ort.InferenceSession(str(r.path)).run(None, {"images": x.numpy()})))
    with torch.no_grad():
        out = model([x[0]])[0]
    want = {"detections": _rows(out)} | {k: out[k].numpy() for k in extra}
    found = detections.match(got["detections"], want["detections"], 0.9, 1e-3)
    assert found.matched == len(want["detections"]) == len(got["detections"]) > 0, found.note(0.9, 1e-3)
    ours, theirs = detections.align_per_box(got, want, "fp32", 1e-3)
    pairs = np.array(found.pairs)
    np.testing.assert_allclose(got["detections"][pairs[:, 1], 1:6], want["detections"][pairs[:, 0], 1:6], atol=1e-2)
    if name == "maskrcnn":
        agree, worst, note = detections.mask_agreement(ours["masks"], theirs["masks"], "fp32", 1e-3)
        assert agree and worst is not None and worst > 0.95, note
        # parity at the sample's size and a larger one; the probes (inputs x10, x-1, 3x the spread) must run, but
        # saturate this random network: there a thread count in PyTorch alone moves its boxes by a pixel
        report = onnx_nb.check_parity(r, progress=False)
        sized = [row for row in report.rows if " · " not in row.shape]
        assert [row.output for row in sized] == ["detections", "masks"] * 2 and all(row.passed for row in sized)
        assert len(report.rows) > len(sized) and not any(row.status == "error" for row in report.rows)
    if name == "keypointrcnn":
        np.testing.assert_allclose(ours["keypoints"], theirs["keypoints"], atol=0.05)
