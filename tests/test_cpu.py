"""INT8 that follows the CPU it runs on (onnx_nb.runtime.cpu, steps/variants/int8_schemes.py).

The machines this project runs on are sometimes an Intel Xeon or an AMD EPYC with VNNI, sometimes an AMD EPYC with
AVX2 only, whose u8s8 products saturate in 16 bits. The second kind is always at hand here: QEMU's user-mode
emulator runs this venv's Python with the CPU of an EPYC-Rome (AVX2, no VNNI, no AVX-512), and ONNX Runtime's kernel
dispatch reads that CPU from CPUID as it would on the real machine. The emulated runs only compute outputs (never a
timing), so each check holds on either kind of host.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import onnx
import pytest

import onnx_nb
from onnx_nb.runtime import cpu

AVX2_CPU = "EPYC-Rome"  # QEMU's model of an AMD EPYC 7002: AVX2, no VNNI, no AVX-512


def emulated(script: str, *args: str, timeout: int = 300) -> Any:
    """Run ``script`` (it prints one JSON line last) in this venv's Python on an emulated AVX2 CPU."""
    qemu = shutil.which("qemu-x86_64")
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the emulated AVX2 CPU is an x86_64 one")
    assert qemu, "qemu-x86_64 is missing: apt-get install qemu-user (scripts/dev and .ci/run install it)"
    done = subprocess.run([qemu, "-cpu", AVX2_CPU, sys.executable, "-c", textwrap.dedent(script), *args],
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_cpu_as_onnx_runtime_sees_it() -> None:
    here = cpu.this_cpu()
    assert here.arch == "x86_64" or here.arch == "arm64"
    assert here.kernel in here.label and here.saturates in (True, False)
    assert cpu.target(None) == here and cpu.target("auto").here
    assert cpu.target("avx2").saturates and cpu.target("avx512").saturates
    assert cpu.target("vnni").saturates is False and cpu.target("arm64").saturates is False
    assert cpu.target("any").saturates is None
    assert cpu.schemes_for(cpu.target("avx2"))[0] == ["u8u8", "u8s8-reduced"]  # measured on such a CPU
    assert cpu.schemes_for(cpu.target("vnni"))[0] == ["u8s8"]
    with pytest.raises(onnx_nb.OnnxNbError, match=r"target_cpu=.pentium.*.avx2."):
        cpu.target("pentium")
    # /proc/cpuinfo's extras only where it describes this process's CPU: under qemu-user it is the host's (an AMD
    # Zen 5 host lists avx_vnni and AVX-512 while the emulated CPU offers AVX2 alone)
    assert cpu.proc_extras({"avx2"}, {"avx2", "avx512f", "avx512_vnni", "avx_vnni"}) == set()
    assert cpu.proc_extras({"avx2"}, {"avx2", "avx_vnni", "fma"}) == {"avx_vnni"}  # Alder Lake: AVX-VNNI, no AVX-512
    assert cpu.proc_extras({"asimd"}, {"asimd", "asimddp", "i8mm"}) == {"asimddp", "i8mm"}
    seen = emulated("""
        import json
        from onnx_nb.runtime.cpu import this_cpu
        c = this_cpu()
        print(json.dumps({"kernel": c.kernel, "saturates": c.saturates, "label": c.label}))
    """)
    assert seen == {"kernel": "AVX2 (no VNNI)", "saturates": True, "label": seen["label"]}
    assert "AVX2 (no VNNI)" in seen["label"]


LOGITS = """
    import json, sys
    import numpy as np, onnxruntime as ort
    from onnx_nb.runtime.cpu import this_cpu

    def logits(path):
        s = ort.InferenceSession(path)
        rng = np.random.default_rng(0)
        feed = {"input_ids": rng.integers(3, 100, (2, 12)), "attention_mask": np.ones((2, 12), np.int64)}
        for i in s.get_inputs()[2:]:  # the cache, empty: a prompt of 12 tokens
            feed[i.name] = np.zeros((2, i.shape[1], 0, i.shape[3]), np.float32)
        return s.run(["logits"], feed)[0]

    base = logits(sys.argv[1])
    out = {"cpu": this_cpu().kernel}
    for path in sys.argv[2:]:
        got = logits(path)
        out[path] = float(np.abs(got - base).max())
    print(json.dumps(out))
"""


def test_int8_follows_the_cpu_and_a_file_for_another_says_so(tmp_path: Path) -> None:
    """The tiny Qwen2 from the generation tests, optimized to GroupQueryAttention, quantized for three CPUs. On an
    AVX2 CPU without VNNI a full-range u8s8 file saturates (its logits error grows several times); the file made
    for that CPU (uint8 weights) keeps the error it has where nothing saturates, and the scheme, the CPU it was
    made for and a note when it runs on another kind are in its recipe, its metadata and its parity report."""
    import tiny_models

    result = onnx_nb.export(tiny_models.build("qwen2"), out=tmp_path / "qwen2.onnx", progress=False)
    fast = onnx_nb.optimize(result, out=tmp_path / "gqa.onnx", validate=False)
    files = {target: onnx_nb.quantize(fast, target_cpu=target, validate=False, out=tmp_path / f"{target}.onnx")
             for target in ("vnni", "avx2", "any")}
    assert {t: v.recipe["int8_scheme"] for t, v in files.items()} == {"vnni": "u8s8", "avx2": "u8u8",
                                                                      "any": "u8u8"}
    assert files["avx2"].recipe["weight_type"] == "uint8" and "saturate" in files["avx2"].recipe["int8_scheme_rule"]
    assert "not measured" in files["avx2"].recipe["int8_scheme_rule"] or cpu.this_cpu().saturates
    reduced = onnx_nb.quantize(fast, scheme="u8s8-reduced", validate=False, out=tmp_path / "reduced.onnx")
    assert reduced.recipe["reduce_range"] is True and reduced.recipe["int8_scheme_rule"].startswith("given")
    meta = {p.key: p.value for p in onnx.load(str(files["vnni"].path), load_external_data=False).metadata_props}
    assert meta[cpu.SCHEME_KEY] == "u8s8" and "VNNI" in meta[cpu.TARGET_KEY]
    paths = [str(files[t].path) for t in ("vnni", "avx2")] + [str(reduced.path)]
    emulated_errors = emulated(LOGITS, str(fast.path), *paths)
    here_errors = json.loads(subprocess.run([sys.executable, "-c", textwrap.dedent(LOGITS), str(fast.path), *paths],
                                            capture_output=True, text=True, check=True).stdout.splitlines()[-1])
    vnni, avx2, seven_bits = (emulated_errors[p] for p in paths)
    assert emulated_errors["cpu"] == "AVX2 (no VNNI)"
    assert vnni > 5 * avx2, emulated_errors  # the saturation this test exists for (0.135 vs 0.006 when written)
    assert avx2 < 0.02 and seven_bits < 0.03, emulated_errors
    if not cpu.this_cpu().saturates:  # a VNNI host: the AVX2 file there is as good as the VNNI file here
        assert avx2 <= 1.1 * here_errors[paths[0]] + 1e-4, (emulated_errors, here_errors)
    # the file made for VNNI, opened on a CPU without it, says so; the AVX2 file there says nothing
    notes = emulated("""
        import json, sys, onnx
        from onnx_nb.runtime.cpu import file_notes
        print(json.dumps([file_notes(onnx.load(p, load_external_data=False)) for p in sys.argv[1:]]))
    """, *paths[:2])
    assert "saturate" in notes[0][0] and "target_cpu='avx2'" in notes[0][0] and notes[1] == []
    if cpu.this_cpu().saturates is False:  # and the reverse: a 7-bit file on a CPU that keeps all 8 bits
        assert "keeps all 8 bits" in cpu.file_notes(onnx.load(str(reduced.path), load_external_data=False))[0]


def test_quantize_times_the_schemes_here_and_says_when_int8_is_slower(tmp_path: Path) -> None:
    """On this machine the chosen INT8 file is timed against its fp32 parent at a serving size (8 x 128 tokens),
    the timings and the CPU in the recipe, ``variant.speed`` and the variant's text; a file no faster than its
    parent says so, the pipeline's summary too, and the latency table marks its row and never calls it best."""
    import tiny_models
    from onnx_nb.results.latency import LatencyRow, LatencyTable, mark_slower
    from onnx_nb.results.report import headline

    bert = tiny_models.build("bert")
    result = onnx_nb.export(bert, out=tmp_path / "bert.onnx", progress=False)
    int8 = onnx_nb.quantize(result, out=tmp_path / "bert.int8.onnx")
    here = cpu.this_cpu()
    assert int8 and int8.recipe["int8_cpu"] == here.label and int8.recipe["int8_scheme"] in cpu.SCHEMES
    # every scheme the CPU allows made; those within the accuracy policy timed, the one kept among them
    schemes = cpu.schemes_for(here)[0]
    assert int8.recipe["int8_scheme"] in int8.recipe["int8_schemes_ms"] and set(int8.recipe["int8_schemes_ms"]) <= \
        set(schemes)
    assert len(schemes) == 1 or all(f"{s} " in int8.recipe["int8_scheme_rule"] for s in schemes), int8.recipe
    assert int8.speed["cpu"] == here.label and int8.speed["shape"].startswith("input_ids=[8, ")
    assert int8.speed["ms"] > 0 and int8.speed["parent_ms"] > 0
    assert "speed here" in repr(int8) and here.label in repr(int8)
    slower = int8.slower_than_parent
    assert (any("no INT8 file beats its fp32 parent" in w for w in int8.warnings)) == slower
    assert ("slower than its fp32 parent" in headline(int8)) == slower
    # the table's rule, on rows whose numbers are given: a child at or above its parent is marked, never best
    rows = [LatencyRow("fp32", "ort:cpu", "s", p50_ms=10.0), LatencyRow("int8", "ort:cpu", "s", p50_ms=12.0,
                                                                       parent="fp32")]
    mark_slower(rows, {"int8": "no VNNI here"})
    table = LatencyTable(rows)
    assert rows[1].slower and table.best() is rows[0] and "slower than its parent fp32 (12 vs 10 ms): no VNNI" \
        in rows[1].note and ">slower<" in table.html_body()
    timed = onnx_nb.benchmark([result, int8], providers="cpu", min_seconds=0.05, progress=False)
    assert timed.rows[1].parent == "fp32"
    # each row's file size and the accuracy its own check measured, beside its speed (the key columns)
    worst = min(r.cosine for r in int8.parity.rows if r.cosine is not None)
    assert timed.rows[1].cosine == worst and timed.rows[0].cosine == result.check["cosine"]
    assert 0 < timed.rows[1].size_mb < timed.rows[0].size_mb
    key = timed.html_body().split('<table class="key">')[1].split("</table>")[0]
    assert "size_mb" in key and "cosine" in key
