"""scikit-learn estimators and pipelines to ONNX with skl2onnx (see :mod:`.foreign`).

Classifiers are converted without ZipMap: ``label`` (the predicted class, [N]) and ``probabilities`` (float32
[N, classes], the tensor a runtime wants, not a list of dicts); regressors and transformers give ``variable``. The
input is ``X``, float32 [batch, features]. The check runs the file on rows drawn from the sample against the
estimator's own ``predict``, ``predict_proba`` or ``transform`` on the same float32 rows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, SampleError, UnsupportedOperatorError, first_line
from ...results.export import ModelSource
from ...runtime.shapes import other_sizes
from .converting import convert_checked

ML_OPSET = 3  # ai.onnx.ml 3: TreeEnsembleClassifier/Regressor, which ONNX Runtime and the reference evaluator run
_CLASS = re.compile(r"for type '<class '(?P<cls>[^']+)'>'|for type '(?P<alt>[^'<>]+)'")


def estimators(model: Any, path: str = "") -> list[tuple[str, Any]]:
    """``(step path, estimator)`` for ``model`` and everything inside it (pipeline steps, column transformers,
    feature unions, meta-estimators' ``estimator``)."""
    found = [(path or type(model).__name__, model)]
    inner: list[tuple[str, Any]] = list(getattr(model, "steps", None) or [])
    inner += list(getattr(model, "transformer_list", None) or [])
    inner += [(t[0], t[1]) for t in getattr(model, "transformers_", None) or getattr(model, "transformers", None) or []
              if len(t) >= 2]
    for key in ("estimator", "base_estimator", "final_estimator"):
        if hasattr(model, key) and getattr(model, key) is not None and not isinstance(getattr(model, key), str):
            inner.append((key, getattr(model, key)))
    for name, est in inner:
        if hasattr(est, "get_params"):
            found += estimators(est, f"{path}/{name}" if path else name)
    return found


def describe(model: Any) -> str:
    """``Pipeline(StandardScaler > GradientBoostingClassifier)``."""
    steps = getattr(model, "steps", None)
    if steps:
        return f"{type(model).__name__}({' > '.join(describe(s) for _, s in steps)})"
    return type(model).__name__


def features(model: Any, sample: Any, warnings_seen: list[str]) -> np.ndarray:
    """The sample as float32 rows; made from noise (with a warning) when none is given."""
    if sample is None:
        n = getattr(model, "n_features_in_", None)
        if n is None:
            raise SampleError(f"{type(model).__name__} does not say how many features it takes: pass sample=X "
                              "(a few rows of the data it was fitted on).")
        warnings_seen.append(f"No sample given: {n} features drawn from a normal distribution. Pass sample=X (rows "
                             "of the data the model was fitted on) so the check sees values the model was made for.")
        return np.random.default_rng(0).standard_normal((4, int(n))).astype(np.float32)
    if hasattr(sample, "dtypes") and hasattr(sample, "to_numpy"):  # a pandas DataFrame
        numeric = [c for c, t in sample.dtypes.items() if getattr(t, "kind", "O") in "biuf"]
        if len(numeric) != sample.shape[1]:
            others = [str(c) for c in sample.columns if c not in numeric]
            raise SampleError(f"Columns {', '.join(others[:5])} are not numeric: onnx-nb exports scikit-learn models "
                              "with one float input X. Encode them before the model, or convert with skl2onnx "
                              "yourself and export the .onnx file.")
        sample = sample.to_numpy()
    try:
        x = np.asarray(sample, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise SampleError(f"sample must be numeric rows (an array or DataFrame of features): {first_line(exc)}") \
            from exc
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise SampleError(f"sample has shape {list(x.shape)}: give rows of features, [rows, features].")
    return x


def _unsupported(exc: Exception, model: Any) -> UnsupportedOperatorError | None:
    text = str(exc)
    match = _CLASS.search(text)
    if type(exc).__name__ not in ("MissingShapeCalculator", "MissingConverter") and match is None:
        return None
    cls = (match["cls"] or match["alt"]).rsplit(".", 1)[-1] if match else "?"
    where = next((path for path, est in estimators(model) if type(est).__name__ == cls), None)
    return UnsupportedOperatorError(
        f"skl2onnx has no converter for {cls}" + (f" (step '{where}')" if where else "") + ". Replace it with an "
        "estimator skl2onnx converts (https://onnx.ai/sklearn-onnx/supported.html), or register a converter for it "
        "with skl2onnx.update_registered_converter.", operator=cls, module_path=where)


def export_sklearn(model: Any, sample: Any, out: Any, overwrite: bool, progress: bool, opset: int | None,
                   name: str | None, dynamic: bool) -> Any:
    """A fitted scikit-learn estimator or pipeline, exported (see the module)."""
    from sklearn.base import is_classifier
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    from ...progress import Steps
    from ...runtime.files import check_target, default_output

    try:
        check_is_fitted(model)
    except NotFittedError as exc:
        raise InvalidArgumentError(f"{type(model).__name__} is not fitted: call .fit(X, y) before exporting it.") \
            from exc
    label = name or type(model).__name__
    target = check_target(out if out is not None else default_output(label, taken_ok=overwrite), overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    warnings_seen: list[str] = []
    x = features(model, sample, warnings_seen)
    options = {id(est): {"zipmap": False} for _, est in estimators(model) if is_classifier(est)}
    axes = {"X": {0: "batch"}} if dynamic else {}
    feed = {"X": x}
    source = ModelSource("sklearn", label, model_type=describe(model), model=model, sample=feed, input_axes=axes,
                         as_kwargs=False, adapter="sklearn", eager=False)

    def convert(_: str, staged: Path) -> None:
        import onnx
        from skl2onnx import to_onnx

        try:
            proto = to_onnx(model, x[:1], options=options or None,
                            target_opset={"": opset or 18, "ai.onnx.ml": ML_OPSET})
        except Exception as exc:
            refusal = _unsupported(exc, model)
            if refusal is not None:
                raise refusal from exc
            raise
        onnx.save(proto, str(staged))

    rng = np.random.default_rng(1)
    rows = other_sizes({"batch": len(x)})["batch"] if dynamic else len(x)
    probe = {"X": x[rng.choice(len(x), rows, replace=dynamic)]}
    with Steps(4, "export", progress) as steps:
        steps.step("reading the estimator")
        return convert_checked("sklearn", target, ["skl2onnx"], convert, axes, probe,
                               lambda f, names: native_outputs(model, f["X"], names), source, "scikit-learn",
                               steps, warnings_seen, [], dynamic)


def native_outputs(model: Any, x: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """What the estimator computes for the ONNX outputs ``names``: ``label`` (predict), ``probabilities``
    (predict_proba, else decision_function), ``variable`` (predict, else transform), as float32 where floating."""
    out: dict[str, np.ndarray] = {}
    for name in names:
        if name == "label":
            value = model.predict(x)
        elif name == "probabilities":
            value = model.predict_proba(x) if hasattr(model, "predict_proba") else model.decision_function(x)
        elif hasattr(model, "predict"):
            value = model.predict(x)
        else:
            value = model.transform(x)
        value = np.asarray(value.toarray() if hasattr(value, "toarray") else value)
        if name == "variable" and value.ndim == 1:
            value = value.reshape(-1, 1)
        out[name] = value.astype(np.float32) if value.dtype.kind == "f" else value
    return out
