"""Ultralytics YOLO in one call: YOLOv8n, YOLO11n-seg and a pose model built from their yaml (random weights whose
batch norm statistics come from images, so anchors do not tie) export with any batch and image size, checked in
ONNX Runtime at a second size; Ultralytics itself predicts with the file; the suppression in the graph (ONNX's
NonMaxSuppression) is verified on boxes, matched by IoU; a static INT8 file calibrated on a folder of images keeps
the head's box arithmetic and class scores in float and passes its parity; bad input is a clear error."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import numpy as np
import pytest

import onnx_nb
import tiny_models
from onnx_nb.errors import CalibrationError, InvalidArgumentError
from onnx_nb.results import detections

ultralytics = pytest.importorskip("ultralytics")
torch = pytest.importorskip("torch")
ASSETS = Path(ultralytics.__file__).parent / "assets"


@pytest.fixture(scope="module")
def yolov8n() -> object:
    return tiny_models.build_yolo("yolov8n.yaml")


@pytest.fixture(scope="module")
def default_export(yolov8n: object, tmp_path_factory: pytest.TempPathFactory) -> onnx_nb.ExportResult:
    return onnx_nb.export(yolov8n, out=tmp_path_factory.mktemp("yolo") / "yolov8n.onnx", progress=False)


def image(name: str, size: int) -> np.ndarray:
    from PIL import Image

    pixels = np.asarray(Image.open(ASSETS / name).convert("RGB").resize((size, size)), np.float32) / 255.0
    return pixels.transpose(2, 0, 1)[None].copy()


def test_yolo_exports_in_one_default_call_with_ultralytics_names_and_metadata(
        yolov8n: object, default_export: onnx_nb.ExportResult) -> None:
    r = default_export
    assert r.status == "verified" and r.exporter == "dynamo" and r.source.name == "yolov8n"
    assert [i.name for i in r.inputs] == ["images"] and [o.name for o in r.outputs] == ["output0"]
    assert r.source.sample["images"].shape == (1, 3, 640, 640)
    # checked at another batch and image size, which the file takes (height and width grow by the stride's power)
    shape = r.check["shapes"]["images"]
    assert shape[0] == 2 and shape[2] > 640 and shape[2] % 32 == 0 and r.check["passed"]
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(r.path), load_external_data=False).metadata_props}
    assert meta["task"] == "detect" and meta["stride"] == "32" and len(ast.literal_eval(meta["names"])) == 80
    # the user's model is left as it was: the head still trains and returns its raw maps
    head = yolov8n.model.model[-1]  # type: ignore[attr-defined]
    assert head.export is False and not isinstance(yolov8n.model(torch.rand(1, 3, 64, 64)), torch.Tensor)  # type: ignore[attr-defined]


def test_ultralytics_predicts_with_the_file_as_with_its_own_model(yolov8n: object,
                                                                    default_export: onnx_nb.ExportResult) -> None:
    from ultralytics import YOLO

    source = str(ASSETS / "bus.jpg")
    theirs = yolov8n.predict(source, imgsz=640, conf=0.25, verbose=False)[0].boxes  # type: ignore[attr-defined]
    ours = YOLO(str(default_export.path), task="detect").predict(source, imgsz=640, conf=0.25, verbose=False)[0].boxes
    assert len(theirs) > 0
    rows = lambda b: np.column_stack([np.zeros(len(b)), b.xyxy.numpy(), b.conf.numpy(), b.cls.numpy()])  # noqa: E731
    found = detections.match(rows(ours), rows(theirs), 0.9, 1e-3)
    assert found.passed(0.0), found.note(0.9, 1e-3)


def test_segment_and_pose_models_export_their_extra_outputs(tmp_path: Path) -> None:
    seg = onnx_nb.export(tiny_models.build_yolo("yolo11n-seg.yaml"), torch.rand(1, 3, 320, 320),
                         out=tmp_path / "seg.onnx", progress=False)
    assert seg.status == "verified" and [o.name for o in seg.outputs] == ["output0", "output1"]
    assert seg.outputs[0].shape[1] == 4 + 80 + 32  # boxes, class scores, mask coefficients
    pose = onnx_nb.export(tiny_models.build_yolo("yolov8n-pose.yaml"), torch.rand(1, 3, 320, 320),
                          out=tmp_path / "pose.onnx", progress=False)
    assert pose.status == "verified" and pose.outputs[0].shape[1] == 4 + 1 + 17 * 3
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(pose.path), load_external_data=False).metadata_props}
    assert meta["task"] == "pose" and ast.literal_eval(meta["kpt_shape"]) == [17, 3]


def test_suppression_in_the_graph_is_verified_on_boxes(yolov8n: object, tmp_path: Path) -> None:
    r = onnx_nb.export(yolov8n, torch.rand(1, 3, 320, 320), out=tmp_path / "nms.onnx", progress=False, nms=True)
    assert r.status == "verified" and [o.name for o in r.outputs] == ["detections"]
    import onnx

    proto = onnx.load(str(r.path), load_external_data=False)
    assert "NonMaxSuppression" in {n.op_type for n in proto.graph.node}
    assert "boxes matched" in r.check["summary"]
    report = onnx_nb.check_parity(r, progress=False)
    assert report.passed and all("matched" in row.note for row in report.rows)
    # the same rows as PyTorch's suppression (torchvision's nms) on a photo, at another size and batch of two
    import onnxruntime as ort

    x = np.concatenate([image("bus.jpg", 416), image("zidane.jpg", 416)])
    got = ort.InferenceSession(str(r.path)).run(None, {"images": x})[0]
    with torch.no_grad():
        want = r.source.model(torch.from_numpy(x))["detections"].numpy()
    assert got.shape[1] == 7 and set(got[:, 0]) <= {0.0, 1.0} and len(want) > 0
    found = detections.match(got, want, 0.9, 1e-3)
    # random weights saturate many scores at 1.0 on photos: boxes tied at the 300-per-image cut may differ (every
    # unmatched one a tie: passed(0.0)); how many tie depends on the CPU's kernels (446 of 600 matched on an Intel Xeon
    # with AMX, more on AMD EPYC), so at least 60% matched, not 80%
    assert found.passed(0.0) and found.matched >= 0.6 * len(want) and len(got) == len(want), found


def test_box_matching_fails_on_moved_boxes_and_passes_reordered_ones() -> None:
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 300, (20, 2))
    rows = np.column_stack([np.zeros(20), xy, xy + rng.uniform(20, 80, (20, 2)), rng.uniform(0.3, 0.9, 20),
                            rng.integers(0, 3, 20)])
    assert detections.match(rows[::-1], rows, 0.9, 1e-3).passed(0.0)  # order does not matter
    moved = rows.copy()
    moved[:5, 1:5] += 40  # five boxes somewhere else
    found = detections.match(moved, rows, 0.9, 1e-3)
    assert not found.passed(0.0) and found.unexplained == 10 and found.matched == 15
    near_cut = rows[np.argsort(-rows[:, 5])][:-1]  # the lowest-scored box dropped by the other run: borderline
    assert detections.match(near_cut, rows, 0.9, 1e-3).passed(0.0)
    assert not detections.match(np.zeros((0, 7)), rows, 0.9, 1e-3).passed(0.0)  # an empty run is not borderline


def test_static_int8_calibrated_on_images_keeps_the_box_arithmetic_in_float(default_export: onnx_nb.ExportResult,
                                                                      tmp_path: Path) -> None:
    calib = tmp_path / "images"
    calib.mkdir()
    for name in ("bus.jpg", "zidane.jpg"):
        shutil.copy(ASSETS / name, calib / name)
    q = onnx_nb.quantize(default_export, method="auto", calibration=calib, out=tmp_path / "int8.onnx")
    assert q.recipe["method"] == "static" and q.recipe["calibration"] == "2 samples"
    assert "box arithmetic" in q.recipe["float_rule"] and bool(q.parity), q.parity
    assert q.path.stat().st_size < default_export.path.stat().st_size / 3
    import onnx

    nodes = onnx.load(str(q.path), load_external_data=False).graph.node
    produced = {o: n.op_type for n in nodes for o in n.output}
    consumers: dict[str, list[str]] = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n.op_type)
    quantized = lambda n: "QuantizeLinear" in consumers.get(n.output[0], [])  # noqa: E731
    sigmoids = [n for n in nodes if n.op_type == "Sigmoid"]
    assert len(sigmoids) - sum(map(quantized, sigmoids)) == 1  # the class scores' in float; every SiLU's quantized
    assert all(quantized(n) for n in nodes if n.op_type == "Softmax")  # the box distribution's softmax quantized
    convs = [n for n in nodes if n.op_type == "Conv"]
    assert all(produced.get(n.input[0]) == "DequantizeLinear" for n in convs)  # the convolutions all quantized


def test_bad_input_is_a_clear_error(yolov8n: object, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="nms is for Ultralytics YOLO"):
        onnx_nb.export(torch.nn.Linear(2, 2), torch.rand(1, 2), nms=True, out=tmp_path / "a.onnx")
    with pytest.raises(InvalidArgumentError, match=r"conf .*iou .*max_det"):
        onnx_nb.export(yolov8n, nms={"threshold": 0.5}, out=tmp_path / "b.onnx")
    with pytest.raises(InvalidArgumentError, match="conf in"):
        onnx_nb.export(yolov8n, nms={"conf": 1.5}, out=tmp_path / "c.onnx")
    cls = ultralytics.YOLO("yolov8n-cls.yaml", verbose=False)
    with pytest.raises(InvalidArgumentError, match="detect, segment and pose"):
        onnx_nb.export(cls, nms=True, out=tmp_path / "d.onnx")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CalibrationError, match="holds no images"):
        onnx_nb.quantize(_tiny_file(tmp_path), method="static", calibration=empty)


def _tiny_file(folder: Path) -> Path:
    return onnx_nb.export(torch.nn.Conv2d(3, 4, 3), torch.rand(1, 3, 32, 32), out=folder / "conv.onnx",
                          progress=False).path
