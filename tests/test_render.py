"""The shared HTML pieces every result uses: compact tables, three significant digits, cut names."""

from __future__ import annotations

from onnx_nb.render import abbr, compact_table, folded, sig


def test_sig_keeps_three_significant_digits() -> None:
    assert [sig(v) for v in (0.022345, 74.66, 1234.5, 1.234e-5, None)] == ["0.0223", "74.7", "1230", "1.23e-05", "-"]
    assert [sig(v) for v in (999.6, -1468.0, 123456.7, 2.5e6)] == ["1000", "-1470", "123000", "2.5e+06"]


def test_abbr_cuts_long_text_and_keeps_it_on_hover_escaped() -> None:
    assert abbr("short") == "short"
    cut = abbr("<b>" + "x" * 40, width=10)
    assert cut.startswith('<span title="&lt;b&gt;xxx') and cut.endswith("&lt;b&gt;xxxxxx…</span>")
    assert "<b>" not in cut


def test_compact_table_shows_key_columns_and_folds_the_rest() -> None:
    html = compact_table(["name", "p50", "options"], [["<i>model</i>" + "y" * 40, "1.5", "a=1, b=2"]],
                         ["name", "p50"], abbreviate=("name",), numeric=("p50",), wrap=("options",))
    key, rest = html.split("<details>")
    assert 'class="key"' in key and "options" not in key and '<td class="num">1.5</td>' in key
    assert "…" in key and "<i>" not in html  # cut, and escaped in both tables
    assert "a=1, b=2" in rest and '<td class="wrap">&lt;i&gt;model&lt;/i&gt;' + "y" * 40 in rest
    assert compact_table(["a"], [["1"]], ["a"]).count("<table") == 1  # nothing to fold: one table


def test_folded_lines_say_how_many() -> None:
    assert folded("Warnings", []) == ""
    html = folded("Warnings", ["<script>", "two"])
    assert "Warnings (2)" in html and "&lt;script&gt;" in html and "<script>" not in html


def test_recipe_values_read_as_text_not_python_reprs() -> None:
    from onnx_nb.render import setting_text

    routes = {"onnxscript ORT fusions (6 attention)": 82.471, "re-exported with eager attention": 61.632}
    assert setting_text(routes) == "onnxscript ORT fusions (6 attention) 82.5; re-exported with eager attention 61.6"
    norm = {"fused_ms": 1.903, "unfused_ms": 0.233, "rule": "12 SkipLayerNormalization written as Add + LayerNorm"}
    assert setting_text(norm) == "12 SkipLayerNormalization written as Add + LayerNorm (fused_ms 1.9; unfused_ms 0.233)"
    assert setting_text([]) == "none" and setting_text(["a", "b"]) == "a, b" and setting_text(True) == "True"
    assert "{" not in setting_text({"a": {"b": 1.0}}) and "[" not in setting_text([[1, 2]])
    assert setting_text([f"n{i}" for i in range(32)]) == "n0, n1, n2, n3, n4, n5, … (32 in all)"


def test_chart_labels_cut_to_text_that_still_tells_rows_apart() -> None:
    """The Studio's parity chart cut 'output · shape · provider' rows at 40 characters into identical labels."""
    import re

    from onnx_nb.render import cut_apart, svg_hbars

    rows = [f"last_hidden_state · batch={b}, sequence=7 · cpu" for b in (2, 5)] + ["pooler_output · batch=2 · cpu"]
    for width in (40, 20, 12):
        shown = cut_apart(rows, width)
        assert len(set(shown)) == 3 and all(len(s) <= width for s in shown), shown
    # MiniLM's parity rows in the Studio: the same outputs at the sample, its probes and other shapes
    probes = [f"{o} · sample batch=2, sequence=13 · {p}cpu" for p in ("", "ids · ", "right-padded · ")
              for o in ("last_hidden_state", "pooler_output")]
    probes += [f"{o} · batch={b}, sequence={n} · cpu" for b, n in ((5, 13), (1, 27))
               for o in ("last_hidden_state", "pooler_output")]
    for width in (40, 30, 20):
        shown = cut_apart(probes, width)
        assert len(set(shown)) == len(probes) and all(len(s) <= width for s in shown), shown
    assert cut_apart(["a", "b", "a"], 10) == ["a", "b", "a"]  # equal labels stay equal; short ones stay whole
    assert cut_apart(["a long label here", "another"], 8) == ["a long …", "another"]  # the end cut when it suffices
    svg = svg_hbars([{"label": r, "value": 1e-5 * (i + 1)} for i, r in enumerate(rows)], axis="x", log=True,
                    label_chars=30)
    labels = re.findall(r'text-anchor="end">([^<]*)</text>', svg)
    assert len(labels) == 3 and len(set(labels)) == 3, labels
    # an exact row (zero error) keeps its label and says so, with no bar drawn at an arbitrary floor
    exact = svg_hbars([{"label": "a", "value": 1e-4, "text": "pass"}, {"label": "b", "value": 0.0,
                                                                       "text": "pass: exact"}], axis="x", log=True)
    assert exact.count("<rect") == 1 and "pass: exact" in exact and ">b</text>" in exact
    assert svg_hbars([{"label": "b", "value": 0.0}], axis="x", log=True) == ""


def test_latency_bars_label_every_row_and_give_each_room() -> None:
    """report.html's latency chart was 260 px for 5 rows and plotly dropped 2 of their labels."""
    from onnx_nb.results.latency import LatencyRow, LatencyTable

    names = ["PyTorch eager", "PyTorch eager, padding skipped", "export (fp32)", "optimized", "int8"]
    rows = [LatencyRow(n, "ort:cpu", "sample", p50_ms=10.0 / (i + 1), p90_ms=11.0 / (i + 1), p99_ms=12.0 / (i + 1),
                       speedup=float(i + 1)) for i, n in enumerate(names)]
    fig = LatencyTable(rows).figure()
    assert fig.layout.yaxis.dtick == 1 and len(fig.data[0].y) == 5
    assert fig.layout.height >= 150 + 30 * len(rows)
