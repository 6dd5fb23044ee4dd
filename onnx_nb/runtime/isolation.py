"""ONNX Runtime in a child process, so that a crash on a hostile or broken model cannot take the
user's kernel with it.

ONNX Runtime is C++: a malformed graph that slips past the checks can end in a segmentation fault,
and in-process that kills the Jupyter kernel with everything in it. With isolation on, each session
lives in a worker process (``python -m onnx_nb.runtime.isolation``); if it dies, the caller gets a
:class:`RuntimeCrashError` and keeps working.

Isolation is opt-in (``isolate=True`` on :func:`check_parity` and :func:`benchmark`, ``--isolate``
on the magics and the command line, ``with onnx_nb.isolated():`` for a block of code, or
``ONNX_NB_ISOLATE=1`` for everything), because starting a worker costs about a second and inputs
and outputs are copied between processes. Turn it on for files you did not make.

Nothing crosses the process boundary as a pickle: messages are JSON with arrays in numpy's ``.npy``
format (read with ``allow_pickle=False``), so a worker taken over by a hostile model cannot run code
in the kernel through its replies.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import io
import json
import os
import signal
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from ..errors import InvalidModelError, RuntimeCrashError, WorkerError
from .onnxfile import NodeArg
from .shapes import contiguous

_ISOLATE: contextvars.ContextVar[bool | None] = contextvars.ContextVar("onnx_nb_isolate", default=None)


def wanted(isolate: bool | None = None) -> bool:
    """Whether sessions go to a worker process: the argument, else the enclosing :func:`isolated`
    block, else the ``ONNX_NB_ISOLATE`` environment variable."""
    if isolate is not None:
        return bool(isolate)
    inner = _ISOLATE.get()
    if inner is not None:
        return inner
    return os.environ.get("ONNX_NB_ISOLATE", "").strip().lower() in ("1", "true", "yes", "on")


@contextlib.contextmanager
def isolated(on: bool | None = True) -> Iterator[None]:
    """Every ONNX Runtime session opened inside the block runs in a worker process (``on=None``
    leaves the current setting alone).

    Example::

        with onnx_nb.isolated():
            onnx_nb.benchmark("from_a_stranger.onnx")
    """
    token = _ISOLATE.set(on) if on is not None else None
    try:
        yield
    finally:
        if token is not None:
            _ISOLATE.reset(token)


F = TypeVar("F", bound=Callable[..., Any])


def honours_isolate(fn: F) -> F:
    """Let a step's ``isolate=`` keyword cover every session opened inside it."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with isolated(kwargs.get("isolate")):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


# -- the wire format: a JSON header, then arrays as .npy, each framed by its length ----------------

def _send(stream: IO[bytes], message: Any) -> None:
    arrays: list[np.ndarray] = []

    def strip(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            arrays.append(value)
            return {"__array__": len(arrays) - 1}
        if isinstance(value, (list, tuple)):
            return [strip(v) for v in value]
        if isinstance(value, dict):
            return {str(k): strip(v) for k, v in value.items()}
        if isinstance(value, np.generic):
            return value.item()
        return value

    header = json.dumps(strip(message)).encode()
    chunks = [header]
    for array in arrays:
        buf = io.BytesIO()
        np.save(buf, contiguous(array), allow_pickle=False)
        chunks.append(buf.getvalue())
    stream.write(struct.pack("<I", len(chunks)))
    for chunk in chunks:
        stream.write(struct.pack("<Q", len(chunk)))
        stream.write(chunk)
    stream.flush()


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) < n:
        raise EOFError
    return data


def _receive(stream: IO[bytes]) -> Any:
    (count,) = struct.unpack("<I", _read_exact(stream, 4))
    chunks = []
    for _ in range(count):
        (size,) = struct.unpack("<Q", _read_exact(stream, 8))
        chunks.append(_read_exact(stream, size))
    arrays = [np.load(io.BytesIO(c), allow_pickle=False) for c in chunks[1:]]

    def restore(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {"__array__"}:
                return arrays[int(value["__array__"])]
            return {k: restore(v) for k, v in value.items()}
        if isinstance(value, list):
            return [restore(v) for v in value]
        return value

    return restore(json.loads(chunks[0]))


# -- the worker ----------------------------------------------------------------------------------

def _meta(args: Any) -> list[dict[str, Any]]:
    return [{"name": a.name, "shape": list(a.shape), "type": a.type} for a in args]


def _serve(inbox: IO[bytes], outbox: IO[bytes]) -> None:
    import onnxruntime as ort

    from .providers import chain, options
    from .timing import time_runs

    sess = None
    while True:
        try:
            message = _receive(inbox)
        except EOFError:
            return
        op = message["op"]
        try:
            if op == "open":
                sess = ort.InferenceSession(message["path"], options(**message["options"]),
                                            providers=chain(message["provider"]))
                reply: Any = {"inputs": _meta(sess.get_inputs()), "outputs": _meta(sess.get_outputs()),
                              "providers": sess.get_providers()}
            elif op == "run":
                assert sess is not None
                reply = list(sess.run(message["names"], message["feed"]))
            elif op == "time":
                assert sess is not None
                reply = time_runs(functools.partial(sess.run, None, message["feed"]), warmup=message["warmup"],
                                  runs=message["runs"], min_seconds=message["min_seconds"])
            elif op == "end_profiling":
                assert sess is not None
                reply = sess.end_profiling()
            else:
                return
            _send(outbox, {"ok": reply})
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller as text
            _send(outbox, {"error": type(exc).__name__, "message": str(exc)})


def main() -> None:
    """Worker entry point: requests on stdin, replies on the original stdout; anything the runtime
    prints goes to stderr so it cannot corrupt the replies."""
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _serve(sys.stdin.buffer, outbox)


# -- the caller's side ---------------------------------------------------------------------------

class IsolatedSession:
    """An ``onnxruntime.InferenceSession`` in a worker process, with the same ``run`` /
    ``get_inputs`` / ``get_outputs`` / ``get_providers`` / ``end_profiling``; ``time`` measures
    latency inside the worker, so the numbers carry no copying between processes.

    Example::

        session = onnx_nb.IsolatedSession("from_a_stranger.onnx")
        outputs = session.run(None, feed)                  # a crash raises RuntimeCrashError; the kernel lives on
        session.close()
    """

    def __init__(self, path: str | Path, provider: str = "CPUExecutionProvider", **options: Any) -> None:
        self.path = Path(path)
        env = dict(os.environ, ONNX_NB_ISOLATE="0", PYTHONUNBUFFERED="1")
        self._proc = subprocess.Popen([sys.executable, "-m", "onnx_nb.runtime.isolation"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, env=env)
        try:
            meta = self._call({"op": "open", "path": str(self.path), "provider": provider, "options": options},
                              "loading")
        except WorkerError as exc:
            self.close()
            raise InvalidModelError(f"ONNX Runtime cannot load {self.path.name}: {exc}") from exc
        self._inputs = [NodeArg(**m) for m in meta["inputs"]]
        self._outputs = [NodeArg(**m) for m in meta["outputs"]]
        self._providers = list(meta["providers"])

    def _call(self, message: dict[str, Any], doing: str) -> Any:
        if self._proc.poll() is not None:
            raise self._crashed(doing)
        try:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            _send(self._proc.stdin, message)
            reply = _receive(self._proc.stdout)
        except (EOFError, BrokenPipeError, OSError):
            raise self._crashed(doing) from None
        except BaseException:  # Ctrl-C while waiting: the worker is in an unknown state, stop it
            self.close()
            raise
        if "error" in reply:
            raise WorkerError(reply["error"], reply["message"])
        return reply["ok"]

    def _crashed(self, doing: str) -> RuntimeCrashError:
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = self._proc.wait()
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        return RuntimeCrashError(
            f"ONNX Runtime's worker process died ({how}) while {doing} {self.path.name}. Your session is "
            "unaffected. The model is malformed or hostile, or hit an ONNX Runtime bug: do not open it "
            "in-process (isolate=False); check where it came from, or re-export it.")

    def get_inputs(self) -> list[NodeArg]:
        return self._inputs

    def get_outputs(self) -> list[NodeArg]:
        return self._outputs

    def get_providers(self) -> list[str]:
        return self._providers

    @property
    def pid(self) -> int:
        return self._proc.pid

    def run(self, output_names: Any, feed: dict[str, np.ndarray], run_options: Any = None) -> list[np.ndarray]:
        names = list(output_names) if output_names is not None else None
        return list(self._call({"op": "run", "names": names, "feed": dict(feed)}, "running"))

    def time(self, feed: dict[str, np.ndarray], *, warmup: int, runs: int | None, min_seconds: float) -> list[float]:
        return [float(t) for t in self._call({"op": "time", "feed": dict(feed), "warmup": warmup, "runs": runs,
                                              "min_seconds": min_seconds}, "timing")]

    def end_profiling(self) -> str:
        return str(self._call({"op": "end_profiling"}, "profiling"))

    def close(self) -> None:
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


if __name__ == "__main__":
    main()
