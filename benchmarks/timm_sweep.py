"""Which of timm's model families onnx-nb serves, measured on timm's own list: for every module of ``timm.models``
that registers models (a family: resnet, convnext, vision_transformer, efficientnet, ...), its smallest model (by
parameter count, counted on the meta device; timm's ``test_*`` toys left out) built with random weights at its
default input size, then: does one ``onnx_nb.export(model, image)`` write a file that matches PyTorch at that image
size and at others where the model takes them (the export's own check; the image axes stay dynamic where the trace
allows)? do INT8 (``quantize()``) and INT4 (``method="int4"``) pass their parity? Each family runs in a process of
its own with a time limit (``registry_sweep.run_rows``).

    .venv/bin/python benchmarks/timm_sweep.py [--only resnet,convnext] [--timeout 420] [--no-variants] [--again]

Rows land in ``benchmarks/results/timm_sweep.json`` (keyed by family, each row naming its model);
``registry_sweep.py --page-only`` writes them into the supported-architectures page. About 100 families, an hour on
2 cores.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import registry_sweep  # its runner, its rows' judging and page helpers

JSON = registry_sweep.ROOT / "benchmarks" / "results" / "timm_sweep.json"


def registry() -> dict[str, str]:
    """Family (the ``timm.models`` module) -> its first model by name (the row names the one it ran)."""
    import timm
    from timm.models import _registry

    families: dict[str, str] = {}
    for name in timm.list_models():
        families.setdefault(_registry._model_to_module[name], name)
    return dict(sorted(families.items()))


def smallest(family: str) -> tuple[str, int]:
    """The family's model with the fewest parameters (built on the meta device, nothing allocated), leaving out
    timm's ``test_*`` models (a few families register a toy for timm's own tests; it stands for none of them)."""
    import timm
    import torch
    from timm.models import _registry

    counted = []
    for name in timm.list_models():
        if _registry._model_to_module[name] == family and not name.startswith("test_"):
            with torch.device("meta"):
                counted.append((sum(p.numel() for p in timm.create_model(name, pretrained=False).parameters()),
                                name))
    count, name = min(counted)
    return name, count


def one(family: str, folder: Path, variants: bool) -> dict[str, Any]:
    """Everything about one family (in a child process)."""
    import timm
    import torch

    row: dict[str, Any] = {"type": family, "class": ""}
    started = time.perf_counter()
    try:
        name, count = smallest(family)
        row["class"] = name
        if count > registry_sweep.MAX_PARAMETERS:
            raise ValueError(f"{count / 1e6:.0f}M parameters at its smallest")
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False).eval()
        size = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
        image = torch.rand(1, *size, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            model(image)
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        registry_sweep.refused(row, "build or run", "its smallest", exc)
        return row
    row.update(pytorch="ok", parameters=count, input_size=list(size))
    print("PYTORCH_OK", flush=True)
    result = registry_sweep.exported(row, model, folder.parent / "onnx" / "model.onnx", started, sample=image)
    if result is None:
        return row
    row["check"] = result.check_text()[:300]
    row["dynamic_axes"] = [f"{t.name}{t.shape}" for t in result.inputs if any(isinstance(d, str) for d in t.shape)]
    if variants and result:
        registry_sweep.quantized(row, result, folder.parent / "onnx")
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def section() -> list[str]:
    """timm's part of the page, from the rows."""
    import task_sweep  # its table: export, INT8, INT4 and the reason for every gap

    found = registry_sweep.swept(JSON)
    if found is None:
        return ["Not swept yet: run `benchmarks/timm_sweep.py`.", ""]
    rows, meta, _, _ = found
    base = [r for r in rows if registry_sweep.counted(r)]
    served = [r for r in base if task_sweep.served(r)]
    good = len(served)
    try:
        families = len(registry())
    except ImportError:  # timm not installed where the page is written: the rows' own count
        families = len(rows)
    swept_how = task_sweep.unquantized(served)
    swept = f"{len(rows)} families" if len(rows) >= families else \
        f"{len(rows)} of timm's {families} families so far (the rest not run yet)"
    return ["`benchmarks/timm_sweep.py` takes every module of `timm.models` that registers models (a family) and "
            "its smallest model by parameter count (timm's `test_*` toys left out), builds it with random weights "
            "and runs one `onnx_nb.export(model, image)` at its default input size; the export's own check compares "
            "ONNX Runtime with PyTorch there and at another image size where the file takes one. Then INT8 and INT4 "
            "with their parity.", "",
            f"Swept {meta['date']} on timm {meta.get('timm', '?')}, torch {meta['torch']}, onnxruntime "
            f"{meta['onnxruntime']}: **{good} of the {len(base)} families whose smallest model PyTorch builds and "
            f"runs ({100 * good / max(1, len(base)):.1f}%) export with one call and match PyTorch**; {swept}."
            f"{swept_how}", "",
            *task_sweep.table(rows), ""]


def main() -> None:
    parser = registry_sweep.parser_for(__doc__, 420)
    parser.add_argument("--json", default=str(JSON))
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(one(args.one, Path(args.folder), not args.no_variants)))
        return
    rows = registry_sweep.run_rows(__file__, registry(), Path(args.json), args.only, args.again, args.timeout,
                                   ["--no-variants"] if args.no_variants else [])
    base = [r for r in rows if registry_sweep.counted(r)]
    print(f"served: {sum(r.get('export') == 'ok' for r in base)} of {len(base)} families whose smallest model "
          f"PyTorch builds and runs ({len(rows)} swept)")


if __name__ == "__main__":
    main()
