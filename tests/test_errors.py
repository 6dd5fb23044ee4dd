"""Bad input to export: a clear OnnxNbError subclass naming the problem and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import onnx_nb


class Block(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.searchsorted(torch.tensor([-1.0, 0.0, 1.0]), x)  # no translation in either exporter


class WithBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.blocks = torch.nn.ModuleList([torch.nn.Identity(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks[1](self.blocks[0](self.proj(x)))


def test_missing_sample_for_bare_module() -> None:
    with pytest.raises(onnx_nb.SampleError, match=r"pass a sample, e\.g\. export\(model, torch\.randn"):
        onnx_nb.export(torch.nn.Linear(2, 2), progress=False)


def test_sample_the_model_rejects() -> None:
    with pytest.raises(onnx_nb.SampleError, match="fails on the sample inputs"):
        onnx_nb.export(torch.nn.Linear(2, 2), torch.randn(3, 5), progress=False)


def test_sample_not_a_tensor_and_too_many() -> None:
    with pytest.raises(onnx_nb.SampleError, match="is a str, not a tensor"):
        onnx_nb.export(torch.nn.Linear(2, 2), "hello", progress=False)
    with pytest.raises(onnx_nb.SampleError, match="takes 1"):
        onnx_nb.export(torch.nn.Linear(2, 2), (torch.randn(1, 2), torch.randn(1, 2)), progress=False)


def test_unknown_path(tmp_path: Path) -> None:
    with pytest.raises(onnx_nb.ModelNotFoundError, match="No such folder"):
        onnx_nb.export(str(tmp_path / "nope"), progress=False)


def test_folder_without_model(tmp_path: Path) -> None:
    with pytest.raises(onnx_nb.ModelNotFoundError, match=r"has no config\.json"):
        onnx_nb.export(str(tmp_path), progress=False)


def test_hub_id_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    with pytest.raises(onnx_nb.HubUnavailableError, match="local folder"):
        onnx_nb.export("some-org/some-model", out=tmp_path / "x.onnx", progress=False)
    assert not (tmp_path / "x.onnx").exists()


def test_unsupported_operator_names_op_and_module(tmp_path: Path) -> None:
    with pytest.raises(onnx_nb.UnsupportedOperatorError) as info:
        onnx_nb.export(WithBlock(), torch.randn(2, 4), out=tmp_path / "u.onnx", progress=False)
    err = info.value
    assert err.operator == "aten::searchsorted"
    assert err.module_path == "blocks.1"
    assert set(err.attempts) == {"dynamo", "torchscript"}
    assert "aten::searchsorted" in str(err) and "'blocks.1'" in str(err)
    assert list(tmp_path.iterdir()) == [], "no partial or temp files"


def test_unsupported_operator_is_not_retried_at_fixed_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixing the non-batch axes cannot give an operator a translation: each exporter runs once, not twice."""
    from onnx_nb.steps.export.machinery import torch_route

    calls: list[str] = []
    real = torch_route.run_exporter
    monkeypatch.setattr(torch_route, "run_exporter", lambda name, *a, **k: (calls.append(name), real(name, *a, **k))[1])
    with pytest.raises(onnx_nb.UnsupportedOperatorError):
        onnx_nb.export(WithBlock(), torch.randn(2, 5, 4), out=tmp_path / "u.onnx", progress=False)  # axis 1 dynamic
    assert calls == ["dynamo", "torchscript"]


def test_bad_arguments() -> None:
    with pytest.raises(onnx_nb.InvalidArgumentError, match="exporter='onnxscript'"):
        onnx_nb.export(torch.nn.Linear(2, 2), torch.randn(1, 2), exporter="onnxscript")
    with pytest.raises(onnx_nb.InvalidArgumentError, match="opset"):
        onnx_nb.export(torch.nn.Linear(2, 2), torch.randn(1, 2), opset=99)
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"Pass a torch\.nn\.Module"):
        onnx_nb.export(42)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="Unknown task"):
        import tiny_models

        onnx_nb.export(tiny_models.build("bert"), task="translate-klingon", progress=False)
    with pytest.raises(onnx_nb.SampleError, match="names axis 3"):
        onnx_nb.export(torch.nn.Linear(2, 2), torch.randn(1, 2), dynamic={"input": {3: "x"}}, progress=False)


def test_output_is_a_folder(tmp_path: Path) -> None:
    with pytest.raises(onnx_nb.OutputExistsError, match="is a folder"):
        onnx_nb.export(torch.nn.Linear(2, 2), torch.randn(1, 2), out=tmp_path, progress=False)


def test_every_error_class_lives_in_errors_and_is_exported() -> None:
    """Error classes defined next to the code that raises them were missing from onnx_nb's namespace."""
    import ast
    import inspect

    import onnx_nb.errors as errors

    package = Path(onnx_nb.__file__).parent
    defined_elsewhere = [f"{path.relative_to(package)}:{node.name}" for path in package.rglob("*.py")
                         if path.name != "errors.py"
                         for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)
                         and any(getattr(b, "id", getattr(b, "attr", "")).endswith(("Error", "Exceeded", "Mismatch"))
                                 for b in node.bases)]
    assert defined_elsewhere == []
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, errors.OnnxNbError) and c.__module__ == errors.__name__]
    assert len(classes) >= 20
    assert [c.__name__ for c in classes if getattr(onnx_nb, c.__name__, None) is not c] == []


def test_first_line_of_any_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    """One helper for "the first line of an error"; the inline copies raised IndexError on an empty message."""
    from onnx_nb.errors import first_line, telling_lines
    from onnx_nb.kinds.hf.loading import hub_error

    assert first_line(OSError()) == "OSError"
    assert first_line(ValueError("\n  \nthe cause\nmore")) == "the cause"
    assert first_line(ValueError("x" * 500), 10) == "x" * 10
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert str(hub_error("x", OSError())) == "Could not load 'x': OSError"  # was an IndexError
    assert telling_lines(RuntimeError("Exception from core.cpp:84:\nCheck 'false' failed\n"
                                      "-- No conversion rule found for operations: com.microsoft.Foo")) == (
        "Exception from core.cpp:84: … -- No conversion rule found for operations: com.microsoft.Foo")


def test_generate_refuses_a_file_whose_sequence_length_is_fixed(tmp_path: Path) -> None:
    """A whole-sequence decoder whose trace fixed the prompt length (its forward decides from the length) is refused
    by name and length, not left to ONNX Runtime's "invalid dimensions"."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((10, 10)).astype(np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["logits"])], "fixed",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", 5])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 5, 10])], [table])
    path = tmp_path / "fixed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    from onnx_nb.steps.generate.whole_sequence import WholeSequenceDecoder

    with pytest.raises(onnx_nb.InvalidArgumentError, match="takes exactly 5 tokens"):
        WholeSequenceDecoder(path)
