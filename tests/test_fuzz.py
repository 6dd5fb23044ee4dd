"""Bounded fuzzing: mutated model bytes and random argument values into the loading, inspection and
parity entry points. Whatever comes in, the only exceptions that come out are onnx-nb's own.

Hypothesis runs a fixed number of derandomized examples, so the suite stays reproducible and quick.
ONNX Runtime sessions are opened in the isolated worker: a mutated graph that crashed the runtime
would surface as RuntimeCrashError (an onnx-nb error) instead of killing the test process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import onnx_nb

FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.GELU(), torch.nn.LayerNorm(6)).eval()
    result = onnx_nb.export(model, torch.randn(2, 4), out=tmp_path_factory.mktemp("fuzz") / "good.onnx",
                            progress=False)
    return result.path, result.path.read_bytes()


def mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None, junk: bytes) -> bytes:
    buf = bytearray(data)
    for where, value in edits:
        buf[where % len(buf)] = value
    if cut is not None:
        buf = buf[: cut % (len(buf) + 1)]
    return bytes(buf) + junk


MUTATIONS = st.tuples(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=12),
                      st.one_of(st.none(), st.integers(0, 10**6)), st.binary(max_size=16))


def only_ours(call: Any) -> Any:
    try:
        return call()
    except onnx_nb.OnnxNbError as exc:
        return exc


@FUZZ
@given(mutation=MUTATIONS)
def test_mutated_bytes_load_and_inspect(good: tuple[Path, bytes], tmp_path_factory: pytest.TempPathFactory,
                                        mutation: tuple[Any, Any, bytes]) -> None:
    path = tmp_path_factory.mktemp("m") / "model.onnx"
    path.write_bytes(mutate(good[1], *mutation))
    from onnx_nb.frontends.graphdata import graph_json

    loaded = only_ours(lambda: onnx_nb.check_model(path))
    shown = only_ours(lambda: graph_json(path))
    checked = only_ours(lambda: onnx_nb.check_parity(path, path, {"input": np.ones((2, 4), np.float32)},
                                                     isolate=True, localize=False, progress=False))
    # a damaged file is told as a damaged file (or a runtime that crashed on it), never as the user's mistake
    damaged = (onnx_nb.InvalidModelError, onnx_nb.RuntimeCrashError, onnx_nb.ModelNotFoundError, onnx_nb.SampleError)
    for result in (loaded, shown, checked):
        assert not isinstance(result, onnx_nb.OnnxNbError) or isinstance(result, damaged), repr(result)
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.onnx"], "nothing written beside the model"


def test_names_that_are_not_utf8_are_told_as_damage(good: tuple[Path, bytes], tmp_path: Path) -> None:
    """Found by the fuzz test above on another machine (the bytes it mutates depend on paths in the file): a
    dimension name that is not UTF-8 reached the graph view as bytes and raised a TypeError."""
    from onnx_nb.frontends.graphdata import graph_json

    data = good[1]
    assert b"\x05batch" in data  # the input's dynamic axis name, length-prefixed
    path = tmp_path / "model.onnx"
    path.write_bytes(data.replace(b"\x05batch", b"\x05\xffatch", 1))
    with pytest.raises(onnx_nb.InvalidModelError, match="not UTF-8"):
        graph_json(path)


ARGS = st.fixed_dictionaries({
    "providers": st.one_of(st.sampled_from(["cpu", "CPU", "cuda", "trt", "available", "tpu", "", "cpu,,cpu"]),
                           st.lists(st.one_of(st.text(max_size=8), st.integers()), max_size=3)),
    "atol": st.one_of(st.none(), st.floats(allow_nan=True), st.integers(-5, 5), st.text(max_size=3)),
    "rtol": st.one_of(st.none(), st.floats(min_value=0, max_value=1)),
    "shapes": st.one_of(st.sampled_from(["auto", "sample", "nonsense", ""]),
                        st.lists(st.dictionaries(st.sampled_from(["batch", "sequence", "x"]), st.integers(-2, 5),
                                                 max_size=2), max_size=2)),
    "sample": st.one_of(st.none(), st.just({"input": np.ones((2, 4), np.float32)}),
                        st.dictionaries(st.text(max_size=5), st.just(np.zeros((1, 4), np.float32)), max_size=2),
                        st.integers(), st.text(max_size=4)),
})


@FUZZ
@given(args=ARGS)
def test_random_arguments_to_parity(good: tuple[Path, bytes], args: dict[str, Any]) -> None:
    path = good[0]
    sample = args.pop("sample")
    result = only_ours(lambda: onnx_nb.check_parity(path, path, sample, localize=False, progress=False, **args))
    # bad arguments are told as such (what was wrong and what to do), never as a model or runtime failure
    assert isinstance(result, (onnx_nb.ParityReport, onnx_nb.InvalidArgumentError, onnx_nb.SampleError)), \
        repr(result)
    if isinstance(result, onnx_nb.OnnxNbError):
        assert len(str(result)) > 20, repr(result)
    assert sorted(p.name for p in path.parent.iterdir()) == ["good.onnx"], "a check never writes beside the model"
