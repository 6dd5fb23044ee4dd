"""Find the first node whose output departs from the reference.

ONNX vs ONNX (a variant against its parent): every intermediate tensor of both graphs is exposed
and the tensors with the same name are compared in the candidate's topological order.
ONNX vs PyTorch (an export): the PyTorch model is exported again with the same exporter, which
names its nodes and tensors the same way, and the two graphs are compared tensor by tensor; if
that fresh export diverges in the same place (a translation problem, not a damaged file), the
outputs of the PyTorch modules, caught with forward hooks, are compared with the ONNX tensors of
the same module scope instead.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ...results.parity import DivergingNode
from ...results.tolerance import Tolerance, measure, tolerance_for
from ...runtime.files import scratch_dir
from ...runtime.shapes import contiguous
from ..export.machinery.references import Reference

WRAPPER_PREFIXES = ("inner.model.", "inner.model")


def module_of(node: Any) -> str | None:
    """The PyTorch module path a node came from, when the exporter recorded it."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return None
            # The last entry is the FX node's own name; module scopes come before it.
            ours = [str(x) for x in scopes if str(x).startswith(WRAPPER_PREFIXES[1])]
            if not ours:  # a graph exported without onnx-nb's wrapper
                other = str(scopes[-2]) if len(scopes) > 1 else ""
                return None if not other or other.startswith("_") else other
            path = ours[-1]
            return path[len(WRAPPER_PREFIXES[0]):] if path.startswith(WRAPPER_PREFIXES[0]) else ""
    if node.name.startswith("/"):  # TorchScript: /model/encoder/layer.0/attention/MatMul
        parts = node.name.strip("/").split("/")[1:-1]
        return ".".join(parts)
    return None


def exporter_of(proto: Any) -> str | None:
    for node in proto.graph.node[:50]:
        if any(p.key.startswith("pkg.torch.onnx") for p in node.metadata_props):
            return "dynamo"
        if node.name.startswith("/"):
            return "torchscript"
    return None


@contextmanager
def _all_outputs(path: Path) -> Iterator[Path]:
    """A copy of the model that outputs every intermediate tensor, beside the original (so
    external data still resolves), removed afterwards."""
    import onnx

    from ...runtime.onnxfile import load_proto

    proto = load_proto(path)
    have = {o.name for o in proto.graph.output}
    for node in proto.graph.node:
        for out in node.output:
            if out and out not in have:
                proto.graph.output.append(onnx.ValueInfoProto(name=out))
                have.add(out)
    from ...runtime.files import scratch_file

    with scratch_file(path, "debug") as tmp:
        onnx.save(proto, str(tmp))
        yield tmp


def run_all(path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    values = run_all_each(path, [feed])
    try:
        return next(values)
    finally:
        values.close()  # the copy with every output removed now


def run_all_each(path: Path, feeds: list[dict[str, np.ndarray]]) -> Generator[dict[str, np.ndarray], None, None]:
    """Every tensor of the model (unoptimized) per feed, one session for all of them."""
    from ...runtime.sessions import session
    from ...runtime.shapes import cast_feed

    with _all_outputs(path) as debug:
        sess = session(debug, "CPUExecutionProvider", level="disable", check_graph=False)
        names = [o.name for o in sess.get_outputs()]
        for feed in feeds:
            yield dict(zip(names, sess.run(None, cast_feed(sess, feed))))


def _diverges(cand: np.ndarray, ref: np.ndarray, tol: Tolerance) -> tuple[bool, float, float]:
    if cand.shape != ref.shape or cand.size == 0:
        return False, 0.0, 1.0
    stats, errors = measure(cand, ref, "")
    if errors.integer:
        return bool(errors.diff.max() > 0), float(stats["max_abs"] or 0), float(stats["cosine"] or 0)
    if tol.mode == "task":
        bad = (stats["cosine"] or 0.0) < tol.min_cosine
    else:
        bad = not errors.judge(tol)["passed"]
    return bad, float(stats["max_abs"] or 0), float(stats["cosine"] or 0)


def compare_graphs(ref_path: Path, cand_path: Path, feed: dict[str, np.ndarray], tol: Tolerance,
                   method: str) -> DivergingNode | None:
    """The first node whose output is out of tolerance.

    For task-level tolerances (fp16, INT8), every tensor carries some expected noise, so a node
    counts only when it *adds* more error than the whole budget by itself: its output's
    ``1 - cosine`` exceeds its inputs' by more than ``1 - min_cosine``. When no single node does
    (the error accumulated), the node that added the most is returned.
    """
    from ...runtime.onnxfile import load_proto

    ref_vals = run_all(ref_path, feed)
    cand_vals = run_all(cand_path, feed)
    nodes = list(load_proto(cand_path).graph.node)
    producer = {o: n for n in nodes for o in n.output}
    loss: dict[str, float] = {}
    errors: dict[str, float] = {}
    budget = 1.0 - tol.min_cosine
    worst: tuple[float, DivergingNode] | None = None
    first: DivergingNode | None = None
    for node in nodes:
        for out in node.output:
            if out not in ref_vals or out not in cand_vals:
                continue
            bad, max_abs, cosine = _diverges(cand_vals[out], ref_vals[out], tol)
            loss[out] = 1.0 - cosine
            errors[node.name] = max(errors.get(node.name, 0.0), max_abs)
            if first is not None:
                continue  # keep measuring: every node's error feeds the graph view's overlay
            found = _blame(node, out, max_abs, cosine, method, producer, ref_vals)
            if tol.mode != "task":
                if bad:
                    first = found
                continue
            added = loss[out] - max((loss.get(i, 0.0) for i in node.input), default=0.0)
            if bad and added > budget:
                first = found
            elif bad and (worst is None or added > worst[0]):
                worst = (added, found)
    if first is None and worst is not None:
        first = worst[1]
        first.method += "; error accumulated, this node added the most"
    if first is not None:
        first.node_errors = errors
    return first


_COMPUTE = {"MatMulInteger", "QLinearMatMul", "ConvInteger", "QLinearConv", "MatMulNBits", "QGemm",
            "DynamicQuantizeMatMul", "QAttention", "MatMul", "Gemm", "Conv", "FusedMatMul", "Attention"}


def _blame(node: Any, out: str, max_abs: float, cosine: float, method: str, producer: dict[str, Any],
           ref_vals: dict[str, np.ndarray]) -> DivergingNode:
    """The diverging node, or, when variant-only nodes feed it (a quantized MatMul's
    DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul), the compute node of that block."""
    block: list[Any] = []
    stack = [i for i in node.input if i not in ref_vals]
    while stack:
        src = producer.get(stack.pop())
        if src is None or src in block:
            continue
        block.append(src)
        stack += [i for i in src.input if i not in ref_vals]
    main = next((n for n in reversed(block) if n.op_type in _COMPUTE), node)
    return DivergingNode(main.name, main.op_type, out, module_of(main) or module_of(node), max_abs, cosine,
                         method, list(main.input), [n.name for n in block])


def _module_outputs(ref: Reference, feed: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """Each module's first tensor output, in the order the modules finished."""
    import torch

    names = {id(m): n for n, m in ref.model.named_modules()}
    seen: list[tuple[str, np.ndarray]] = []

    def hook(module: Any, _args: Any, output: Any) -> None:
        tensor = output if isinstance(output, torch.Tensor) else next(
            (o for o in (output if isinstance(output, (tuple, list)) else []) if isinstance(o, torch.Tensor)), None)
        if tensor is not None and tensor.is_floating_point():
            seen.append((names.get(id(module), "?"), tensor.detach().float().numpy().copy()))

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        ref.run(feed)
    finally:
        handle.remove()
    return seen


def compare_modules(ref: Reference, cand_path: Path, feed: dict[str, np.ndarray],
                    tol: Tolerance) -> DivergingNode | None:
    from ...runtime.onnxfile import load_proto

    cand_vals = run_all(cand_path, feed)
    last_of: dict[str, Any] = {}
    for node in load_proto(cand_path).graph.node:
        path = module_of(node)
        if path is not None:
            last_of[path] = node
    for module_path, value in _module_outputs(ref, feed):
        node = last_of.get(module_path)
        if node is None or not node.output or node.output[0] not in cand_vals:
            continue
        bad, max_abs, cosine = _diverges(cand_vals[node.output[0]], value, tol)
        if bad:
            return DivergingNode(node.name, node.op_type, node.output[0], module_path, max_abs, cosine,
                                 "module output vs PyTorch (forward hooks)", list(node.input))
    return None


def _fresh_export(ref: Reference, exporter: str, opset: int, folder: Path) -> Path:
    import torch

    from ..export.machinery.inputs import Sample
    from ..export.machinery.torch_route import run_exporter
    from ..export.machinery.wrap import eval_mode, signature_module

    tensors = [torch.from_numpy(contiguous(ref.sample[n])) for n in ref.flat.input_names]
    s = Sample(list(ref.flat.input_names), tensors, ref.flat.as_kwargs, dict(ref.axes))
    path = folder / "fresh.onnx"
    with eval_mode(ref.model):
        run_exporter(exporter, signature_module(ref.flat), s, ref.flat, path, dict(ref.axes), opset,
                     False, [], [])
    return path


def first_divergence(path: Path, ref: Reference, feed: dict[str, np.ndarray], precision: str,
                     atol: float | None, rtol: float | None, parent: Path | None = None) -> DivergingNode | None:
    """The first node of ``path`` whose output departs from the reference's on ``feed``: tensor by tensor against
    the reference's ONNX file; for a variant (``parent``: the file it was made from, on disk), against that file
    first (its tensors bear the variant's names, and no export runs again: a detector's fresh export took minutes);
    else against a fresh export of the PyTorch model, then module by module (forward hooks)."""
    from ...runtime.onnxfile import load_proto, opset

    tol = tolerance_for(precision, "", atol, rtol, None)
    if ref.graph is not None:
        return compare_graphs(ref.graph, path, feed, tol, "tensor by tensor against the reference ONNX model")
    proto = load_proto(path)
    exporter = ref.exporter or exporter_of(proto)
    strategies: list[Callable[[], DivergingNode | None]] = []
    if parent is not None and parent.is_file() and parent.resolve() != Path(path).resolve():
        strategies.append(lambda: compare_graphs(parent, path, feed, tol,
                                                 f"tensor by tensor against the file it was made from ({parent.name})"))
    from ..export.machinery.torch_route import UPSTREAM

    if exporter in ("dynamo", "torchscript", UPSTREAM):
        def fresh() -> DivergingNode | None:
            with scratch_dir("onnx-nb-localize-") as tmp:
                fresh_path = _fresh_export(ref, exporter, opset(proto), Path(tmp))
                return compare_graphs(fresh_path, path, feed, tol,
                                      f"tensor by tensor against a fresh {exporter} export of the PyTorch model")

        strategies.append(fresh)
    strategies.append(lambda: compare_modules(ref, path, feed, tol))
    for strategy in strategies:
        found = strategy()
        if found is not None:
            return found
    return None
