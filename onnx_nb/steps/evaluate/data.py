"""The examples :func:`onnx_nb.evaluate` measures on, read from where users keep them: a list (texts, ``(input,
target)`` pairs, dicts), a dict of columns, arrays ``(X, y)``, a local file (``.txt``, ``.jsonl``, ``.json``,
``.csv``, ``.tsv``, ``.npz``), a folder of images in one subfolder per class, a ``datasets`` split object, or a
Hugging Face dataset by name (``"stanfordnlp/imdb:test"``, ``"glue:sst2:validation"``: for users with a network).

Every source becomes :class:`Examples`: one dict per example. Pairs become ``{"input": x, "target": y}``; texts
``{"input": text}``; rows keep their own column names, and each metric picks the columns it reads
(:func:`Examples.column`)."""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
# the column names each role is looked for under, in order (a caller's columns= first)
ROLES: dict[str, tuple[str, ...]] = {
    "input": ("input", "text", "sentence", "sentence1", "content", "image", "img", "pixel_values", "audio",
              "speech", "x", "inputs", "prompt"),
    "target": ("target", "label", "labels", "y", "class", "answer", "answers", "transcript", "transcription",
               "sentence", "text", "tags", "ner_tags"),
    "pair": ("sentence2", "hypothesis", "question2"),
    "query": ("query", "question", "anchor", "input", "text"),
    "document": ("document", "positive", "passage", "context", "corpus", "target", "doc"),
    "question": ("question", "query"),
    "context": ("context", "passage", "document"),
    "tokens": ("tokens", "words", "input"),
    "audio": ("audio", "speech", "input_features", "input", "array"),
}


@dataclass
class Examples:
    """The examples, one dict each, and where they came from (``origin``, said in the result)."""

    rows: list[dict[str, Any]]
    origin: str

    def __len__(self) -> int:
        return len(self.rows)

    def column(self, role: str, columns: dict[str, str] | None = None, *, required: bool = True,
               avoid: tuple[str, ...] = ()) -> str | None:
        """The column that plays ``role`` (``"input"``, ``"target"``, ``"query"``, ...): the caller's choice, else
        the first of :data:`ROLES` every row has (``avoid``: columns another role already took)."""
        if columns and role in columns:
            name = columns[role]
            if not all(name in r for r in self.rows):
                raise DataError(f"columns={{{role!r}: {name!r}}}: not every example has {name!r} (the first has "
                                f"{_keys(self.rows[0])}).")
            return name
        for name in ROLES[role]:
            if name not in avoid and all(name in r and r[name] is not None for r in self.rows):
                return name
        if required:
            raise DataError(f"No {role} column in the data: the first example has {_keys(self.rows[0])}. Name it with "
                            f"columns={{{role!r}: '<column>'}}, or give (input, target) pairs.")
        return None

    def values(self, role: str, columns: dict[str, str] | None = None, **kw: Any) -> list[Any]:
        name = self.column(role, columns, **kw)
        return [] if name is None else [r[name] for r in self.rows]


def read(data: Any, *, limit: int | None = None, seed: int = 0) -> Examples:
    """:class:`Examples` from any source the module docstring lists; ``limit`` keeps that many, drawn evenly
    (a seeded draw, the same for every candidate and every call with the same data)."""
    if isinstance(data, Examples):
        found = data
    elif _splits(data):
        raise DataError(f"data= holds several splits ({', '.join(map(str, data))}): give one, e.g. data['test'].")
    elif isinstance(data, (str, os.PathLike)) and _exists(data):
        found = _file(Path(data))
    elif isinstance(data, str):
        found = _hub_dataset(data)
    elif hasattr(data, "column_names") and hasattr(data, "__getitem__"):  # a datasets.Dataset
        found = Examples([dict(r) for r in data], f"a dataset of {len(data)} rows")
    elif isinstance(data, dict):
        found = _columns(data, "a dict of columns")
    elif isinstance(data, tuple) and len(data) == 2 and _sized(data[0]) and _sized(data[1]) \
            and len(data[0]) == len(data[1]) and not isinstance(data[0], str):
        found = Examples([{"input": x, "target": y} for x, y in zip(data[0], data[1])],
                         f"{len(data[0])} (input, target) pairs")
    elif isinstance(data, (list, tuple)):
        found = _listed(list(data))
    else:
        raise DataError(f"data= is a {type(data).__name__}: give a list of texts or (input, target) pairs, a dict of "
                        "columns, (X, y) arrays, a file (.txt, .jsonl, .json, .csv, .tsv, .npz), a folder of images "
                        "by class, a datasets split, or a Hugging Face dataset name such as 'stanfordnlp/imdb:test'.")
    if not found.rows:
        raise DataError(f"The data is empty ({found.origin}); give at least one example.")
    if limit is not None and limit < len(found.rows):
        import numpy as np

        if limit < 1:
            raise DataError(f"limit={limit}: keep at least one example.")
        keep = sorted(np.random.default_rng(seed).choice(len(found.rows), limit, replace=False).tolist())
        found = Examples([found.rows[i] for i in keep], f"{found.origin}, {limit} drawn of {len(found.rows)}")
    return found


def _splits(data: Any) -> bool:
    """A datasets DatasetDict (a dict of splits, each with its columns)."""
    return isinstance(data, dict) and bool(data) and all(hasattr(v, "column_names") for v in data.values())


def _exists(path: str | os.PathLike[str]) -> bool:
    try:
        return Path(path).exists()
    except (OSError, ValueError):  # a long text given as data: no file of that name
        return False


def _keys(row: dict[str, Any]) -> str:
    return ", ".join(repr(k) for k in row) or "no columns"


def _sized(value: Any) -> bool:
    return hasattr(value, "__len__") and hasattr(value, "__getitem__")


def _listed(items: list[Any]) -> Examples:
    if not items:
        return Examples([], "an empty list")
    if all(isinstance(i, str) for i in items):
        return Examples([{"input": i} for i in items], f"{len(items)} text{'' if len(items) == 1 else 's'}")
    if all(isinstance(i, dict) and i and all(hasattr(v, "shape") for v in i.values()) for i in items):
        return Examples([{"input": i} for i in items], f"{len(items)} inputs")  # a processor's output each
    if all(isinstance(i, dict) for i in items):
        return Examples([dict(i) for i in items], f"{len(items)} examples")
    if all(isinstance(i, (tuple, list)) and len(i) == 2 for i in items):
        return Examples([{"input": a, "target": b} for a, b in items], f"{len(items)} (input, target) pairs")
    raise DataError("data= is a list mixing kinds of items: give texts, (input, target) pairs or dicts, one kind.")


def _columns(data: dict[str, Any], origin: str) -> Examples:
    lengths = {k: len(v) for k, v in data.items() if _sized(v) and not isinstance(v, str)}
    if not lengths or len(set(lengths.values())) != 1 or len(lengths) != len(data):
        raise DataError(f"data= is a dict whose values are not columns of one length ({lengths}): give "
                        "{'text': [...], 'label': [...]} with as many values in each.")
    n = next(iter(lengths.values()))
    return Examples([{k: data[k][i] for k in data} for i in range(n)], f"{origin} of {n} rows")


def _file(path: Path) -> Examples:
    if path.is_dir():
        return _image_folder(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".txt":
            lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            return Examples([{"input": line} for line in lines], f"{path.name}: {len(lines)} lines")
        if suffix == ".jsonl":
            with path.open(encoding="utf-8") as f:
                rows = [json.loads(line) for line in f if line.strip()]
            return Examples(rows, f"{path.name}: {len(rows)} rows")
        if suffix == ".json":
            loaded = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(loaded, dict):
                return _columns(loaded, path.name)
            return Examples(_listed(loaded).rows, f"{path.name}: {len(loaded)} rows")
        if suffix in (".csv", ".tsv"):
            with path.open(encoding="utf-8", newline="") as f:
                rows = list(csv.DictReader(f, delimiter="\t" if suffix == ".tsv" else ","))
            return Examples([dict(r) for r in rows], f"{path.name}: {len(rows)} rows")
        if suffix == ".npz":
            import numpy as np

            with np.load(path) as arrays:
                return _columns({k: arrays[k] for k in arrays.files}, path.name)
    except (ValueError, UnicodeDecodeError, KeyError) as exc:
        raise DataError(f"{path.name} cannot be read as {suffix} data: {exc}") from exc
    raise DataError(f"{path.name}: onnx-nb reads .txt, .jsonl, .json, .csv, .tsv and .npz files and folders of "
                    "images by class; convert it to one of them, or pass the examples as a list.")


def _image_folder(root: Path) -> Examples:
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    rows = [{"input": f, "target": c} for c in classes for f in sorted((root / c).iterdir())
            if f.suffix.lower() in IMAGE_SUFFIXES]
    if not rows:
        raise DataError(f"{root} holds no images in class subfolders (<folder>/<class>/<image>.png).")
    return Examples(rows, f"{root.name}/: {len(rows)} images in {len(classes)} classes")


def _hub_dataset(name: str) -> Examples:
    """``"name"``, ``"name:split"`` or ``"name:config:split"`` from the Hugging Face Hub (the split defaults to
    ``test``, else ``validation``)."""
    if any(ch.isspace() for ch in name):
        raise DataError(f"data={name[:60]!r}... is no file here and no dataset name: give texts as a list "
                        "(data=[text, ...]), or the path of a file that exists.")
    parts = name.split(":")
    if len(parts) > 3 or not all(parts):
        raise DataError(f"data={name!r}: name a Hugging Face dataset as 'name', 'name:split' or 'name:config:split', "
                        "or give a file that exists here.")
    try:
        import datasets
    except ImportError as exc:
        raise DataError(f"data={name!r} is neither a file here nor loadable: a Hugging Face dataset by name needs "
                        "`pip install datasets` (and a network).") from exc
    path, config, split = parts[0], parts[1] if len(parts) == 3 else "", parts[-1] if len(parts) > 1 else ""
    tried = [split] if split else ["test", "validation"]
    last: Exception | None = None
    for one in tried:
        try:
            loaded = datasets.load_dataset(path, config or None, split=one)
        except Exception as exc:  # noqa: BLE001 - the library's errors name the missing split or the network
            last = exc
            continue
        return Examples([dict(r) for r in loaded], f"{name if split else f'{name}:{one}'}: {len(loaded)} rows")
    raise DataError(f"The dataset {name!r} could not be loaded ({type(last).__name__}: {str(last)[:200]}); check the "
                    "name and split ('name:config:split') and the network, or pass a local file.") from last
