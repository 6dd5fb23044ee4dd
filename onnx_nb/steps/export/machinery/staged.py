"""Writing a model that :func:`onnx_nb.export` makes as several files (:mod:`.parts`): every part exported and
checked, then published into one folder together."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_parts(names: tuple[str, ...], build: Callable[[], dict[str, tuple[Any, Any, Any]]],
                default_name: str, out: Any, overwrite: bool, progress: bool, opset: int | None,
                export: Any) -> tuple[Path, dict[str, Any], float]:
    """Every part ``build()`` gives (name -> module, sample, dynamic axes) exported with ``export``
    (:func:`onnx_nb.export`, each checked at other shapes) into ``out`` (a folder; default: one named after
    ``default_name``). All or nothing: every target is checked before the first is written (an existing file needs
    ``overwrite=True``), the parts are written to a staging folder beside (``runtime.files.staging_dir``, removed
    whatever happens) and published into ``out`` together once all passed their export. Returns the folder, the
    parts' results and the seconds taken. ``out`` naming a file (``sd.onnx``) names the folder (``sd/``)."""
    from ....progress import Steps
    from ....runtime.files import check_target, default_output, deferred_interrupt, publish, staging_dir

    folder = Path(out).expanduser() if out is not None else \
        default_output(default_name, taken_ok=overwrite).parent
    if folder.suffix == ".onnx":  # a file's path for several files: the folder of that name (sd.onnx -> sd/)
        folder = folder.with_suffix("")
    for part in names:  # every part's file checked before the first is written
        check_target(folder / f"{part}.onnx", overwrite)
    started = time.perf_counter()
    parts = {}
    with staging_dir(folder / f"{names[0]}.onnx") as staging, Steps(len(names), "export", progress) as steps:
        for part, (module, sample, axes) in build().items():
            steps.step(f"exporting the {part.replace('_', ' ')}")
            # a folder per part: publish() moves a model's file with every data file beside it
            parts[part] = export(module, sample, out=staging / part / f"{part}.onnx", dynamic=axes, opset=opset,
                                 overwrite=True, progress=False, name=part)
        with deferred_interrupt():  # the parts appear together, or none of them
            for result in parts.values():
                result.files = publish(result.path, folder / result.path.name)
                result.path = folder / result.path.name
    return folder, parts, time.perf_counter() - started
