"""Execution providers: forgiving names ("cpu", "trt"...), what this onnxruntime build offers, the fallback chain,
the device each binds to, and session options. Below sessions and isolation, which both use it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError

ALIASES: dict[str, str] = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider", "gpu": "CUDAExecutionProvider",
    "trt": "TensorrtExecutionProvider", "tensorrt": "TensorrtExecutionProvider",
    "openvino": "OpenVINOExecutionProvider", "ov": "OpenVINOExecutionProvider",
    "dml": "DmlExecutionProvider", "directml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider", "rocm": "ROCMExecutionProvider",
    "migraphx": "MIGraphXExecutionProvider", "qnn": "QNNExecutionProvider",
    "xnnpack": "XnnpackExecutionProvider", "dnnl": "DnnlExecutionProvider",
    "webgpu": "WebGpuExecutionProvider", "cann": "CANNExecutionProvider",
    "nnapi": "NnapiExecutionProvider", "acl": "ACLExecutionProvider",
    "vitisai": "VitisAIExecutionProvider", "azure": "AzureExecutionProvider",
    # ONNX Runtime Web in a browser page (runtime/browser.py), not a provider of this onnxruntime
    "browser": "browser:wasm", "browser-wasm": "browser:wasm", "ort-web": "browser:wasm",
    "browser-webgpu": "browser:webgpu",
}
SHORT = {v: k for k, v in reversed(ALIASES.items())}
# where a provider's inputs and outputs live when bound (I/O binding); host memory for the others
DEVICES = {"CUDAExecutionProvider": "cuda", "TensorrtExecutionProvider": "cuda", "ROCMExecutionProvider": "cuda",
           "DmlExecutionProvider": "dml"}
NOT_COMPUTE = {"AzureExecutionProvider"}
# the names benchmark() (and the evaluations timed by it) take for the OpenVINO runtime's own rows, not a provider
OPENVINO_RUNTIME = ("openvino-runtime", "ov-runtime")


def openvino_apart(providers: Any) -> tuple[list[Any], bool]:
    """(the ONNX Runtime providers named, whether the OpenVINO runtime is named among them) from a list of names or a
    comma-separated string (``["cpu", "openvino-runtime"]``, ``"cpu,openvino-runtime"``)."""
    names = [p.strip() for p in providers.split(",") if p.strip()] if isinstance(providers, str) else list(providers)
    ort = [p for p in names if str(p).strip().lower() not in OPENVINO_RUNTIME]
    return ort, len(ort) < len(names)
# What a user needs to run the providers no desktop onnxruntime wheel here has: the package, the call that registers
# the provider, and the file to give it (optimize(model, target="mobile") writes the .ort and its operator config).
RUNTIME_STYLE = (
    "ONNX Runtime advises the Runtime optimization style for {ep}: python -m "
    "onnxruntime.tools.convert_onnx_models_to_ort --optimization_style Runtime <the exported .onnx> "
    "(optimize(target='mobile') writes the Fixed style, with fusions {ep} does not take); a reduced build with it: "
    "./build.sh {flags} --minimal_build extended --include_ops_by_config <that conversion's "
    "required_operators.with_runtime_opt.config>")
ELSEWHERE = {
    "NnapiExecutionProvider": (
        "NNAPI runs on Android (8.1 or later) only: the onnxruntime-android package (Maven) has it, registered with "
        "SessionOptions.addNnapi() in Java/Kotlin (C/C++: OrtSessionOptionsAppendExecutionProvider_Nnapi). "
        + RUNTIME_STYLE.format(ep="NNAPI", flags="--android --use_nnapi")),
    "CoreMLExecutionProvider": (
        "Core ML runs on Apple devices: on iOS the onnxruntime-objc or onnxruntime-c CocoaPods have it "
        "(appendCoreMLExecutionProvider in Objective-C/Swift, OrtSessionOptionsAppendExecutionProvider_CoreML in "
        "C/C++); on a Mac the onnxruntime wheel itself has it (providers=['coreml'] there). "
        + RUNTIME_STYLE.format(ep="Core ML", flags="--ios --use_coreml")),
    "XnnpackExecutionProvider": (
        "XNNPACK (optimized ARM and x86 CPU kernels) is in onnxruntime-android (SessionOptions.addXnnpack(options) in "
        "Java/Kotlin) and the onnxruntime-objc/onnxruntime-c CocoaPods, not in the desktop wheels: elsewhere build "
        "ONNX Runtime with ./build.sh --use_xnnpack --build_wheel and pass providers=['xnnpack']; a reduced build: "
        "add --minimal_build extended --include_ops_by_config <the mobile variant's .required_operators.config>"),
    "DmlExecutionProvider": "DirectML runs on Windows: pip install onnxruntime-directml (in place of onnxruntime)",
}


@dataclass(frozen=True)
class Provider:
    requested: str
    name: str  # full ORT name
    available: bool
    reason: str = ""

    @property
    def short(self) -> str:
        return SHORT.get(self.name, self.name)


def available() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def providers_named(names: str | Any) -> list[Provider]:
    """``"cpu"``, ``"CUDA"``, ``"trt"`` or full ORT names -> providers, available or not.

    ``"available"`` means every provider ONNX Runtime offers here. An unknown name raises
    :class:`InvalidArgumentError` listing the known and available ones.
    """
    have = available()
    if isinstance(names, str):
        # "available": every provider that computes here (Azure's only sends requests to a remote endpoint)
        names = [h for h in have if h not in NOT_COMPUTE] if names == "available" else \
            [n.strip() for n in names.split(",") if n.strip()]
    known = {v.lower(): v for v in ALIASES.values()} | {h.lower(): h for h in have}
    result: list[Provider] = []
    for raw in names:
        if not isinstance(raw, str):
            raise InvalidArgumentError(f"Provider names are strings, got {type(raw).__name__}.")
        key = raw.strip().lower()
        full = ALIASES.get(key) or known.get(key) or known.get(key + "executionprovider")
        if full is None:
            raise InvalidArgumentError(
                f"Unknown execution provider {raw!r}. Short names: {', '.join(sorted(set(ALIASES)))}; "
                f"available here: {', '.join(SHORT.get(h, h) for h in have)}."
            )
        if full.startswith("browser:"):
            from .browser import unavailable_reason

            reason = unavailable_reason(full.split(":")[1])
            result.append(Provider(raw, full, not reason, reason))
        elif full in have:
            result.append(Provider(raw, full, True))
        else:
            elsewhere = f". {ELSEWHERE[full]}" if full in ELSEWHERE else ""
            result.append(Provider(raw, full, False,
                                   f"{full} is not in this onnxruntime build; available: "
                                   f"{', '.join(SHORT.get(h, h) for h in have)}{elsewhere}"))
    if not result:
        raise InvalidArgumentError("No execution provider given; use e.g. providers=('cpu',).")
    return result


THREADS_VARIABLE = "ONNX_NB_THREADS"


def thread_cap() -> int | None:
    """``$ONNX_NB_THREADS``: the most threads a session (ONNX Runtime's intra-op pool, OpenVINO's, PyTorch's in a
    latency row) takes, and its count when a call gives none; None when unset (ONNX Runtime's own choice, one per
    physical core). Processes that share the cores (a busy laptop, the test suite's workers) each take their share
    instead of spinning threads fighting over them."""
    import os

    value = os.environ.get(THREADS_VARIABLE, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise InvalidArgumentError(f"{THREADS_VARIABLE}={value!r} is not a thread count; set it to a whole number "
                                   "of at least 1, or unset it for ONNX Runtime's default.")
    return int(value)


def threads_for(threads: int | None) -> int | None:
    """The threads a session asked for ``threads`` runs on: ``threads`` (None: the runtime's default), at most
    :func:`thread_cap`."""
    cap = thread_cap()
    if cap is None:
        return threads
    return min(threads, cap) if threads else cap


def threads_shown(threads: int | None) -> int | str:
    """The threads a session asked for ``threads`` runs on, as a latency row's options show them (the variable
    named when it decided)."""
    used = threads_for(threads)
    if used is None:
        return "default"
    return used if used == threads else f"{used} ({THREADS_VARIABLE})"


def options(*, threads: int | None = None, level: str | None = None, quiet: bool = True,
            profile_prefix: str | None = None, save_to: str | Path | None = None, prepack: bool = True,
            save_external: bool = False, stop_spinning: bool = False, record_assignment: bool = False) -> Any:
    """ORT session options: intra-op threads, graph level (disable/basic/extended/all), profiling,
    where to save the optimized graph, and weight prepacking (``prepack=False`` lets ONNX Runtime use
    memory-mapped external data as it is, with no second copy of the weights in memory).

    ``stop_spinning``: the intra-op threads stop spinning as soon as a run returns (they still spin within it).
    For loops that alternate runs with other work (a generation step's logits processors and beam search in torch):
    threads left spinning after a run took the cores from that work (on 2 cores, transformers' beam search around
    a Marian decoder's runs went from 100 to 300 ms per batch).

    ``record_assignment``: the session keeps which provider runs each node (:func:`assignment`)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if quiet:
        opts.log_severity_level = 3
    threads = threads_for(threads)
    if threads:
        opts.intra_op_num_threads = threads
    if level is not None:
        opts.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[level]
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    if save_to is not None:
        opts.optimized_model_filepath = str(save_to)
        if save_external:  # the weights into the optimized file's own data file, not references to the source's
            opts.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                          Path(save_to).name + ".data")
            opts.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    if not prepack:
        opts.add_session_config_entry("session.disable_prepacking", "1")
    if stop_spinning:
        opts.add_session_config_entry("session.force_spinning_stop", "1")
    if record_assignment:  # (a key an older ONNX Runtime does not know is ignored)
        opts.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    return opts


FALLBACK_OPS_SHOWN = 4


def assignment(session: Any) -> str:
    """Which provider runs how many of the session's nodes (after ONNX Runtime's own graph optimizations), as
    ``"CUDA 300, CPU 12 (on the CPU: Shape x8, Gather x4)"``: ONNX Runtime's graph-assignment information (1.32 and
    later, for a session opened with ``record_assignment=True``); ``""`` where the installed version or the session
    does not give it."""
    from collections import Counter

    read = getattr(session, "get_provider_graph_assignment_info", None)
    if read is None:
        return ""
    try:
        parts = read()
    except Exception:  # noqa: BLE001 - not recorded for this session (or not by this provider)
        return ""
    nodes: Counter[str] = Counter()
    on_cpu: Counter[str] = Counter()
    for part in parts:
        name = str(part.ep_name).removesuffix("ExecutionProvider")
        got = part.get_nodes()
        nodes[name] += len(got)
        if name == "CPU":
            on_cpu.update(str(n.op_type) for n in got)
    if not nodes:
        return ""
    text = ", ".join(f"{name} {count}" for name, count in nodes.most_common())
    if len(nodes) > 1 and on_cpu:  # another provider was asked: what it left to the CPU (shape work on purpose too)
        text += " (on the CPU: " + ", ".join(f"{op} x{n}" for op, n in on_cpu.most_common(FALLBACK_OPS_SHOWN)) + ")"
    return text


def chain(provider: str) -> list[str]:
    """The provider, with CPU as fallback only for the nodes it cannot place."""
    return [provider] if provider == "CPUExecutionProvider" else [provider, "CPUExecutionProvider"]
