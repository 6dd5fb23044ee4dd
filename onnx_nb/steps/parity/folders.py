"""Generation parity of a folder another tool wrote (:mod:`onnx_nb.runtime.generation_folders`: transformers'
exporter's prefill and decode graphs, a tool's one decoder file with its cache), or of a decoder file alone, against
the PyTorch model it came from: each prompt's greedy tokens against PyTorch's ``generate()`` with the first diverging
step and PyTorch's margin there, the logits at every step under teacher forcing, and every layer's keys and values
after the prefill and after the last decode step, so a bad file is traced to its first bad layer. Only imported by
functions that already need torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...errors import InvalidArgumentError, first_line
from ...runtime.generation_folders import ExporterFolder, decoder_file, folder_tool, greedy, open_folder
from ..export.caches.hf_names import cache_kwargs, cache_of
from .generation import compare_tokens, torch_greedy
from .probes import default_prompts


class DecoderFileRuns:
    """A tool's one decoder file (onnxruntime-genai's builder's, Optimum's, transformers.js's: one graph, the cache as
    ``past_key_values.N.key`` / ``.value``, an attention mask) in onnx-nb's own step runner, with
    :class:`ExporterFolder`'s interface."""

    def __init__(self, path: Path, provider: str, tool: str | None, decoder: Any = None) -> None:
        import json

        from ...runtime.onnxfile import load_proto
        from ..generate.runners import decoder_for

        self.decoder = decoder if decoder is not None else decoder_for(path, provider)
        self.files = {"decoder": path}
        self.takes_mask = "attention_mask" in self.decoder.input_names
        config = path.parent / "genai_config.json"
        version = json.loads(config.read_text()).get("model", {}).get("type", "") if config.is_file() else ""
        self.versions = {"model type": version} if version else {}
        header = load_proto(path)  # who wrote the graph, as the file says (its weights left unread)
        if header.producer_name:
            self.versions["graph by"] = f"{header.producer_name} {header.producer_version}".strip()
        # a file alone: the tool that wrote it is the one its header names
        self.tool = tool or self.versions.pop("graph by", "a tool that left no name in it")
        self.runtime = getattr(self.decoder, "version", None)  # a runtime other than ONNX Runtime: which

    @property
    def weight_bytes(self) -> dict[str, int]:
        from ...runtime.onnxfile import file_bytes

        return {"decoder": file_bytes(self.files["decoder"])}

    def prefill(self, ids: np.ndarray) -> tuple[np.ndarray, Any]:
        return self.decoder.step(ids, np.ones(ids.shape, np.int64), self.decoder.empty_cache(ids.shape[0]))

    def decode(self, token: np.ndarray, cache: Any, past: int) -> tuple[np.ndarray, Any]:
        return self.decoder.step(token, np.ones((token.shape[0], past + token.shape[1]), np.int64), cache)

    @staticmethod
    def by_layer(cache: dict[str, Any]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """``{layer: (keys, values)}``: the cache's arrays, or a GroupQueryAttention file's shared buffers (ONNX
        Runtime values) up to the positions filled."""
        import re

        items = cache
        if isinstance(cache.get("buffers"), dict):  # onnx-nb's shared-buffer runner (one prompt: no padding)
            filled = int(cache["top"]) + int(cache.get("added", 0))  # the prompt's positions, then each step's
            items = {n: _host(v)[:, :, :filled] for n, v in cache["buffers"].items()}
        found: dict[int, dict[str, np.ndarray]] = {}
        for name, value in items.items():
            m = re.search(r"\.(\d+)\.(key|value)$", name)
            if m:
                found.setdefault(int(m[1]), {})[m[2]] = _host(value)
        return {i: (found[i]["key"], found[i]["value"]) for i in sorted(found) if {"key", "value"} <= set(found[i])}

    def greedy(self, prompt: list[int], max_new_tokens: int, eos: set[int] | None = None) -> tuple[list[int],
                                                                                                   float, list[float]]:
        return greedy(self, prompt, max_new_tokens, eos)


def _host(value: Any) -> np.ndarray:
    """An array on the host: an ONNX Runtime value copied out, a numpy array as it is."""
    return np.array(value.numpy() if hasattr(value, "numpy") else value)


def runs_for(target: Any, provider: str) -> ExporterFolder | DecoderFileRuns:
    """How a folder another tool wrote runs: transformers' exporter's by its own runner, a tool's one decoder file
    (onnxruntime-genai's builder's, Optimum's, transformers.js's; or a decoder file given alone) by onnx-nb's step
    runner, in ONNX Runtime on ``provider`` or (``provider`` :data:`OPENVINO`) in the OpenVINO runtime."""
    file = decoder_file(target) or (Path(target) if Path(target).is_file() else None)
    tool = folder_tool(target)
    if provider == OPENVINO:
        from ..generate.openvino_decoder import OpenVinoDecoder

        if file is None:
            raise InvalidArgumentError(f"{target}: the OpenVINO runtime runs a tool's one decoder file with its cache; "
                                       "this folder's graphs run in ONNX Runtime (through transformers' runner).")
        return DecoderFileRuns(file, provider, tool, OpenVinoDecoder(file))
    return DecoderFileRuns(file, provider, tool) if file is not None else open_folder(target, provider)


OPENVINO = "openvino-runtime"  # the OpenVINO runtime, asked for among the providers


def torch_reference(reference: Any) -> Any:
    """The PyTorch causal LM a folder is checked against: the model given, or loaded from its folder or hub id."""
    if isinstance(reference, torch.nn.Module):
        return reference.eval()
    if isinstance(reference, (str, Path)):
        import transformers

        return transformers.AutoModelForCausalLM.from_pretrained(str(reference)).eval()
    raise InvalidArgumentError(
        f"check_parity(reference, folder) takes the PyTorch model the folder was exported from (a transformers model, "
        f"its folder or its hub id), not a {type(reference).__name__}.")


def _layer_rows(mine: dict[int, tuple[np.ndarray, np.ndarray]], theirs: dict[int, tuple[Any, Any]], when: str,
                provider: str, tol: Any, rows: list[Any]) -> int | None:
    """A row per layer for its keys and values against PyTorch's cache, matched by layer index (a layer only one side
    holds is a failed row); the first layer that fails, if one does."""
    from ...results.parity import Row
    from ...results.tolerance import measure

    first_bad = None
    for i in sorted(set(mine) | set(theirs)):
        if i not in mine or i not in theirs:
            rows.append(Row(f"layer {i} keys", when, provider, "shape-mismatch",
                            note="no keys and values in the file's cache" if i not in mine else
                            "the reference's cache holds no keys and values for it"))
            first_bad = i if first_bad is None else first_bad
            continue
        for what, got, ref in zip(("keys", "values"), mine[i], theirs[i]):
            ref = ref if isinstance(ref, np.ndarray) else ref.float().numpy()  # another runtime's, or PyTorch's
            if got.shape != ref.shape:
                rows.append(Row(f"layer {i} {what}", when, provider, "shape-mismatch",
                                note=f"{tuple(got.shape)} against the reference's {tuple(ref.shape)}"))
                first_bad = i if first_bad is None else first_bad
                continue
            stats, errors = measure(got, ref, what)
            verdict = errors.judge(tol)
            rows.append(Row(f"layer {i} {what}", when, provider, verdict["status"], tolerance=tol,
                            max_abs=stats["max_abs"], max_rel=stats["max_rel"], mean_abs=stats["mean_abs"],
                            frac_out=verdict["frac_out"], cosine=stats["cosine"], needed_atol=verdict["needed_atol"],
                            note=verdict["note"], errors=errors))
            if verdict["status"] == "fail" and first_bad is None:
                first_bad = i
    return first_bad


def folder_parity(reference: Any, folder: Any, *, prompts: list[list[int]] | None = None, max_new_tokens: int = 8,
                  providers: Any = ("cpu",), atol: float | None = None, rtol: float | None = None,
                  tolerances: Any = None, progress: bool = True) -> Any:
    """The folder's generation checked against ``reference`` (see the module); a :class:`ParityReport` whose rows
    are per step (``logits``), per layer (``layer i keys`` / ``values``) and per prompt (``tokens``)."""
    from ...progress import Steps
    from ...results.parity import Row
    from ...results.tolerance import precision_of, tolerance_for
    from ...runtime.cpu import this_cpu
    from ...runtime.onnxfile import load_proto
    model = torch_reference(reference)
    prompts = prompts or default_prompts(model)
    pad = getattr(model.config, "pad_token_id", None) or 0
    rows: list[Row] = []
    live = _runtimes(providers, rows)
    checks: list[Any] = []
    bad_layers: dict[str, list[str]] = {}
    precision = "fp32"
    runs: Runs | None = None
    seen: dict[str, Seen] = {}  # each runtime's tokens, caches and logits, compared after
    with Steps(1 + len(live), "folder parity", progress) as bar:
        bar.step("PyTorch greedy generate()")
        reference_tokens = torch_greedy(model, prompts, max_new_tokens, pad)
        for short, name in live:
            bar.step(f"{Path(folder).name} on {short}")
            try:
                runs = runs_for(folder, name)
                precision = precision_of(load_proto(list(runs.files.values())[-1]))
                tol = tolerance_for(precision, "logits", atol, rtol, tolerances)
                steps, ends = _forced(model, runs, prompts, reference_tokens)
                generated = [runs.greedy(prompt, max_new_tokens)[0] for prompt in prompts]
            except InvalidArgumentError:
                raise
            except Exception as exc:  # noqa: BLE001 - ONNX Runtime's failure is a row, not a crash
                rows.append(Row("*", "generation", short, "error", note=f"{type(exc).__name__}: {first_line(exc)}"))
                continue
            level = 0.0
            for step, pairs in enumerate(steps):
                got, ref = np.concatenate([g for g, _ in pairs]), np.concatenate([r for _, r in pairs])
                level = max(level, _logits_row(got, ref, "prefill" if step == 0 else f"decode step {step}", short,
                                               tol, rows))
            for when, (mine, theirs) in ends.items():
                bad = _layer_rows(mine, theirs, when, short, tolerance_for(precision, "cache", atol, rtol,
                                                                           tolerances), rows)
                if bad is not None:
                    bad_layers.setdefault(short, []).append(f"layer {bad} ({when})")
            for i, (prompt, mine) in enumerate(zip(prompts, generated)):
                theirs = reference_tokens[i]
                check = compare_tokens(lambda prefix, prompt=prompt: _logits_at(model, prompt, prefix), mine, theirs,
                                       i, level)
                checks.append(check)
                note = (f"{len(mine)} greedy tokens identical to PyTorch" if check.first_difference is None else
                        f"first difference at step {check.first_difference}: ONNX {mine[check.first_difference]}, "
                        f"PyTorch {theirs[check.first_difference]}; PyTorch's margin {check.gap:.3g} "
                        f"({'a near-tie' if check.near_tie else 'a real divergence'})")
                rows.append(Row("tokens", f"prompt {i} ({len(prompt)} tokens)", short,
                                "fail" if check.verdict == "DIVERGED" else "pass", note=note))
            seen[short] = (generated, {when: mine for when, (mine, _) in ends.items()},
                           [np.concatenate([g for g, _ in pairs]) for pairs in steps], getattr(runs, "runtime", None))
        across = _across(seen, prompts, tolerance_for(precision, "logits", atol, rtol, tolerances),
                         tolerance_for(precision, "cache", atol, rtol, tolerances), rows)
    return _report(folder, model, runs, rows, checks, bad_layers, prompts, max_new_tokens,
                   precision, this_cpu().label, across)


def _runtimes(providers: Any, rows: list[Any]) -> list[tuple[str, str]]:
    """``(label, name)`` of each runtime asked for that runs here: ONNX Runtime's providers, and the OpenVINO runtime
    (``"openvino-runtime"``); a row for each that does not."""
    from ...results.parity import Row
    from ...runtime.providers import openvino_apart, providers_named

    others, openvino = (providers, False) if providers == "available" else openvino_apart(providers)
    wanted = providers_named(others) if others else []
    rows += [Row("*", "*", p.short, "unavailable", note=p.reason) for p in wanted if not p.available]
    live = [(p.short, p.name) for p in wanted if p.available]
    if openvino:
        try:
            import openvino as _  # noqa: F401
            live.append((OPENVINO, OPENVINO))
        except ImportError:
            rows.append(Row("*", "*", OPENVINO, "unavailable", note="the OpenVINO runtime: pip install openvino"))
    return live


def _logits_row(got: np.ndarray, ref: np.ndarray, when: str, provider: str, tol: Any, rows: list[Any]) -> float:
    """A row for one step's logits against the reference's; the largest difference."""
    from ...results.parity import Row
    from ...results.tolerance import measure

    stats, errors = measure(got, ref, "logits")
    verdict = errors.judge(tol)
    rows.append(Row("logits", when, provider, verdict["status"], tolerance=tol, max_abs=stats["max_abs"],
                    max_rel=stats["max_rel"], mean_abs=stats["mean_abs"], frac_out=verdict["frac_out"],
                    cosine=stats["cosine"], argmax_agreement=stats["argmax_agreement"],
                    needed_atol=verdict["needed_atol"], note=verdict["note"], errors=errors))
    return float(stats["max_abs"] or 0.0)


Seen = tuple[list[list[int]], dict[str, Any], list[np.ndarray], str | None]  # a runtime's tokens, caches, logits, name


def _across(seen: dict[str, Seen], prompts: list[list[int]],
            logits_tol: Any, cache_tol: Any, rows: list[Any]) -> list[str]:
    """The same file on two runtimes, each later one against the first, with no PyTorch between them: per prompt its
    tokens (the first step they part), per step the logits both gave under the same teacher-forced tokens, per layer
    the keys and values after the prefill and after the last step (rows whose provider reads ``B vs A``); a note
    per pair."""
    from ...results.parity import Row

    if len(seen) < 2:
        return []
    first, *others = seen
    notes = []
    for other in others:
        pair = f"{other} vs {first}"
        (tokens_a, ends_a, steps_a, _), (tokens_b, ends_b, steps_b, runtime) = seen[first], seen[other]
        same = 0
        for i, (a, b) in enumerate(zip(tokens_a, tokens_b)):
            part = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
            same += part is None
            rows.append(Row("tokens", f"prompt {i} ({len(prompts[i])} tokens)", pair,
                            "pass" if part is None else "fail",
                            note=f"{len(a)} greedy tokens identical on both runtimes" if part is None else
                            f"first difference at step {part}: {other} {b[part]}, {first} {a[part]}"))
        largest = max((_logits_row(b, a, "prefill" if k == 0 else f"decode step {k}", pair, logits_tol, rows)
                       for k, (a, b) in enumerate(zip(steps_a, steps_b))), default=0.0)
        bad = [f"layer {layer} ({when})" for when in ends_a if when in ends_b
               for layer in [_layer_rows(ends_b[when], ends_a[when], when, pair, cache_tol, rows)] if layer is not None]
        named = f"{other} ({runtime})" if runtime else other
        notes.append(f"{named} against {first}, the same file on two runtimes: tokens identical for {same} of "
                     f"{len(tokens_a)} prompts; logits differ by at most {largest:.3g}; "
                     + (f"keys and values part first at {'; '.join(bad)}." if bad else
                        "every layer's keys and values within tolerance."))
    return notes


Runs = ExporterFolder | DecoderFileRuns  # a folder another tool wrote, as a step runner


def _forced(model: Any, runs: Runs, prompts: list[list[int]], continuations: list[list[int]]) -> tuple[
        list[list[tuple[np.ndarray, np.ndarray]]], dict[str, Any]]:
    """Per step, each prompt's (file's logits, PyTorch's) with both fed PyTorch's tokens; and the first prompt's
    caches on both sides after the prefill and after the last step (the file's by layer, PyTorch's cache)."""
    steps: list[list[tuple[np.ndarray, np.ndarray]]] = []
    ends: dict[str, Any] = {}
    for index, (prompt, cont) in enumerate(zip(prompts, continuations)):
        ids = torch.tensor([prompt])
        with torch.no_grad():  # fed as generate() feeds it: a mask of ones over every token so far
            ref = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, return_dict=True)
        logits, cache = runs.prefill(ids.numpy())
        past = cache_of(ref)
        pairs = [(logits[:, -1], ref.logits[:, -1].float().numpy())]
        if index == 0:  # keys and values by layer where both sides hold them (other states: judged by the logits)
            _keep(ends, "after the prefill", runs.by_layer(cache), _snapshot(past))
        for step, token in enumerate(cont[:-1]):
            nxt = torch.tensor([[token]])
            position = torch.tensor([[len(prompt) + step]])
            with torch.no_grad():
                ref = model(input_ids=nxt, attention_mask=torch.ones(1, len(prompt) + step + 1, dtype=torch.long),
                            position_ids=position, **cache_kwargs(model, past), use_cache=True, return_dict=True)
            past = cache_of(ref)
            logits, cache = runs.decode(nxt.numpy(), cache, len(prompt) + step)
            pairs.append((logits[:, -1], ref.logits[:, -1].float().numpy()))
        if index == 0 and len(cont) > 1:
            _keep(ends, f"after {len(cont) - 1} decode steps", runs.by_layer(cache), _snapshot(past))
        for step, pair in enumerate(pairs):
            if step == len(steps):
                steps.append([])
            steps[step].append(pair)
    return steps, ends


def _keep(ends: dict[str, Any], when: str, mine: dict[int, Any], theirs: dict[int, Any]) -> None:
    if mine and theirs:
        ends[when] = (mine, theirs)


def _snapshot(cache: Any) -> dict[int, tuple[Any, Any]]:
    """PyTorch's cache's keys and values by layer as they are now (a DynamicCache grows in place); layers holding
    other states (linear attention, a convolution's) are left to the logits."""
    layers = getattr(cache, "layers", None) or []
    return {i: (layer.keys.clone(), layer.values.clone()) for i, layer in enumerate(layers)
            if isinstance(getattr(layer, "keys", None), torch.Tensor) and layer.keys.numel()}


def _logits_at(model: Any, prompt: list[int], prefix: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([prompt + prefix])).logits[0, -1].float()


def _report(folder: Any, model: Any, runs: Runs | None, rows: list[Any], checks: list[Any],
            bad_layers: dict[str, list[str]], prompts: list[list[int]], max_new_tokens: int, precision: str,
            cpu: str, across: list[str]) -> Any:
    from ...render import human_bytes
    from ...results.parity import ParityReport

    identical = sum(c.first_difference is None for c in checks)
    notes = [f"Generation parity of {Path(folder).name}, written by {runs.tool if runs else folder_tool(folder)}"
             + (f" ({', '.join(f'{k} {v}' for k, v in runs.versions.items())})" if runs and runs.versions else "")
             + f": {len(prompts)} prompts, one at a time, {max_new_tokens} greedy tokens each against PyTorch "
             f"generate(): {identical} of {len(checks)} identical."]
    if runs is not None:
        sizes = ", ".join(f"{runs.files[k].name} {human_bytes(v)}" for k, v in runs.weight_bytes.items())
        graphs = "Two graphs, each with its own copy of the weights" if len(runs.files) > 1 else \
            "One graph for the prompt and every step"
        notes.append(f"{graphs}: {sizes}; "
                     + ("an attention mask: padded batches run." if runs.takes_mask else
                        "no attention mask: a padded batch cannot run (prompts one at a time here)."))
    for provider, where in bad_layers.items():
        notes.append(f"First layer off on {provider}: {'; '.join(where)} (the layers before it match PyTorch).")
    notes += across
    return ParityReport(model=Path(folder).name, reference=f"PyTorch {type(model).__name__} (generate, with cache)",
                        precision=precision, rows=rows, shapes={}, notes=notes, generation=checks, cpu=cpu)
