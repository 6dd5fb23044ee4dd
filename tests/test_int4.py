"""INT4 weight-only: the algorithm (round-to-nearest, k-quant, HQQ, GPTQ, AWQ) and the layers kept at 8 bits chosen by
measured error on the model in front of it, each candidate re-validated against the fp32 parent."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import onnx
import pytest
import torch

import onnx_nb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import registry_sweep


@pytest.fixture(scope="module")
def decoder(tmp_path_factory: pytest.TempPathFactory) -> onnx_nb.ExportResult:
    import transformers

    config = registry_sweep.tiny_config("qwen2")  # width 64: every algorithm's blocks of 32 fit
    config.vocab_size = 2048  # Qwen2's own 151,936 made the LM head 85% of the weights and of every algorithm's time
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config).eval()
    return onnx_nb.export(model, out=tmp_path_factory.mktemp("int4") / "q.onnx", progress=False)


def test_auto_keeps_the_most_accurate_algorithm(decoder: onnx_nb.ExportResult, tmp_path: Path) -> None:
    variant = onnx_nb.quantize(decoder, method="int4", mixed_precision=None, out=tmp_path / "auto.onnx")
    assert variant, repr(variant.parity)
    errors = variant.recipe["int4_errors"]
    assert sorted(errors) == ["awq", "gptq", "hqq", "k_quant", "rtn", "rtn_asym"], variant.recipe["int4_algorithm_rule"]
    assert variant.recipe["int4_algorithm"] == min(errors, key=errors.get)
    assert f": {variant.recipe['int4_algorithm']} kept" in variant.recipe["int4_algorithm_rule"]
    packed: dict[str, list[bytes]] = {}
    # alone: the error auto measured for it (same inputs, seed), at the compute level it measured the algorithms at
    for name in ("hqq", "awq", "rtn_asym", "gptq"):
        alone = onnx_nb.quantize(decoder, method="int4", algorithm=name, lm_head_bits=4, mixed_precision=None,
                                 accuracy_level=4, out=tmp_path / f"{name}.onnx")
        assert alone and alone.recipe["int4_algorithm_rule"] == f"given (algorithm={name!r})"
        worst = max(float(r.max_abs) for r in alone.parity.rows if r.max_abs is not None)
        assert worst == pytest.approx(errors[name], rel=1e-3), (name, worst, errors)
        graph = onnx.load(str(alone.path), load_external_data=False).graph
        nbits = [n for n in graph.node if n.op_type == "MatMulNBits"]
        assert nbits, name
        blocks = {i.name: i for i in onnx.load(str(alone.path)).graph.initializer}
        packed[name] = sorted(onnx.numpy_helper.to_array(blocks[n.input[1]]).tobytes() for n in nbits)
        # symmetric blocks (round-to-nearest, AWQ's) carry no zero points; k-quant's, HQQ's and GPTQ's do
        symmetric = name in ("rtn", "awq")
        assert all((len(n.input) > 3 and n.input[3] != "") != symmetric for n in nbits), name
        assert alone.recipe["symmetric"] == symmetric
        # AWQ: the input of each layer it scaled divided by its channel scales just before it
        scaled = [n for n in graph.node if n.op_type == "Mul" and n.name.endswith("_awq_scale")]
        assert bool(scaled) == (name == "awq") and len(scaled) <= len(nbits), name
        # the alpha searched per layer is in the recipe, one per layer scaled (0: left as it was)
        alphas = alone.recipe.get("awq_alpha", {})
        assert (name == "awq") == bool(alphas) and len([a for a in alphas.values() if a > 0]) == len(scaled), name
        assert all(0.0 <= a <= 1.0 for a in alphas.values())
    # GPTQ moves blocks away from plain rounding on the same grid (ONNX Runtime's own updates read zeros: int4_gptq)
    assert packed["gptq"] != packed["rtn_asym"]


def test_algorithm_is_checked_before_any_work(decoder: onnx_nb.ExportResult, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"algorithm='gptq2': choose 'auto' or one of 'rtn'"):
        onnx_nb.quantize(decoder, method="int4", algorithm="gptq2")
    from onnx_nb.runtime import onnxfile

    # a file over one protobuf message (2 GB; here the limit lowered to this file's size): GPTQ refused up front
    monkeypatch.setattr(onnxfile, "EXTERNAL_DATA_BYTES", 1024)
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"GPTQ holds the whole model in one protobuf.*'hqq'"):
        onnx_nb.quantize(decoder, method="int4", algorithm="gptq", out=tmp_path / "big.onnx")
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"algorithm='awq' .*AWQ runs the whole model"):
        onnx_nb.quantize(decoder, method="int4", algorithm="awq", out=tmp_path / "big.onnx")
    assert not list(tmp_path.iterdir())
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"algorithm='hqq' is for method='int4'"):
        onnx_nb.quantize(decoder, method="dynamic", algorithm="hqq")


def test_lm_head_bits(decoder: onnx_nb.ExportResult, tmp_path: Path) -> None:
    """A decoder's LM head at 8 bits (onnxruntime-genai's mixed precision; an INT4 LM head made Phi-4-mini repeat
    itself, onnxruntime#24384): given, the head's MatMulNBits has 8 bits and the rest 4; "auto" makes both and says
    which it kept and why."""
    def bits(variant: onnx_nb.Variant) -> list[int]:
        graph = onnx.load(str(variant.path), load_external_data=False).graph
        return [next(a.i for a in n.attribute if a.name == "bits") for n in graph.node if n.op_type == "MatMulNBits"]

    eight = onnx_nb.quantize(decoder, method="int4", algorithm="rtn", lm_head_bits=8, mixed_precision=None,
                             out=tmp_path / "8.onnx")
    assert eight and bits(eight)[-1] == 8 and set(bits(eight)[:-1]) == {4}
    auto = onnx_nb.quantize(decoder, method="int4", algorithm="rtn", mixed_precision=None, out=tmp_path / "auto.onnx")
    assert auto.recipe["lm_head_bits"] in (4, 8) and bits(auto)[-1] == auto.recipe["lm_head_bits"]
    assert auto.recipe["lm_head_rule"].startswith("auto: LM head at 4 bits largest error")
    with pytest.raises(onnx_nb.InvalidArgumentError, match="lm_head_bits=3"):
        onnx_nb.quantize(decoder, method="int4", lm_head_bits=3)


def test_accuracy_level_is_measured_for_decoders(decoder: onnx_nb.ExportResult, tmp_path: Path) -> None:
    """accuracy_level='auto' on a decoder: level 4 (INT8 compute) made beside fp32 compute, level 4 kept unless it
    fails where fp32 compute passes (onnxruntime#29849); a given level is used as given."""
    auto = onnx_nb.quantize(decoder, method="int4", algorithm="rtn", lm_head_bits=4, mixed_precision=None,
                            out=tmp_path / "a.onnx")
    rule = auto.recipe["accuracy_level_rule"]
    assert rule.startswith("auto: level 4 (INT8 compute) largest error") and "fp32 compute" in rule
    graph = onnx.load(str(auto.path), load_external_data=False).graph
    levels = {next((a.i for a in n.attribute if a.name == "accuracy_level"), 0) for n in graph.node
              if n.op_type == "MatMulNBits"}
    assert levels == ({4} if auto.recipe["accuracy_level"] == 4 else {0}), (levels, rule)
    given = onnx_nb.quantize(decoder, method="int4", algorithm="rtn", lm_head_bits=4, accuracy_level=None,
                             mixed_precision=None, out=tmp_path / "g.onnx")
    assert "accuracy_level_rule" not in given.recipe and given.recipe["accuracy_level"] is None


def _head(result: onnx_nb.ExportResult) -> str:
    from onnx_nb.steps.variants.ort_quantizer import lm_head

    name = lm_head(onnx.load(str(result.path), load_external_data=False))
    assert name
    return name


def _bits(variant: onnx_nb.Variant) -> dict[str, int]:
    graph = onnx.load(str(variant.path), load_external_data=False).graph
    return {n.name.rsplit("_Q", 1)[0]: next(a.i for a in n.attribute if a.name == "bits") for n in graph.node
            if n.op_type == "MatMulNBits"}


def test_mixed_precision_keeps_the_layers_measured_most_sensitive_at_8_bits(decoder: onnx_nb.ExportResult,
                                                                           tmp_path: Path) -> None:
    """Each layer measured alone at 4 and 8 bits; layers promoted most error lost per byte first; the file kept is
    within the size budget, its largest error no more than the all-INT4 file's, and the bits in the file are the
    recipe's."""
    four = onnx_nb.quantize(decoder, method="int4", algorithm="rtn", lm_head_bits=4, mixed_precision=None,
                            out=tmp_path / "four.onnx")
    mixed = onnx_nb.quantize(decoder, method="int4", algorithm="rtn", lm_head_bits=4, out=tmp_path / "mixed.onnx")
    assert four and mixed, repr(mixed.parity)
    info = mixed.recipe["mixed_precision"]
    assert info["all_int4_error"] == pytest.approx(max(float(r.max_abs) for r in four.parity.rows
                                                       if r.max_abs is not None), rel=1e-3)
    rows = mixed.layers
    assert len(rows) == len(_bits(four)) and all(r["sqnr_8bit_db"] > r["sqnr_4bit_db"] for r in rows), rows
    gains = [r["gain_per_weight"] for r in rows]
    assert gains == sorted(gains, reverse=True)
    eight = set(mixed.recipe.get("eight_bit_layers") or [])
    bits = _bits(mixed)
    assert {name for name, b in bits.items() if b == 8} == eight == {r["node"] for r in rows if r["bits"] == 8}
    assert set(_bits(four).values()) == {4}
    head = _head(decoder)
    assert head in bits and bits[head] == 4  # lm_head_bits=4 given: the head is not a candidate
    if eight:  # promoted in rank order, within the budget, no worse than all-INT4
        ranked = [r["bits"] for r in rows if r["node"] != head]
        assert ranked == sorted(ranked, reverse=True)
        assert mixed.size_after <= 1.15 * four.size_after and info["size_vs_all_int4"] <= 1.15
        worst = max(float(r.max_abs) for r in mixed.parity.rows if r.max_abs is not None)
        assert worst < info["all_int4_error"], info
    assert info["rule"].startswith("measured: each layer's error at 4 and 8 bits alone") and info["tried"]
    eights = sum(r["bits"] == 8 for r in rows)
    assert f"{len(rows) - eights} at 4 bits, {eights} at 8" in repr(mixed) and "bits per layer" in mixed._repr_html_()
    figure = mixed.bits_figure()
    assert [t.name for t in figure.data] == ["at 4 bits", "at 8 bits"] and len(figure.data[0].y) == len(rows)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="no per-layer precision measurement"):
        four.bits_figure()


def test_mixed_precision_budgets(decoder: onnx_nb.ExportResult, tmp_path: Path) -> None:
    """A size budget that holds every layer at 8 bits and an error budget no file meets: the most accurate
    candidate is kept, GPTQ keeps its hands off the layers set at 8 bits, and the head given 4 bits keeps them."""
    wide = onnx_nb.quantize(decoder, method="int4", algorithm="gptq", lm_head_bits=4,
                            mixed_precision={"size": 3.0, "error": 1e-9}, out=tmp_path / "wide.onnx")
    tried = wide.recipe["mixed_precision"]["tried"]
    bits = _bits(wide)
    eight = set(wide.recipe.get("eight_bit_layers") or [])
    assert eight and {name for name, b in bits.items() if b == 8} == eight, (bits, tried)
    # 3x the all-INT4 size holds every layer and no file meets the error budget: the most accurate tried is kept,
    # every layer at 8 bits but the head, which lm_head_bits=4 holds at 4
    head = _head(decoder)
    assert eight == set(bits) - {head} and bits[head] == 4, (bits, tried)
    assert tried.endswith(f"{len(eight)} at 8 bits: {tried.rsplit(': ', 1)[1]}"), tried
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"mixed_precision='most': choose 'auto'"):
        onnx_nb.quantize(decoder, method="int4", mixed_precision="most")
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"mixed_precision=1.3 is for method='int4'"):
        onnx_nb.quantize(decoder, method="dynamic", mixed_precision=1.3)


def test_gptq_pushes_each_rounding_error_onto_the_rows_after() -> None:
    """GPTQ's updates (onnx_nb.steps.variants.int4_gptq, run in place of ONNX Runtime's, whose updates read zeros):
    on correlated inputs the layer's output error is well below round-to-nearest's on the same grid (what the
    Hessian left out, H = I, gives), and ONNX Runtime's GPTQ path writes it (its blocks differ from rtn_asym's)."""
    import numpy as np

    from onnx_nb.steps.variants.int4_gptq import gptq

    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32)).astype(np.float32) * 0.02  # [in, out], as ONNX Runtime holds it
    x = rng.standard_normal((256, 64)) @ rng.standard_normal((64, 64))
    settings = {"num_bits": 4, "group_size": 32, "scheme": "asym", "blocksize": 16, "percdamp": 0.01}
    with_h = np.abs(x @ (gptq(w, x.T @ x, **settings) - w)).mean()
    rounded = np.abs(x @ (gptq(w, np.eye(64), **settings) - w)).mean()
    assert with_h < 0.8 * rounded, (with_h, rounded)
    for scheme, actorder in (("sym", False), ("asym", True)):
        q = gptq(w, x.T @ x, **{**settings, "scheme": scheme}, actorder=actorder)
        assert q.shape == w.shape and np.abs(x @ (q - w)).mean() < rounded


def test_gptq_blocks_are_written_on_gptq_grid() -> None:
    """ONNX Runtime's GPTQ writer derives each block's grid again from the updated weights (``quant_tensor``), which
    rounds some of them a second time; inside ``corrected()`` the file's blocks dequantize to GPTQ's own weights."""
    import numpy as np
    from onnxruntime.quantization.neural_compressor import weight_only

    from onnx_nb.steps.variants.int4_gptq import corrected

    rng = np.random.default_rng(1)
    w = rng.standard_normal((80, 24)).astype(np.float32) * 0.02  # 80 rows: the last block of 32 is padded
    x = rng.standard_normal((256, 80)) @ rng.standard_normal((80, 80))

    def gptq(scheme: str) -> np.ndarray:
        return weight_only.gptq(w, x.T @ x, num_bits=4, group_size=32, scheme=scheme, blocksize=16, percdamp=0.01)

    def written(q: np.ndarray, scheme: str) -> np.ndarray:  # the file's blocks, dequantized, back to [in, out]
        ints, scale, zp = weight_only.quant_tensor(weight_only.pad_tensor(q, 32, 3).T, 4, 32, scheme, "uint")
        return ((ints - (zp if scheme == "asym" else 8)) * scale.astype(np.float32)).reshape(24, 96)[:, :80].T

    for scheme in ("asym", "sym"):
        with corrected():
            q = gptq(scheme)
            assert np.abs(written(q, scheme) - q).max() < 1e-6 * np.abs(q).max(), scheme
        with corrected():  # GPTQ's updates through ONNX Runtime's own writer: some weights move to another grid
            q = gptq(scheme)
        assert np.abs(written(q, scheme) - q).max() > 1e-3 * np.abs(q).max(), scheme


def test_gptq_calibration_runs_the_model_once_per_group_of_inputs(decoder: onnx_nb.ExportResult, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX Runtime's GPTQ runs the whole model once per MatMul input and calibration item (a tiny CvT: over ten
    minutes); onnx-nb's session answers from runs that compute a group of those inputs at once. The blocks are the
    same bytes as one run per input (a group of one, as ONNX Runtime runs them), from fewer runs."""
    from onnx_nb.steps.variants import int4_gptq

    made: list[int4_gptq.GroupedSession] = []

    class Counted(int4_gptq.GroupedSession):
        def __init__(self, *args: object) -> None:
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(int4_gptq, "GroupedSession", Counted)
    packed, runs = {}, {}
    for group_bytes in (1, int4_gptq.GROUP_BYTES):
        monkeypatch.setattr(int4_gptq, "GROUP_BYTES", group_bytes)
        made.clear()
        variant = onnx_nb.quantize(decoder, method="int4", algorithm="gptq", mixed_precision=None, validate=False,
                                   out=tmp_path / f"g{group_bytes}.onnx")
        runs[group_bytes] = sum(s.runs for s in made)
        graph = onnx.load(str(variant.path)).graph
        blocks = {i.name: i for i in graph.initializer}
        packed[group_bytes] = sorted(onnx.numpy_helper.to_array(blocks[n.input[1]]).tobytes()
                                     for n in graph.node if n.op_type == "MatMulNBits")
    assert packed[1] == packed[int4_gptq.GROUP_BYTES]
    assert runs[int4_gptq.GROUP_BYTES] * 4 <= runs[1], runs


@pytest.fixture(scope="module")
def external(decoder: onnx_nb.ExportResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The decoder's file saved again with its weights in a data file beside it, as a file over 2 GB is."""
    source = tmp_path_factory.mktemp("external") / "q.onnx"
    onnx.save(onnx.load(str(decoder.path)), str(source), save_as_external_data=True, location="q.onnx.data",
              size_threshold=1024)
    return source


def test_optimize_keeps_a_data_file_with_its_graph(external: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """optimize() of a file whose weights live in a data file: the level it keeps (timed against the other) is moved
    into place with its data, renamed for the file it became (it referred to the scratch file's data before)."""
    variant = onnx_nb.optimize(external, out=tmp_path / "opt.onnx", validate=False)
    locations = {e.value for t in onnx.load(str(variant.path), load_external_data=False).graph.initializer
                 for e in t.external_data if e.key == "location"}
    assert locations == {"opt.onnx.data"} and sorted(p.name for p in tmp_path.iterdir()) == ["opt.onnx",
                                                                                             "opt.onnx.data"]
    assert onnx_nb.check_parity(external, variant, progress=False)
    from onnx_nb.runtime import onnxfile

    # over 2 GB (the limit lowered here): the two levels' files timed one at a time, never two sessions of it at once
    monkeypatch.setattr(onnxfile, "EXTERNAL_DATA_BYTES", 1024)
    big = onnx_nb.optimize(external, out=tmp_path / "big" / "opt.onnx", validate=False)
    assert "each timed in a session of its own" in big.recipe["level_rule"] and set(big.recipe["levels_ms"]) == {
        "extended", "basic"}


def test_big_files_are_quantized_with_their_weights_left_on_disk(external: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A file over 2 GB (here the limit lowered to this file's size) is quantized with its weights read one at a
    time from its data file (steps/variants/by_reference.py): dynamic INT8, fp16 and INT4 write the very weights and
    nodes the whole-model load writes, into one data file of their own; the source is left as it was."""
    import numpy as np
    from onnx.numpy_helper import to_array

    from onnx_nb.runtime import onnxfile
    from onnx_nb.steps.variants import by_reference

    source = external
    before = {p.name: p.stat().st_mtime_ns for p in source.parent.iterdir()}
    held = by_reference.referenced(source)  # the graph alone: every weight over 64 KiB still in its file
    assert [t.name for t in held.graph.initializer if by_reference.is_referenced(t)] and not any(
        t.HasField("raw_data") and len(t.raw_data) > by_reference.INLINE_BYTES for t in held.graph.initializer)

    def made(method: str, out: Path) -> dict[str, Any]:
        options: dict[str, Any] = {"algorithm": "rtn", "lm_head_bits": 4, "mixed_precision": None,
                                   "accuracy_level": 4} if method == "int4" else {}
        variant = onnx_nb.quantize(source, method=method, out=out, validate=False, **options)
        proto = onnx.load(str(variant.path), load_external_data=False)
        locations = {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}
        loaded = onnx.load(str(variant.path))
        return {"weights": {t.name: to_array(t) for t in loaded.graph.initializer}, "locations": locations,
                "nodes": [(n.op_type, list(n.input)) for n in loaded.graph.node]}

    for method in ("dynamic", "fp16", "int4"):
        whole = made(method, tmp_path / f"{method}-whole.onnx")
        monkeypatch.setattr(onnxfile, "EXTERNAL_DATA_BYTES", 1024)
        big = made(method, tmp_path / f"{method}-big.onnx")
        monkeypatch.undo()
        assert big["locations"] == {f"{method}-big.onnx.data"}, (method, big["locations"])
        assert big["nodes"] == whole["nodes"], method
        assert big["weights"].keys() == whole["weights"].keys() and all(
            np.array_equal(big["weights"][k], whole["weights"][k]) for k in whole["weights"]), method
    assert {p.name: p.stat().st_mtime_ns for p in source.parent.iterdir()} == before
