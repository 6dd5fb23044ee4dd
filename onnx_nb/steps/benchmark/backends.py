"""How each backend runs one input, for timing: an ONNX Runtime session (device-bound on GPU providers), the
OpenVINO runtime, PyTorch eager (and PyTorch given the padding skip)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ...runtime.onnxfile import file_bytes
from ...runtime.providers import threads_for, threads_shown
from ...runtime.shapes import contiguous


class OrtRunner:
    """An ONNX Runtime session on one provider; GPU providers bind inputs and outputs on the device."""

    def __init__(self, path: Path, provider: str, feed: dict[str, np.ndarray], threads: int | None,
                 level: str, profile_dir: str | None = None, runtime: dict[str, Any] | None = None) -> None:
        import onnxruntime as ort

        from ...runtime import sessions
        from ...runtime.providers import DEVICES, assignment
        from ...runtime.shapes import cast_feed

        self.path, self.provider, self.level, self.threads = path, provider, level, threads
        self.floor_bytes = file_bytes(path)  # the weights a session holds: its row's memory is never less
        self.options = {"graph_level": level, "intra_op_threads": threads_shown(threads),
                        "execution_mode": "sequential", "profiling": bool(profile_dir)}
        self.session = sessions.session(
            path, provider, threads=threads, level=level, map_weights=False, record_assignment=True,
            profile_prefix=os.path.join(profile_dir, "ort_profile") if profile_dir else None)
        nodes = assignment(self.session)  # which provider runs how many nodes, what fell back to the CPU
        if nodes:
            self.options["nodes"] = nodes
        self.feed = cast_feed(self.session, feed)
        self.device = DEVICES.get(provider)
        if hasattr(self.session, "time"):  # an IsolatedSession or a browser page: timed where the session lives
            self.options.update(getattr(self.session, "options", None) or {"process": "isolated worker"})
            self.device = None
        self.binding = None
        if (runtime or {}).get("unpad"):
            from ...runtime.padding import UnpaddedSession

            self.session = UnpaddedSession(self.session)
            self.options["runtime"] = "skips padding"
            self.device = None  # buckets are fed from host memory
        # timed inside the worker when isolated (an unpadded session is timed here, copies included)
        self.isolated = hasattr(self.session, "time")
        if self.device:
            self.binding = self.session.io_binding()
            for name, value in self.feed.items():
                self.binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, self.device, 0))
            for out in self.session.get_outputs():
                self.binding.bind_output(out.name, self.device, 0)

    def __call__(self) -> None:
        if self.binding is not None:
            self.session.run_with_iobinding(self.binding)
            self.binding.synchronize_outputs()
        else:
            self.session.run(None, self.feed)

    def end_profiling(self) -> str:
        return str(self.session.end_profiling())


def type_name(element_type: Any) -> str:
    """An OpenVINO element type as it names itself ("bf16", "f32")."""
    name = getattr(element_type, "get_type_name", None)
    return str(name() if callable(name) else element_type)


class OpenVinoRunner:
    """The OpenVINO runtime itself (``pip install openvino``), compiled for its CPU device."""

    def __init__(self, path: Path, feed: dict[str, np.ndarray], threads: int | None,
                 config: dict[str, Any] | None = None) -> None:
        import openvino as ov

        core = ov.Core()
        config = {"PERFORMANCE_HINT": "LATENCY", **(config or {})}
        if threads_for(threads):
            config["INFERENCE_NUM_THREADS"] = threads_for(threads)
        model = core.read_model(str(path))
        self.floor_bytes = file_bytes(path)
        self.compiled = core.compile_model(model, "CPU", config)
        self.request = self.compiled.create_infer_request()
        names = {p.get_any_name() for p in self.compiled.inputs}
        self.feed = {k: v for k, v in feed.items() if k in names}
        self.options = {"runtime": f"openvino {ov.__version__}", "device": "CPU", "hint": "LATENCY",
                        "threads": threads_shown(threads),
                        # f32 files run in bf16 where the CPU has bf16 instructions, unless told otherwise
                        "precision": type_name(self.compiled.get_property("INFERENCE_PRECISION_HINT"))}

    def __call__(self) -> None:
        self.request.infer(self.feed)


class TorchRunner:
    """PyTorch eager on the same inputs, in inference mode, with the same thread count."""

    def __init__(self, reference: Any, feed: dict[str, np.ndarray], threads: int | None) -> None:
        import torch

        self.torch = torch
        self.flat = reference.flat
        self.model = reference.model
        self.tensors = [torch.from_numpy(contiguous(feed[n])) for n in self.flat.input_names]
        self.threads = threads
        from ...runtime.memory import weight_bytes

        self.held_bytes = weight_bytes(self.model)  # loaded before the row: counted into its peak memory
        self.options = {"mode": "eager, inference_mode", "threads": threads_for(threads) or torch.get_num_threads(),
                        "attention": str(getattr(getattr(self.model, "config", None), "_attn_implementation", "-"))}

    def __call__(self) -> None:
        with self.torch.inference_mode():
            self.flat.flat(*self.tensors)


class BucketedTorchRunner(TorchRunner):
    """PyTorch eager given the padding skip a variant's runtime gets: the rows grouped by the same plan
    (:func:`padding.plan_buckets`), each group run trimmed to its longest row. The fair baseline for
    padding-skip rows."""

    def __init__(self, reference: Any, feed: dict[str, np.ndarray], threads: int | None) -> None:
        from ...runtime.padding import trimmed_buckets

        super().__init__(reference, feed, threads)
        mask = feed["attention_mask"]
        own = {n: feed[n] for n in self.flat.input_names}
        sequence = {n for n, v in own.items() if np.ndim(v) > 1 and v.shape[1] == mask.shape[1]}
        self.parts = [[self.torch.from_numpy(contiguous(part[n])) for n in self.flat.input_names]
                      for _, _, part in trimmed_buckets(own, mask.sum(axis=1).astype(np.int64), sequence)]
        self.options["runtime"] = "skips padding"

    def __call__(self) -> None:
        with self.torch.inference_mode():
            for tensors in self.parts:
                self.flat.flat(*tensors)
