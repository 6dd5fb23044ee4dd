"""onnx_nb.summary (structure and cost, weights never read), onnx_nb.compare (nodes matched and marked) and the
server extension's payloads behind the JupyterLab viewer, on real exports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
import torch
from onnx import TensorProto, helper

import onnx_nb
import tiny_models
from onnx_nb.frontends import labserver

HOSTILE = '<img src=x onerror="alert(1)">'


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    out = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    return onnx_nb.export(model, torch.randn(2, 16), out=out, progress=False)


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory, bert_export: Any) -> tuple[Any, Any, Any]:
    root = tmp_path_factory.mktemp("bert")
    result = bert_export  # read only (conftest's shared exports): the variants go into root
    opt = onnx_nb.optimize(result, out=root / "bert.optimized.onnx")
    q = onnx_nb.quantize(opt, method="dynamic", out=root / "bert.optimized.int8.onnx")
    return result, opt, q


def test_summary_counts_what_the_model_computes(mlp: Any) -> None:
    s = onnx_nb.summary(mlp, shapes={mlp_axis(mlp): 4})
    assert s.params == 16 * 32 + 32 + 32 * 8 + 8
    assert s.macs == 4 * (16 * 32 + 32 * 8)  # batch x (in x out) per Linear
    modules = {r["module"]: r for r in s.by_module()}
    assert modules["0"]["params"] == 16 * 32 + 32 and modules["2"]["params"] == 32 * 8 + 8
    assert modules["0"]["macs"] == 4 * 16 * 32
    assert s.inputs[0]["shape"][1] == 16 and s.outputs[0]["shape"][1] == 8
    assert "MACs" in repr(s) and "MACs" in s._repr_html_()
    # without shapes: structure only
    assert onnx_nb.summary(mlp).macs is None


def mlp_axis(result: Any) -> str:
    return str(onnx_nb.summary(result).inputs[0]["shape"][0])


def test_conv_macs(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    r = onnx_nb.export(model, torch.randn(1, 3, 16, 16), out=tmp_path / "conv.onnx", progress=False)
    shape = onnx_nb.summary(r).inputs[0]["shape"]
    s = onnx_nb.summary(r, shapes={r_input(r): [1, 3, 16, 16]})
    assert s.macs == 8 * 14 * 14 * 3 * 3 * 3, (shape, s.macs)


def r_input(result: Any) -> str:
    return str(onnx_nb.summary(result).inputs[0]["name"])


def test_bad_shapes_are_named(mlp: Any) -> None:
    with pytest.raises(onnx_nb.InvalidArgumentError, match="neither an input nor a symbolic axis"):
        onnx_nb.summary(mlp, shapes={"nope": 3})
    with pytest.raises(onnx_nb.InvalidArgumentError, match="whole number"):
        onnx_nb.summary(mlp, shapes={mlp_axis(mlp): -2})


def test_external_weights_are_never_read(tmp_path: Path) -> None:
    """A file whose weights live in a 4 GiB external data file (sparse here: nothing on disk): its summary, cost and
    graph come from the .onnx alone, in seconds, without the weights ever entering memory."""
    import resource
    import time

    n = 32768  # 32768 x 32768 float32 = 4 GiB
    w = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[n, n])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "big.data"), ("offset", "0"), ("length", str(4 * n * n))):
        w.external_data.add(key=k, value=v)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])], [w])
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    with open(tmp_path / "big.data", "wb") as f:
        f.truncate(4 * n * n)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    s = onnx_nb.summary(path, shapes={"batch": 3})
    payload = labserver.graph_payload(path)
    seconds = time.perf_counter() - start
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    assert s.params == n * n and s.macs == 3 * n * n and s.external_bytes == 4 * n * n
    assert [x["op"] for x in payload["graph"]["nodes"]] == ["MatMul"]
    assert grown < 256 * 2**20 and seconds < 10, (grown, seconds)


def test_compare_marks_fusions_and_quantization(bert: tuple[Any, Any, Any]) -> None:
    result, opt, q = bert
    same = onnx_nb.compare(result, result)
    assert set(same.marks_a.values()) == {"same"} and set(same.marks_b.values()) == {"same"}
    fused = onnx_nb.compare(result, opt)
    assert fused.counts()["fused"][1] > 0, fused
    ops = {n.name: n.op_type for n in onnx.load(str(opt.path), load_external_data=False).graph.node}
    replaced_by = {ops[b] for b in fused.into.values()}
    assert replaced_by & {"Attention", "SkipLayerNormalization", "EmbedLayerNormalization"}, replaced_by
    quant = onnx_nb.compare(opt, q)
    assert quant.counts()["quantized"][1] > 0
    assert "quantized" in repr(quant) and "quantized" in quant._repr_html_()
    # a quant_debug report saved beside the INT8 file is its per-node error
    onnx_nb.quant_debug(opt, q).to_json(Path(q.path).with_suffix(".quant_debug.json"))
    again = onnx_nb.compare(opt, q)
    assert again.errors and again.error_label.startswith("dB lost")
    assert any("quant_debug.json" in n for n in again.notes)


def test_compare_view_widget(bert: tuple[Any, Any, Any]) -> None:
    _, opt, q = bert
    view = onnx_nb.CompareView(opt, q)
    assert view.right.marks == view.comparison.marks_b and "quantized" in set(view.right.marks.values())
    assert view.left.marks == view.comparison.marks_a
    assert repr(view).startswith(f"{Path(opt.path).name} -> {Path(q.path).name}")


def test_html_escapes_names_from_the_file(tmp_path: Path) -> None:
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 2], [1.0, 0.0, 0.0, 1.0])
    g = helper.make_graph([helper.make_node("MatMul", [HOSTILE, "w"], ["y"], name=HOSTILE)], "g",
                          [helper.make_tensor_value_info(HOSTILE, TensorProto.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], [w])
    path = tmp_path / "h.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name=HOSTILE), path)
    html = onnx_nb.summary(path)._repr_html_()
    assert HOSTILE not in html and "&lt;img" in html
    assert HOSTILE not in onnx_nb.compare(path, path)._repr_html_()


def test_server_paths_stay_inside_the_root(tmp_path: Path) -> None:
    (tmp_path / "inside").mkdir()
    assert labserver.resolve(str(tmp_path), "inside") == (tmp_path / "inside").resolve()
    for bad in ("../etc/passwd", "/../../etc/passwd", "inside/../../x"):
        with pytest.raises(onnx_nb.InvalidArgumentError, match="outside the folder"):
            labserver.resolve(str(tmp_path), bad)
    with pytest.raises(onnx_nb.InvalidArgumentError):
        labserver.resolve(str(tmp_path), "")


def test_damaged_file_is_a_clear_error(tmp_path: Path, mlp: Any) -> None:
    data = Path(mlp.path).read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(onnx_nb.InvalidModelError, match="not a readable ONNX model"):
        labserver.graph_payload(tmp_path / "cut.onnx")


def test_launcher_notebooks_never_overwrite(tmp_path: Path) -> None:
    first = labserver.notebook_payload(str(tmp_path), {"kind": "export", "model": "sentence-transformers/x"})
    second = labserver.notebook_payload(str(tmp_path), {"kind": "export", "model": "other"})
    assert first["path"] != second["path"]
    nb = json.loads((tmp_path / first["path"]).read_text())
    assert "onnx_nb.export('sentence-transformers/x')" in "".join(nb["cells"][1]["source"])
    studio = labserver.notebook_payload(str(tmp_path), {"kind": "studio", "model": "m"})
    assert "onnx_nb.Studio('m')" in (tmp_path / studio["path"]).read_text()
    tutorials = labserver.tutorials()
    assert [t["file"] for t in tutorials][:1] == ["01_quickstart.ipynb"] and tutorials[0]["title"].startswith(
        "Quickstart")
    copy = labserver.notebook_payload(str(tmp_path), {"kind": "tutorial", "file": "01_quickstart.ipynb"})
    assert (tmp_path / copy["path"]).read_text() == (labserver.tutorials_dir() / "01_quickstart.ipynb").read_text()
    with pytest.raises(onnx_nb.InvalidArgumentError, match="Unknown notebook kind"):
        labserver.notebook_payload(str(tmp_path), {"kind": "rm -rf"})
    with pytest.raises(onnx_nb.InvalidArgumentError, match="No tutorial"):
        labserver.notebook_payload(str(tmp_path), {"kind": "tutorial", "file": "../../secret.ipynb"})
    # an empty name is the demo model (an empty Ok did nothing); the export notebook checks parity and times the
    # files against PyTorch eager; each notebook is named after its model
    demo = labserver.notebook_payload(str(tmp_path), {"kind": "export", "model": " "})
    assert demo["path"] == "onnx-nb export demo.ipynb" and first["path"] == "onnx-nb export x.ipynb"
    text = (tmp_path / demo["path"]).read_text()
    assert "onnx_nb.export(onnx_nb.default_model_path())" in text and "onnx_nb.check_parity(result)" in text
    assert "reference=result" in text and "the demo model (all-MiniLM-L6-v2)" in text


def test_extensions_are_installed_and_enabled() -> None:
    import subprocess
    import sys

    lab = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"], capture_output=True, text=True,
                         timeout=120)
    text = lab.stdout + lab.stderr
    assert "onnx-nb" in text and "enabled" in text.split("onnx-nb", 1)[1].splitlines()[0], text
    server = subprocess.run([sys.executable, "-m", "jupyter", "server", "extension", "list"], capture_output=True,
                            text=True, timeout=120)
    text = server.stdout + server.stderr
    assert "onnx_nb" in text and "enabled" in text.split("onnx_nb", 1)[1].splitlines()[0], text


def test_attention_macs_count_the_cache(tmp_path: Path) -> None:
    """A fused attention decoding one token over a 1,000-token cache attends to 1,001 keys, not 1."""
    heads, size, past = 4, 16, 1000
    hidden = heads * size
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "", "past_k", "past_v"],
                            ["y", "present_k", "present_v"], domain="com.microsoft", num_heads=heads, name="mha")
    f = TensorProto.FLOAT
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info("q", f, [1, 1, hidden]),
                           helper.make_tensor_value_info("k", f, [1, 1, hidden]),
                           helper.make_tensor_value_info("v", f, [1, 1, hidden]),
                           helper.make_tensor_value_info("past_k", f, [1, heads, "past", size]),
                           helper.make_tensor_value_info("past_v", f, [1, heads, "past", size])],
                          [helper.make_tensor_value_info("y", f, None),
                           helper.make_tensor_value_info("present_k", f, None),
                           helper.make_tensor_value_info("present_v", f, None)])
    path = tmp_path / "mha.onnx"
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(g, opset_imports=opsets), path)
    s = onnx_nb.summary(path, shapes={"past": past})
    assert s.macs == 2 * 1 * 1 * (past + 1) * hidden, (s.macs, s.notes)


def test_server_hides_what_jupyter_hides(tmp_path: Path, mlp: Any) -> None:
    (tmp_path / ".private").mkdir()
    with pytest.raises(onnx_nb.InvalidArgumentError, match="hidden"):
        labserver.resolve(str(tmp_path), ".private/model.onnx", allow_hidden=False)
    assert labserver.resolve(str(tmp_path), ".private", allow_hidden=True) == (tmp_path / ".private").resolve()
    # the browser gets the file's name, never the server's folders
    payload = labserver.graph_payload(Path(mlp.path))
    assert payload["summary"]["path"] == Path(mlp.path).name


def test_a_broken_report_beside_the_file_does_not_block_it(tmp_path: Path, mlp: Any) -> None:
    import shutil

    model = tmp_path / "m.onnx"
    shutil.copy(mlp.path, model)
    (tmp_path / "m.parity.json").write_text(json.dumps({"rows": [], "divergence": {"node_errors": {"x": "oops"}}}))
    payload = labserver.graph_payload(model)
    assert payload["graph"]["nodes"] and "unreadable" in payload["overlay"]["source"]
    c = onnx_nb.compare(model, model)
    assert not c.errors and any("could not be read" in n for n in c.notes)


def test_optimized_and_int8_files_keep_their_layers_and_compare_pairs_each_module(minilm_export: Any,
                                                                                  tmp_path: Path) -> None:
    """ONNX Runtime's fused and quantized nodes take the module of what they replaced (runtime/scopes.py): the graph
    view groups an optimized or INT8 file by layer as it does the export, and compare() pairs every layer-level
    module of MiniLM's export with a node of its own module (or the module it was fused into) in each file;
    layer 0's MLP MatMul with its own MatMul, never with another layer's or the embedding's quantize node."""
    from onnx_nb.frontends.graphdata import graph_json

    def layer(module: str | None) -> str:
        parts = (module or "").split(".")
        return ".".join(parts[:3]) if parts[0] == "encoder" else parts[0]

    export = minilm_export  # read only (conftest's shared exports)
    fast = onnx_nb.optimize(export, out=tmp_path / "o.onnx")
    int8 = onnx_nb.quantize(fast, out=tmp_path / "q.onnx")
    int8_plain = onnx_nb.quantize(export, out=tmp_path / "q2.onnx")
    top = {name: sum(1 for n in graph_json(p)["nodes"] if not n["module"])
           for name, p in (("export", export.path), ("optimized", fast.path), ("int8", int8.path),
                           ("int8 of the export", int8_plain.path))}
    assert max(top.values()) <= top["export"], top  # before: 59 and 199 nodes at the top level
    for variant in (fast, int8, int8_plain):
        nodes = graph_json(variant.path)["nodes"]
        assert {layer(n["module"]) for n in nodes if n["module"]} >= {f"encoder.layer.{i}" for i in range(6)}
        modules = {n["name"]: n["module"] or "" for n in nodes}
        c = onnx_nb.compare(export, variant)
        per: dict[str, list[str]] = {}
        for n in graph_json(export.path)["nodes"]:
            if (n["module"] or "").startswith("encoder.layer"):
                there = c.matched.get(n["name"]) or c.into.get(n["name"])
                per.setdefault(n["module"], []).append(modules.get(there, "") if there else "")
        own = {m for m, found in per.items() if any(
            x == m or x.startswith(m + ".") or (m.startswith(x + ".") and x.count(".") >= 3) for x in found)}
        assert len(per) == 72 and own == set(per), sorted(set(per) - own)
        mlp = next(n["name"] for n in graph_json(export.path)["nodes"]
                   if n["module"] == "encoder.layer.0.intermediate.dense" and n["op"] == "MatMul")
        there = c.matched.get(mlp) or c.into.get(mlp)
        assert modules[there] == "encoder.layer.0.intermediate.dense", (variant.path.name, there)


def _group_cycles(graph: dict[str, Any], depth: int) -> list[str]:
    """The module boxes the graph view draws at ``depth`` (as js/src/graph.js groups them) on or after a cycle of
    boxes: a box both before and after another, which the layout can only draw side by side (a module and its own
    submodule aside: a module's code runs before and after its child's)."""
    loose = sum(1 for n in graph["nodes"] if not n["module"])

    def unit(n: dict[str, Any]) -> str:  # (more than 20 nodes outside any module are folded into one box)
        if n["module"]:
            return ".".join(n["module"].split(".")[:depth])
        return "(top level)" if loose > 20 else "n:" + n["name"]

    of = {n["name"]: unit(n) for n in graph["nodes"]}
    after: dict[str, set[str]] = {u: set() for u in of.values()}
    for e in graph["edges"]:
        a, b = of[e["source"]], of[e["target"]]
        if a != b and not a.startswith(b + ".") and not b.startswith(a + "."):
            after[a].add(b)
    indegree = {u: 0 for u in after}
    for targets in after.values():
        for t in targets:
            indegree[t] += 1
    todo = [u for u, d in indegree.items() if d == 0]
    while todo:  # Kahn: what is left once no box without a predecessor remains lies on a cycle
        for t in after.pop(todo.pop()):
            indegree[t] -= 1
            if indegree[t] == 0:
                todo.append(t)
    return sorted(after)


def test_a_file_from_another_exporter_keeps_its_layers_in_order(tmp_path: Path) -> None:
    """The INT8 step can quantize a TorchScript re-export of the model (the attention route that ran fastest): its
    ONNX Runtime nodes take their modules from the dynamo parent by weight, yet TorchScript folded the tiny model's
    equal LayerNorm weights (all ones) into one. A weight several modules read names none of them, so each fused
    node takes its own layer from its neighbours, and the graph view's module boxes follow one another (before:
    every layer's skip-norm in the embedding's LayerNorm box, all layers drawn in one wide row)."""
    from onnx_nb.frontends.graphdata import default_depth, graph_json
    from onnx_nb.runtime.scopes import carry_scopes

    model = tiny_models.build("bert")
    parent = onnx_nb.optimize(onnx_nb.export(model, out=tmp_path / "d.onnx", progress=False),
                              out=tmp_path / "d.opt.onnx")
    ts = onnx_nb.export(model, out=tmp_path / "t.onnx", progress=False, exporter="torchscript")
    child = onnx_nb.quantize(onnx_nb.optimize(ts, out=tmp_path / "t.opt.onnx"), method="dynamic",
                             out=tmp_path / "t.int8.onnx")
    assert carry_scopes(onnx.load(str(parent.path), load_external_data=False), child.path) > 0
    graph = graph_json(child.path)
    norms = [n for n in graph["nodes"] if n["op"] == "LayerNormalization" and not n["name"].startswith("/")]
    layers = [".".join((n["module"] or "").split(".")[:4]) for n in norms]
    # (the last layer's closing skip-norm goes to the pooler, the first module that reads it)
    assert layers[:3] == ["bert.encoder.layer.0", "bert.encoder.layer.0", "bert.encoder.layer.1"], \
        [(n["name"], n["module"]) for n in norms]
    attention = [n["module"] for n in graph["nodes"] if n["op"] == "QAttention"]
    assert attention == ["bert.encoder.layer.0.attention.self", "bert.encoder.layer.1.attention.self"], attention
    assert _group_cycles(graph, default_depth(graph)) == []
    assert _group_cycles(graph_json(parent.path), default_depth(graph_json(parent.path))) == []
