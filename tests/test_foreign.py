"""Models from beyond PyTorch (Keras 3 on TensorFlow, a TensorFlow SavedModel, scikit-learn) and ONNX files made
elsewhere, through export, parity and quantize: real conversions (tf2onnx, Keras's own export, skl2onnx) and real
sessions on tiny models."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")

from pathlib import Path

import numpy as np
import pytest

import onnx_nb
from helpers import installed, lazy
from onnx_nb.errors import (
    InvalidArgumentError,
    InvalidModelError,
    OnnxNbError,
    SampleError,
    UnsupportedOperatorError,
)

installed("tf2onnx", "skl2onnx", "sklearn")
tf, keras = lazy("tensorflow"), lazy("keras")


def tiny_cnn() -> object:
    keras.utils.set_random_seed(0)
    image = keras.Input((None, None, 3), name="image")
    x = keras.layers.Conv2D(8, 3, padding="same")(image)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(image, keras.layers.Dense(10, name="logits")(x), name="tiny_cnn")


@pytest.fixture(scope="module")
def cnn_export(tmp_path_factory: pytest.TempPathFactory) -> onnx_nb.ExportResult:
    model = tiny_cnn()
    sample = np.random.default_rng(0).random((2, 32, 32, 3), dtype=np.float32)
    return onnx_nb.export(model, sample, out=tmp_path_factory.mktemp("keras") / "cnn.onnx", progress=False)


def test_keras_cnn_exports_with_open_axes_and_passes_parity_at_other_sizes(cnn_export: onnx_nb.ExportResult) -> None:
    result = cnn_export
    assert result, result.check
    assert result.exporter == "tf2onnx" and result.source.kind == "keras"
    assert result.source.model_type == "keras/tensorflow"
    assert result.inputs[0].name == "image" and result.inputs[0].shape == ["batch", "height", "width", 3]
    assert [o.name for o in result.outputs] == ["logits"]
    assert result.check["against"] == "Keras (tensorflow)" and result.check["shapes"]["image"] == [3, 64, 64, 3]
    assert "ORT vs Keras (tensorflow)" in repr(result)
    report = onnx_nb.check_parity(result, shapes=[{"batch": 3, "height": 40, "width": 24}], probes=False,
                                  progress=False)
    assert report, report
    assert report.reference == "Keras tiny_cnn" and report.rows[0].max_abs < 1e-4
    assert report.shapes[report.rows[0].shape]["image"] == [3, 40, 24, 3]


def test_keras_own_export_gives_the_same_outputs(cnn_export: onnx_nb.ExportResult, tmp_path: Path) -> None:
    model = cnn_export.source.model
    result = onnx_nb.export(model, cnn_export.source.sample, exporter="keras", out=tmp_path / "k.onnx",
                            progress=False)
    assert result and result.exporter == "keras"
    import onnxruntime as ort

    x = np.random.default_rng(3).random((1, 20, 28, 3), dtype=np.float32)
    ours = ort.InferenceSession(str(result.path)).run(None, {"image": x})[0]
    theirs = ort.InferenceSession(str(cnn_export.path)).run(None, {"image": x})[0]
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_quantize_a_keras_cnn_takes_static_qdq_and_is_checked_against_keras(cnn_export: onnx_nb.ExportResult,
                                                                              tmp_path: Path) -> None:
    variant = onnx_nb.quantize(cnn_export, method="auto", out=tmp_path / "cnn.int8.onnx")
    assert variant.recipe["method"] == "static", variant.recipe
    assert variant.parity is not None and variant.parity.reference == "Keras tiny_cnn"
    assert variant.parity, variant.parity


def test_keras_lstm_text_classifier_varies_batch_and_sequence(tmp_path: Path) -> None:
    keras.utils.set_random_seed(1)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(100, 8)(tokens)
    x = keras.layers.LSTM(8)(x)
    model = keras.Model(tokens, keras.layers.Dense(3, name="classes")(x))
    result = onnx_nb.export(model, out=tmp_path / "lstm.onnx", progress=False)  # its sample from model.inputs
    assert result, result.check
    assert result.inputs[0].shape == ["batch", "sequence"] and result.source.sample["tokens"].max() < 100
    assert "LSTM" in result.op_histogram
    report = onnx_nb.check_parity(result, shapes=[{"batch": 1, "sequence": 3}, {"batch": 4, "sequence": 20}],
                                  probes=False, progress=False)
    assert report, report


def test_a_saved_model_folder_exports_through_its_signature(tmp_path: Path) -> None:
    class Affine(tf.Module):
        def __init__(self) -> None:
            self.w = tf.Variable(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="features")])
        def __call__(self, x: object) -> object:
            return {"scores": tf.nn.softmax(tf.matmul(x, self.w))}

    folder = tmp_path / "saved"
    module = Affine()
    tf.saved_model.save(module, str(folder), signatures=module.__call__.get_concrete_function())
    result = onnx_nb.export(folder, out=tmp_path / "affine.onnx", progress=False)
    assert result, result.check
    assert result.source.kind == "tensorflow" and result.exporter == "tf2onnx"
    assert [o.name for o in result.outputs] == ["scores"] and result.inputs[0].shape == ["batch", 4]
    report = onnx_nb.check_parity(result, shapes=[{"batch": 5}], progress=False)
    assert report and report.reference.startswith("TensorFlow")
    # the same module as an object
    again = onnx_nb.export(module, out=tmp_path / "affine2.onnx", progress=False)
    assert again and again.source.kind == "tensorflow"


def test_a_saved_model_without_signatures_and_an_unsupported_operator_are_named(tmp_path: Path) -> None:
    class Bare(tf.Module):
        pass

    folder = tmp_path / "bare"
    tf.saved_model.save(Bare(), str(folder))
    with pytest.raises(InvalidModelError, match="no signatures"):
        onnx_nb.export(folder, progress=False)

    inp = keras.Input((6,), name="x")
    odd = keras.layers.Lambda(lambda t: tf.raw_ops.Bucketize(input=t, boundaries=[0.0, 1.0]), name="odd_bins")(inp)
    model = keras.Model(inp, odd)
    with pytest.raises(UnsupportedOperatorError) as caught:
        onnx_nb.export(model, np.zeros((2, 6), np.float32), out=tmp_path / "odd.onnx", progress=False)
    assert caught.value.operator == "Bucketize" and caught.value.module_path == "odd_bins", caught.value
    assert not (tmp_path / "odd.onnx").exists()


KERAS_ON_TORCH = """
import os
os.environ["KERAS_BACKEND"] = "torch"
import keras, onnx_nb
keras.utils.set_random_seed(0)
image = keras.Input((None, None, 3), name="image")
x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(8, 3, padding="same", activation="relu")(image))
model = keras.Model(image, keras.layers.Dense(4)(x))
result = onnx_nb.export(model, out=os.environ["OUT"], progress=False)  # its sample from model.inputs
report = onnx_nb.check_parity(result, probes=False, progress=False)
print(result.source.kind, result.exporter, bool(result), bool(report), result.inputs[0].shape)
"""


def test_keras_on_the_torch_backend_takes_the_pytorch_route(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "OUT": str(tmp_path / "kt.onnx")}
    run = subprocess.run([sys.executable, "-c", KERAS_ON_TORCH], capture_output=True, text=True, env=env,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    kind, exporter, exported, checked, *_ = run.stdout.split()
    assert (kind, exporter, exported, checked) == ("module", "dynamo", "True", "True"), run.stdout


def test_bad_arguments_for_a_keras_model(cnn_export: onnx_nb.ExportResult, tmp_path: Path) -> None:
    model = cnn_export.source.model
    with pytest.raises(InvalidArgumentError, match="opset"):
        onnx_nb.export(model, opset=21, out=tmp_path / "a.onnx", progress=False)
    with pytest.raises(InvalidArgumentError, match="cannot export a Keras model"):
        onnx_nb.export(model, exporter="dynamo", out=tmp_path / "a.onnx", progress=False)
    with pytest.raises(InvalidArgumentError, match="task"):
        onnx_nb.export(model, task="text-classification", out=tmp_path / "a.onnx", progress=False)
    with pytest.raises(InvalidArgumentError, match="no PyTorch model"):
        onnx_nb.benchmark([cnn_export], reference=cnn_export, progress=False)
    with pytest.raises(InvalidArgumentError, match=r"fitted scikit-learn estimator, or an \.onnx file"):
        onnx_nb.export(object(), progress=False)


# ----------------------------------------------------------------------------------------------------- scikit-learn
@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((80, 5)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(int) + (x[:, 2] > 1).astype(int)


def test_a_scaler_and_gradient_boosting_pipeline_gives_probabilities_as_a_tensor(data: tuple, tmp_path: Path) -> None:
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = data
    pipe = Pipeline([("scale", StandardScaler()), ("gbc", GradientBoostingClassifier(n_estimators=10, max_depth=2))])
    pipe.fit(x, y)
    result = onnx_nb.export(pipe, x[:4], out=tmp_path / "pipe.onnx", progress=False)
    assert result, result.check
    assert result.source.model_type == "Pipeline(StandardScaler > GradientBoostingClassifier)"
    assert [(o.name, o.dtype, o.shape) for o in result.outputs] == [("label", "int64", ["batch"]),
                                                                     ("probabilities", "float32", ["batch", 3])]
    assert "ZipMap" not in result.op_histogram and result.check["shapes"]["X"] == [5, 5]  # one row more
    report = onnx_nb.check_parity(result, sample={"X": x[:9]}, progress=False)
    assert report and report.reference == "scikit-learn Pipeline"
    assert any(r.output == "label" and r.max_abs == 0 for r in report.rows)
    # the same check with the estimator as the reference
    assert onnx_nb.check_parity(pipe, result.path, {"X": x[:6]}, progress=False)


def test_a_regressor_and_string_labels(data: tuple, tmp_path: Path) -> None:
    from sklearn.linear_model import LinearRegression, LogisticRegression

    x, y = data
    reg = onnx_nb.export(LinearRegression().fit(x, y.astype(float)), x, out=tmp_path / "reg.onnx", progress=False)
    assert reg and [o.shape for o in reg.outputs] == [["batch", 1]]
    names = np.array(["cat", "dog", "eel"])[y]
    clf = onnx_nb.export(LogisticRegression().fit(x, names), x, out=tmp_path / "clf.onnx", progress=False)
    assert clf, clf.check
    assert clf.outputs[0].dtype == "object", clf.outputs[0]  # ONNX strings
    assert onnx_nb.check_parity(clf, progress=False)


def test_an_estimator_skl2onnx_does_not_cover_and_an_unfitted_one(data: tuple, tmp_path: Path) -> None:
    from sklearn.base import BaseEstimator, TransformerMixin
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    class Doubler(BaseEstimator, TransformerMixin):
        def fit(self, x: object, y: object = None) -> Doubler:
            return self

        def transform(self, x: np.ndarray) -> np.ndarray:
            return x * 2

    x, y = data
    pipe = Pipeline([("double", Doubler()), ("lr", LogisticRegression())]).fit(x, y)
    with pytest.raises(UnsupportedOperatorError) as caught:
        onnx_nb.export(pipe, x, out=tmp_path / "p.onnx", progress=False)
    assert caught.value.operator == "Doubler" and caught.value.module_path == "double"
    with pytest.raises(InvalidArgumentError, match="not fitted"):
        onnx_nb.export(LogisticRegression(), x, out=tmp_path / "p.onnx", progress=False)
    with pytest.raises(SampleError, match="not numeric"):
        import pandas as pd

        frame = pd.DataFrame({"a": x[:, 0], "b": ["x"] * len(x), "c": x[:, 2], "d": x[:, 3], "e": x[:, 4]})
        onnx_nb.export(LogisticRegression().fit(x, y), frame, out=tmp_path / "p.onnx", progress=False)


# --------------------------------------------------------------------------------------- a file made elsewhere
@pytest.fixture(scope="module")
def downloaded(cnn_export: onnx_nb.ExportResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Keras CNN's file as another team would hand it over: the .onnx alone, plus inputs and outputs they
    saved."""
    import shutil

    folder = tmp_path_factory.mktemp("downloaded")
    shutil.copy(cnn_export.path, folder / "vendor.onnx")
    x = np.random.default_rng(5).random((2, 32, 32, 3), dtype=np.float32)
    out = np.asarray(cnn_export.source.model(x, training=False))
    np.savez(folder / "io.npz", image=x, logits=out)
    return folder / "vendor.onnx"


def test_export_adopts_a_file_in_place_and_checks_it_against_onnx_s_reference_evaluator(downloaded: Path) -> None:
    before = downloaded.stat().st_mtime_ns
    result = onnx_nb.export(downloaded, progress=False)
    assert result, result.check
    assert result.path == downloaded and result.exporter == "adopted" and result.source.kind == "onnx"
    assert downloaded.stat().st_mtime_ns == before and sorted(p.name for p in downloaded.parent.iterdir()) == \
        ["io.npz", "vendor.onnx"]
    assert result.check["against"] == "ONNX reference evaluator" and result.source.model_type.startswith("tf2onnx")
    assert result.op_histogram["Conv"] == 2
    report = onnx_nb.check_parity(downloaded, progress=False)  # the file alone
    assert report and report.reference == "ONNX reference evaluator on vendor.onnx"


def test_saved_outputs_are_the_reference_and_a_wrong_one_is_named(downloaded: Path, tmp_path: Path) -> None:
    result = onnx_nb.export(downloaded, sample=downloaded.parent / "io.npz", out=tmp_path / "copy.onnx",
                            progress=False)
    assert result and result.path == tmp_path / "copy.onnx" and result.check["against"].startswith("the outputs")
    with np.load(downloaded.parent / "io.npz") as data:
        wrong = {"image": data["image"], "logits": data["logits"] + 0.5}
    np.savez(tmp_path / "wrong.npz", **wrong)
    report = onnx_nb.check_parity(downloaded, against=tmp_path / "wrong.npz", progress=False)
    assert not report and report.rows[0].output == "logits" and report.rows[0].status == "fail"
    assert len(report.rows) == 1 and any("saved inputs only" in n for n in report.notes)
    pytest.importorskip("openvino")
    assert onnx_nb.check_parity(downloaded, against="openvino", progress=False)


def test_an_adopted_file_quantized_is_checked_against_the_file_as_it_came(downloaded: Path, tmp_path: Path) -> None:
    result = onnx_nb.export(downloaded, progress=False)
    variant = onnx_nb.quantize(result, method="auto", out=tmp_path / "vendor.int8.onnx")
    assert variant.recipe["method"] == "static"
    assert variant.parity and variant.parity.reference == "ONNX vendor.onnx"


def test_bad_files_and_references(downloaded: Path, tmp_path: Path) -> None:
    with pytest.raises(SampleError, match="missing inputs image"):
        onnx_nb.export(downloaded, sample={"pixels": np.zeros((1, 32, 32, 3), np.float32)}, progress=False)
    with pytest.raises(InvalidArgumentError, match="against="):
        onnx_nb.check_parity(downloaded, against="pytorch", progress=False)
    with pytest.raises(OnnxNbError):
        onnx_nb.export(tmp_path / "missing.onnx", progress=False)
    # a file ONNX Runtime fused (com.microsoft.FusedConv): not for ONNX's reference evaluator; OpenVINO reads it
    fused = onnx_nb.optimize(downloaded, level="extended", out=tmp_path / "fused.onnx")
    from onnx_nb.runtime.independent import evaluator_refusal
    from onnx_nb.runtime.onnxfile import load_proto

    assert "com.microsoft.FusedConv" in (evaluator_refusal(load_proto(fused.path)) or "")
    with pytest.raises(InvalidArgumentError, match="FusedConv"):
        onnx_nb.check_parity(fused.path, against="evaluator", progress=False)
    pytest.importorskip("openvino")
    report = onnx_nb.check_parity(fused.path, progress=False)
    assert report and report.reference.startswith("OpenVINO")


def test_the_whole_pipeline_takes_a_scikit_learn_model_and_an_adopted_file(data: tuple, downloaded: Path,
                                                                            tmp_path: Path) -> None:
    """No PyTorch model, so the latency step has no eager row (it used to be asked for one and fail)."""
    from sklearn.linear_model import LogisticRegression

    x, y = data
    for model, sample, out in ((LogisticRegression().fit(x, y), x[:8], tmp_path / "lr.onnx"), (downloaded, None, None)):
        report = onnx_nb.pipeline(model, sample, out=out, min_seconds=0.1, overwrite=True, progress=False)
        assert report, repr(report)


def test_an_adopted_decoder_file_is_checked_by_its_forward_not_by_generating(tmp_path: Path) -> None:
    """A decoder file with its cache made elsewhere (here: onnx-nb's own gpt2 export, adopted as a bare file) has no
    PyTorch model to generate with: check_parity judges it against an independent runner like any adopted file,
    instead of reaching for a PyTorch reference it does not have."""
    from tests import tiny_models

    folder = tiny_models.save("gpt2", tmp_path / "gpt2")
    onnx_nb.export(str(folder), out=tmp_path / "decoder.onnx", progress=False)
    adopted = onnx_nb.export(str(tmp_path / "decoder.onnx"), progress=False)
    report = onnx_nb.check_parity(adopted, progress=False)
    assert report, report.failures
    assert not report.generation and report.rows
