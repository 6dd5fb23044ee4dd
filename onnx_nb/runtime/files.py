"""Where results go on disk, and how they get there safely.

Every file onnx-nb writes is first written into a temporary folder beside its final place and
then renamed into place, so an interrupted step never leaves half a file behind, and nothing
the user had is replaced unless ``overwrite=True`` was given.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import DiskFullError, OnnxNbError, OutputExistsError, OutputNotWritableError, first_line
from ..render import human_bytes

DEFAULT_ROOT = "onnx_nb_out"
ROOT_VARIABLE = "ONNX_NB_OUT"  # where steps given no out= write instead (a shared machine, a test worker)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str) -> str:
    """A file-system-safe version of a model name (``org/model`` becomes ``org--model``)."""
    cleaned = _UNSAFE.sub("-", name.replace("/", "--")).strip(".-")
    return cleaned or "model"


def default_root() -> Path:
    """The folder steps given no ``out=`` write under: ``$ONNX_NB_OUT`` when set, else ``./onnx_nb_out``."""
    return Path(os.environ.get(ROOT_VARIABLE) or DEFAULT_ROOT).expanduser()


def default_output(model_name: str, filename: str = "model.onnx", *, taken_ok: bool = False) -> Path:
    """Where a step given no ``out=`` writes: ``<root>/<name>/filename``. A folder that already holds files (an
    earlier export of the same model: the Launcher's notebook, a magic, a second run of a cell) is left as it is and
    the next free one is used, ``<name>-2``, ``<name>-3``, ... (numbered runs, as Ultralytics names its ``runs/``);
    ``taken_ok`` (``overwrite=True``, or a folder the caller owns) gives ``<name>`` whatever it holds."""
    first = default_root() / safe_name(model_name)
    folder, n = first, 1
    while not taken_ok and folder.is_dir() and any(folder.iterdir()):
        n += 1
        folder = first.with_name(f"{first.name}-{n}")
    return folder / filename


_MADE: contextvars.ContextVar[list[Path] | None] = contextvars.ContextVar("onnx_nb_made_folders", default=None)


@contextlib.contextmanager
def no_empty_folders() -> Iterator[None]:
    """Output folders :func:`check_target` creates inside the block are removed again when the block fails and
    they are still empty: a failed step leaves no folder behind (a bad model path made ``onnx_nb_out/<name>/``)."""
    outer = _MADE.get()
    made: list[Path] = []
    token = _MADE.set(made)
    try:
        yield
    except BaseException:
        with deferred_interrupt():
            for folder in reversed(made):  # deepest first
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only when empty
        raise
    finally:
        _MADE.reset(token)
        if outer is not None:
            outer.extend(f for f in made if f.exists())


def cleans_up_folders(fn: Any) -> Any:
    """:func:`no_empty_folders` around a step's whole call."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with no_empty_folders():
            return fn(*args, **kwargs)

    return wrapper


def check_target(path: str | os.PathLike[str], overwrite: bool) -> Path:
    """Validate an output path before any work is done; returns it as an absolute ``Path``. The folders it
    creates are removed again if the step fails (:func:`no_empty_folders`)."""
    target = Path(path).expanduser()
    if target.exists() and target.is_dir():
        raise OutputExistsError(
            f"The output path {target} is a folder; give a file path ending in .onnx, "
            f"for example {target / 'model.onnx'}."
        )
    if target.exists() and not overwrite:
        raise OutputExistsError(
            f"{target} already exists. Pass overwrite=True (--overwrite on the command line) "
            "to replace it, or choose another output path."
        )
    folder = target.parent
    missing = [f for f in [folder, *folder.parents] if not f.exists()][::-1]  # outermost first
    try:
        folder.mkdir(parents=True, exist_ok=True)
        made = _MADE.get()
        if made is not None:
            made.extend(f.resolve() for f in missing)
    except OSError as exc:
        raise OutputNotWritableError(
            f"Cannot create the output folder {folder}: {exc.strerror or exc}. "
            "Choose a folder you can write to."
        ) from exc
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputNotWritableError(
            f"The output folder {folder} is not writable. Choose a folder you can write to."
        )
    return target.resolve()


NEARLY_FULL = 1 << 20
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_DENIED = {errno.EROFS, errno.EACCES, errno.EPERM}


def disk_error(exc: BaseException, folder: Path) -> OnnxNbError | None:
    """The onnx-nb error for a write that failed because the disk is full or read-only, looking
    through the exception's causes (exporters wrap the OSError) and their messages; else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "errno", None)
        text = str(current)
        if code in _FULL or "No space left on device" in text or "Disk quota exceeded" in text:
            free = human_bytes(shutil.disk_usage(folder).free) if folder.exists() else "?"
            return DiskFullError(
                f"The disk holding {folder} filled up while writing ({free} free now). Nothing partial was left "
                "behind. Free some space, or pass out= on another disk.")
        if code in _DENIED or "Read-only file system" in text:
            return OutputNotWritableError(
                f"Cannot write in {folder}: {os.strerror(code) if code else text[:100]}. Choose a folder you "
                "can write to.")
        current = current.__cause__ or current.__context__
    # Some writers lose the errno (ONNX Runtime says "Protobuf serialization failed"): a disk with
    # almost nothing left while a write was under way is the cause.
    left = shutil.disk_usage(folder).free if folder.exists() else None
    if left is not None and left < NEARLY_FULL:
        return DiskFullError(
            f"The disk holding {folder} filled up while writing ({human_bytes(left)} free; "
            f"the writer said: {first_line(exc, 120)}). Nothing "
            "partial was left behind. Free some space, or pass out= on another disk.")
    return None


def check_space(folder: Path, needed: int) -> None:
    """Fail before any work when ``folder``'s disk cannot hold ``needed`` bytes (plus 5%)."""
    free = shutil.disk_usage(folder).free
    if needed * 1.05 > free:
        raise DiskFullError(
            f"Writing this model needs about {human_bytes(needed)} in {folder}, but that disk has "
            f"{human_bytes(free)} free. Free some space, or pass out= on another disk.")


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Ctrl-C waits until the block is done, then arrives as usual: cleanups and the renames that
    publish a model must not stop half way. (Signals can only be caught in the main thread; elsewhere
    the block runs as is.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, None)
            else:
                raise KeyboardInterrupt


def _remove(path: Path) -> None:
    with deferred_interrupt():
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def scratch_dir(prefix: str, where: Path | None = None) -> Iterator[Path]:
    """A temporary folder (in the system's temp folder unless ``where``), removed on exit even when
    Ctrl-C arrives during the removal."""
    with deferred_interrupt():
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    try:
        yield tmp
    finally:
        _remove(tmp)


@contextlib.contextmanager
def temp_inside(folder: Path) -> Iterator[None]:
    """Temporary files that libraries make for themselves (ONNX Runtime's quantizer makes ``ort.quant.*``
    folders) go inside ``folder`` for the block, so removing ``folder`` (interrupt-safe) removes them too."""
    before = tempfile.tempdir
    tempfile.tempdir = str(folder)
    try:
        yield
    finally:
        tempfile.tempdir = before


@contextlib.contextmanager
def scratch_file(beside: Path, tag: str) -> Iterator[Path]:
    """A hidden temporary file beside ``beside`` (so relative external data still resolves)."""
    with deferred_interrupt():
        fd, name = tempfile.mkstemp(prefix=f".{beside.stem}.{tag}.", suffix=".onnx", dir=beside.parent)
        os.close(fd)
    try:
        yield Path(name)
    finally:
        _remove(Path(name))


@contextlib.contextmanager
def staging_dir(target: Path) -> Iterator[Path]:
    """A temporary folder beside ``target`` (same file system, so renames are atomic).

    It is removed on exit, whether the step succeeded, failed or was interrupted; a full or
    read-only disk becomes :class:`DiskFullError` / :class:`OutputNotWritableError`.
    """
    try:
        with deferred_interrupt():
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.stem}.", suffix=".tmp", dir=target.parent))
    except OSError as exc:
        raise (disk_error(exc, target.parent) or exc) from exc
    try:
        yield tmp
    except OnnxNbError:
        raise
    except Exception as exc:
        mapped = disk_error(exc, target.parent)
        if mapped is None:
            raise
        raise mapped from exc
    finally:
        _remove(tmp)


def publish(staged_model: Path, target: Path) -> list[Path]:
    """Move a staged ``.onnx`` file and any external-data files beside it into place.

    The data files move first and the ``.onnx`` last, so the model file only appears once
    everything it refers to is there. Returns the final paths.
    """
    moved: list[Path] = []
    with deferred_interrupt():  # all the files or none: Ctrl-C waits for the last rename
        for item in sorted(staged_model.parent.iterdir()):
            if item == staged_model or not item.is_file():
                continue
            dest = target.parent / item.name
            os.replace(item, dest)
            moved.append(dest)
        os.replace(staged_model, target)
        moved.append(target)
    return moved


def total_size(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths if p.exists())
