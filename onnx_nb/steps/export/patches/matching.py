"""onnxscript's pattern matcher, as the dynamo exporter's graph clean-up and ORT's fusions run it, in time linear in
the graph.

For a pattern with several output nodes (``SlicesSplit``: two ``Slice`` of one input, in the optimizer every
``torch.onnx.export(optimize=True)`` runs), onnxscript's ``SimplePatternMatcher.match`` indexes every node of the
graph by operator before it tries the node it was given, once for each node the rewriter visits: time quadratic in
the graph's size (2.2 of the 2.6 seconds the rewriter took on a 22-layer decoder's 4,171 nodes; more with its cache).
Within :func:`linear_matching`, a node whose operator is not the pattern's first output node's fails at once, as the
matcher itself fails it once it gets there (its first check, ``NodePattern.matches``: the operator's type): the
same rewrites, the same file. Single-output patterns too: the matcher set up a match state for each node and rule
before that first check (the rewriter's rules tried on every node were 5% of the test suite's time).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from .contract import Patch
from .lending import lent


def _first_output_first(match: Callable[..., Any]) -> Callable[..., Any]:
    from onnxscript.rewriter import _basics  # once, not in each of the matcher's calls

    @functools.wraps(match)
    def fast(self: Any, model: Any, graph_or_function: Any, node: Any, **options: Any) -> Any:
        nodes = self.pattern.output_nodes
        first = nodes[0].op_identifier() if nodes else None
        if first is not None and first[1] != node.op_type:
            return _basics.MatchResult().fail(f"OpType mismatch: expected {first[1]}, got {node.op_type}.")
        return match(self, model, graph_or_function, node, **options)

    fast.linear = True  # type: ignore[attr-defined]
    return fast


@contextlib.contextmanager
def linear_matching(model: Any = None) -> Iterator[list[str]]:
    """Within: onnxscript's matcher tries a pattern only on nodes of its first output node's operator;
    yields ``["SimplePatternMatcher.match"]`` (empty where this onnxscript has no such matcher: nothing applied).
    ``model`` is unused: it applies to every export."""
    try:
        from onnxscript.rewriter._matcher import SimplePatternMatcher
    except ImportError:  # pragma: no cover - an onnxscript without the matcher: its own speed
        yield []
        return
    current = SimplePatternMatcher.match
    if getattr(current, "linear", False):  # already within (a nested export)
        yield []
        return
    with lent([(SimplePatternMatcher, "match", _first_output_first(current))]):
        yield ["SimplePatternMatcher.match"]


PATCH = Patch(
    name="linear matching",
    applies_to="every dynamo export and onnxscript's ORT fusions (onnxscript's rewriter)",
    replaces="onnxscript's SimplePatternMatcher.match for a node whose operator cannot start the pattern",
    why="the matcher indexes the whole graph for each node it visits: a 22-layer decoder's export spent most of its "
        "clean-up there",
    during=linear_matching)
