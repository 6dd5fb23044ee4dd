"""Every step on a decoder file over 2 GB, each in a process of its own, with its time and peak memory beside the
weights: the generic export of the 1.1B Llama (``benchmarks/lean_decoder.py``'s checkpoint, 4.10 GiB fp32) with its
cache, then on that 4.4 GB file dynamic and static INT8, fp16, INT4, ``optimize()``, generation parity of the INT8 file,
``quant_debug`` and a decode latency row.

    .venv/bin/python benchmarks/big_steps.py [--work onnx_nb_out/lean] [--cap 21]

Each step runs in a fresh process started by ``lean_decoder.py``'s watcher (resident memory sampled every 20 ms,
stopped above ``--cap`` GiB): its row says whether it finished, its wall time, the process's peak (resident: what it
holds and the pages of files it maps, such as a session's weights), what it held (anonymous memory alone) and what
the step itself reports (``Variant.memory``: what the step added at its peak), as multiples of the export's weights.
The ``checked ...`` steps are the default calls on the export's file, ``quantize(path, method=...)`` and
``optimize(path)`` with their checks against that file included (the other variant steps run with
``validate=False``). Run it from the folder whose ``onnx_nb`` is to be measured (``python -c`` imports from there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

STEP = r"""
import json, sys, time
import onnx_nb
from onnx_nb.runtime.memory import peak_memory
work, step = sys.argv[1], sys.argv[2]
folder, export = f"{work}/hf", f"{work}/generic/model.onnx"
t = time.perf_counter()
def measured(what, call):
    with peak_memory() as peak:
        value = call()
    print(json.dumps({"step": what, "added_bytes": peak.added_bytes, "process_bytes": peak.high_bytes}), flush=True)
    return value
if step == "export":
    r = measured("export", lambda: onnx_nb.export(folder, out=export, overwrite=True, progress=False))
    out = {"passed": bool(r), "size": r.file_size, "files": len(r.files)}
elif step == "parity+optimize":  # both need the export's PyTorch model: exported again in this process
    r = measured("export", lambda: onnx_nb.export(folder, out=export, overwrite=True, progress=False))
    rep = measured("parity", lambda: onnx_nb.check_parity(r, f"{work}/generic/dynamic.onnx", progress=False))
    print(json.dumps({"step": "parity", "passed": bool(rep), "notes": rep.notes[0][:200]}), flush=True)
    v = onnx_nb.optimize(r, out=f"{work}/generic/optimized.onnx", overwrite=True, validate=False)
    out = {"memory": v.memory, "size": v.size_after, "route": str(v.recipe.get("attention_route", ""))[:120]}
elif step in ("dynamic", "static", "fp16", "int4"):
    v = onnx_nb.quantize(export, method=step, out=f"{work}/generic/{step}.onnx", overwrite=True, validate=False,
                         calibration="generated" if step == "static" else None)
    out = {"memory": v.memory, "size": v.size_after}
elif step.startswith("checked "):  # the default call on the export's file, its check against the file included
    method = step.split()[1]
    out_path = f"{work}/generic/checked-{method}.onnx"
    v = (onnx_nb.optimize(export, out=out_path, overwrite=True) if method == "optimize" else
         onnx_nb.quantize(export, method=method, out=out_path, overwrite=True))
    out = {"memory": v.memory, "size": v.size_after, "passed": bool(v)}
elif step == "quant_debug":
    rep = onnx_nb.quant_debug(export, f"{work}/generic/dynamic.onnx")
    out = {"layers": len(rep.layers) if hasattr(rep, "layers") else None}
elif step == "benchmark":
    table = onnx_nb.benchmark(f"{work}/generic/int4.onnx", providers="cpu", shapes=[{"past": 64}], runs=5,
                              warmup=1, progress=False)
    frame = table.to_pandas()
    out = {"rows": len(frame), "p50_ms": [round(float(x), 2) for x in frame["p50_ms"]] if "p50_ms" in frame else None}
print(json.dumps({"seconds": time.perf_counter() - t, **out}))
"""

STEPS = ("export", "dynamic", "static", "fp16", "int4", "quant_debug", "benchmark", "parity+optimize",
         "checked dynamic", "checked fp16", "checked int4", "checked optimize")


def main() -> int:
    from lean_decoder import gib, make_checkpoint, watched

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("onnx_nb_out/lean"))
    parser.add_argument("--cap", type=float, default=21.0)
    parser.add_argument("--steps", default=",".join(STEPS))
    args = parser.parse_args()
    work = (args.work / "1b").resolve()
    make_checkpoint(work / "hf", "1b")
    (work / "generic").mkdir(exist_ok=True)
    weights = sum(p.stat().st_size for p in (work / "hf").glob("*.safetensors"))
    print(f"checkpoint {gib(weights)}; each step in a process of its own (cap {args.cap} GiB)", flush=True)
    print(f"{'step':16s} {'status':8s} {'seconds':>8s} {'process peak':>13s} {'x weights':>9s} {'held':>10s} "
          f"{'x weights':>9s}  reported")
    for step in args.steps.split(","):
        done = watched([sys.executable, "-c", STEP, str(work), step], args.cap)
        lines = [line for line in done["tail"].splitlines() if line.startswith("{")]
        status = "killed" if done["killed"] else "ok" if done["rc"] == 0 and lines else "failed"
        extra = json.loads(lines[-1]) if lines else {"error": done["tail"][-600:]}
        mem = extra.get("memory") or {}
        said = (f"added {gib(mem['added_bytes'])} = {mem['added_bytes'] / mem['weights_bytes']:.2f}x its input's "
                f"{gib(mem['weights_bytes'])}" if mem.get("added_bytes") is not None else "")
        rest = {k: v for k, v in extra.items() if k not in ("memory", "seconds")}
        for line in lines[:-1]:  # the steps measured inside the child (export, parity)
            inner = json.loads(line)
            if inner.get("added_bytes") is not None:
                print(f"  {inner['step']}: added {gib(inner['added_bytes'])} "
                      f"({inner['added_bytes'] / weights:.2f}x the checkpoint), process {gib(inner['process_bytes'])}")
            else:
                print(f"  {json.dumps(inner)[:300]}")
        print(f"{step:16s} {status:8s} {done['seconds']:8.1f} {gib(done['peak']):>13s} "
              f"{done['peak'] / weights:8.2f}x {gib(done['anon']):>10s} {done['anon'] / weights:8.2f}x  {said} "
              f"{json.dumps(rest)[:300]}", flush=True)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
