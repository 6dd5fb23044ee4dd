"""Generation parity: a model exported with its cache (a decoder, or an encoder-decoder's two files) against
PyTorch, by generating: per-step logits under teacher forcing and greedy tokens against ``generate()``, each
first difference told apart as a near-tie or a real divergence. Only imported by functions that already need
torch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...errors import InsufficientMemoryError
from ...results.tolerance import NEAR_TIE
from ...runtime.cpu import file_notes, this_cpu
from ..export.caches.hf_names import cache_kwargs, cache_of
from ..generate.generation import generate
from ..generate.runners import OnnxDecoder, decoder_for, left_pad
from .answers import answer, family_key
from .probes import default_prompts, plain

BEAMS = 4  # beam search's check: this many beams, each kept beam's tokens against PyTorch's


@dataclass
class TokenCheck:
    """Greedy tokens of ONNX against PyTorch ``generate(do_sample=False)`` for one prompt."""

    prompt: int
    onnx: list[int]
    torch: list[int]
    first_difference: int | None  # step where they differ, None if identical
    near_tie: bool  # PyTorch's margin between the two picks was within tolerance: a tie, not a divergence
    gap: float | None  # that margin (PyTorch's logit of its pick minus that of ONNX's pick)
    kind: str = "greedy"  # or "beam k": the k-th kept beam of a beam search

    @property
    def verdict(self) -> str:
        if self.first_difference is None:
            return "identical"
        return "near-tie" if self.near_tie else "DIVERGED"


def torch_greedy(model: Any, prompts: list[list[int]], max_new_tokens: int, pad: int) -> list[list[int]]:
    out = []
    for p in prompts:  # one prompt at a time: PyTorch's own reference, with no padding in play
        with torch.no_grad():
            ids = torch.tensor([p])
            full = model.generate(ids, attention_mask=torch.ones_like(ids),
                                  **plain(len(p) + max_new_tokens, pad))
        out.append([int(t) for t in full[0, len(p):]])
    return out


def teacher_forced(model: Any, decoder: OnnxDecoder, prompts: list[list[int]], continuations: list[list[int]],
                   pad: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """``(step, onnx logits, torch logits)`` for the batch fed the same tokens step by step (left-padded,
    cache kept on both sides): step 0 is the prefill, later steps decode one token each."""
    ids, mask = left_pad(prompts, pad)
    steps = min(len(c) for c in continuations)
    cache = decoder.empty_cache(len(prompts), capacity=ids.shape[1] + steps + 1)
    t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)
    past = None
    out = []
    step_ids, step_mask = ids, mask
    for step in range(steps + 1):
        logits, cache = decoder.step(step_ids, step_mask, cache)
        positions = (t_mask.cumsum(1) - 1).clamp(min=0)[:, -t_ids.shape[1]:]
        # a model whose layers keep only states (Mamba) masks its new tokens' rows, never the past: its own
        # generate() drops the mask after the prefill, as the file's wrapper does (state_cache)
        seen = t_mask[:, -t_ids.shape[1]:] if decoder.states and not decoder.empty else t_mask
        with torch.no_grad():
            ref = model(input_ids=t_ids, attention_mask=seen, position_ids=positions, **cache_kwargs(model, past),
                        use_cache=True, return_dict=True)
            if past is None and cache_of(ref) is None:  # an encoder as a decoder: fills the cache generate() hands it
                from transformers import DynamicCache

                past = DynamicCache(config=model.config)
                ref = model(input_ids=t_ids, attention_mask=seen, position_ids=positions,
                            **cache_kwargs(model, past), use_cache=True, return_dict=True)
        filled = cache_of(ref)
        past = filled if filled is not None else past  # XLM-RoBERTa-XL fills the cache it is handed, returns none
        out.append((step, logits[:, -1, :], ref.logits[:, -1, :].float().numpy()))
        if step == steps:
            break
        nxt = np.array([[c[step]] for c in continuations], np.int64)
        step_mask = np.concatenate([step_mask, np.ones((len(prompts), 1), np.int64)], axis=1)
        step_ids = nxt
        t_ids, t_mask = torch.from_numpy(nxt), torch.from_numpy(step_mask)
    return out


class DecoderOnly:
    """Generation parity's inputs and runs for a decoder-only model (prompts batched with left padding)."""

    def __init__(self, model: Any, path: Path, prompts: list[list[int]] | None, max_new_tokens: int) -> None:
        self.model, self.path, self.new = model, path, max_new_tokens
        self.prompts = prompts or default_prompts(model)
        self.pad = getattr(model.config, "pad_token_id", None) or 0
        self.labels = [f"prompt {i} ({len(p)} tokens)" for i, p in enumerate(self.prompts)]
        self.first_step = "prefill (left-padded batch)"
        self.describe = (f"{len(self.prompts)} prompts of {', '.join(str(len(p)) for p in self.prompts)} tokens, "
                         "batched with left padding for the teacher-forced logits")

    def files(self) -> Any:
        """What :func:`onnx_nb.to_transformers` takes for these runs' files (beam search over them)."""
        return self.path

    @classmethod
    def of_export(cls, export: Any, model: Any, path: Path, prompts: list[list[int]] | None,
                  max_new_tokens: int) -> DecoderOnly:
        """The runs of ``path`` (the export's file or a variant's) against ``model``: the shape's parity answer."""
        return cls(model, path, prompts, max_new_tokens)

    def reference(self) -> list[list[int]]:
        return torch_greedy(self.model, self.prompts, self.new, self.pad)

    def forced(self, provider: str, reference: list[list[int]]) -> list[tuple[int, np.ndarray, np.ndarray]]:
        return teacher_forced(self.model, decoder_for(self.path, provider), self.prompts, reference, self.pad)

    def generated(self, provider: str) -> list[list[int]]:
        return generate(self.path, self.prompts, max_new_tokens=self.new, eos_token_id=-1, pad_token_id=self.pad,
                        provider=provider).tokens

    def logits_at(self, index: int, prefix: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return self.model(input_ids=torch.tensor([self.prompts[index] + prefix])).logits[0, -1].float()

    def feeds(self) -> list[tuple[dict[str, torch.Tensor], int]]:
        """Each input as ``generate()`` takes it, and the length of what comes before the new tokens."""
        return [({"input_ids": torch.tensor([p]), "attention_mask": torch.ones(1, len(p), dtype=torch.long)}, len(p))
                for p in self.prompts]

    def log_probs(self, index: int, tokens: list[int]) -> float:
        """PyTorch's log-probability of ``tokens`` after input ``index`` (teacher-forced)."""
        prompt = self.prompts[index]
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([prompt + tokens[:-1]])).logits[0, len(prompt) - 1:].float()
        return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None]).sum())


def generation_parity(export: Any, path: Any = None, *, prompts: list[list[int]] | None = None,
                      max_new_tokens: int = 8, providers: Any = ("cpu",), progress: bool = True) -> Any:
    """Generation parity of a model exported with its cache (a decoder, or an encoder-decoder's two files):
    per-step logits under teacher forcing (a batch of inputs of different lengths) and greedy tokens against
    PyTorch's ``generate``, each first difference told apart as a near-tie or a real divergence. ``path``: the
    file to check (a variant of the export; the export's own file by default). Returns a ParityReport whose rows
    are per step (``logits``) and per prompt (``tokens``)."""
    from ...errors import first_line
    from ...progress import Steps
    from ...results.parity import ParityReport, Row
    from ...results.tolerance import measure, precision_of, tolerance_for
    from ...runtime.onnxfile import load_proto
    from ...runtime.providers import providers_named
    from ..export.adapters.registry import adapter_of, shape_of

    model = adapter_of(export).reload(export.source, "generation parity").model
    path = Path(path if path is not None else export.path)
    precision = precision_of(load_proto(path))
    family = shape_of(export, path).answer("parity")(export, model, path, prompts, max_new_tokens)
    rows: list[Row] = []
    checks: list[TokenCheck] = []
    wanted = providers_named(providers)
    live = [p for p in wanted if p.available]
    rows += [Row("*", "*", p.short, "unavailable", note=p.reason) for p in wanted if not p.available]
    tol = tolerance_for(precision, "logits", None, None, None)
    with Steps(1 + 3 * len(live), "generation parity", progress) as bar:
        bar.step("PyTorch greedy generate()")
        asked = family_key(family)
        reference = answer(family.model, (*asked, "greedy"), family.reference)
        for p in live:
            bar.step(f"teacher-forced logits on {p.short}")
            try:
                forced = family.forced(p.name, reference)
                generated = family.generated(p.short)
            except InsufficientMemoryError:
                raise  # refused before the session was made: the step cannot run here at all
            except Exception as exc:  # noqa: BLE001 - ONNX Runtime's failure is a row, not a crash
                rows.append(Row("*", "generation", p.short, "error", note=f"{type(exc).__name__}: {first_line(exc)}"))
                continue
            # the logits' error under teacher forcing: what a first difference's margin is weighed against, when that
            # error is one the precision allows (a file failing its logits explains nothing away)
            level, failed = 0.0, False
            for step, got, ref in forced:
                stats, errors = measure(got, ref, "logits")
                level = max(level, float(stats["max_abs"] or 0.0))
                verdict = errors.judge(tol)
                failed = failed or verdict["status"] == "fail"
                tag = family.first_step if step == 0 else f"decode step {step}"
                rows.append(Row("logits", tag, p.short, verdict["status"], tolerance=tol, max_abs=stats["max_abs"],
                                max_rel=stats["max_rel"], mean_abs=stats["mean_abs"], frac_out=verdict["frac_out"],
                                cosine=stats["cosine"], argmax_agreement=stats["argmax_agreement"],
                                needed_atol=verdict["needed_atol"], note=verdict["note"], errors=errors))
            if failed:
                level = 0.0
            bar.step(f"greedy tokens and {BEAMS} beams on {p.short}")
            for i, (mine, theirs) in enumerate(zip(generated, reference)):
                check = compare_tokens(lambda prefix, i=i: family.logits_at(i, prefix), mine, theirs, i, level)
                checks.append(check)
                status = "fail" if check.verdict == "DIVERGED" else "pass"
                note = (f"{len(mine)} greedy tokens identical to PyTorch" if check.first_difference is None else
                        f"first difference at step {check.first_difference}: ONNX {mine[check.first_difference]}, "
                        f"PyTorch {theirs[check.first_difference]}; PyTorch's margin {check.gap:.3g} "
                        f"({'a near-tie: both picks are right' if check.near_tie else 'a real divergence'}"
                        f"{f'; the logits error elsewhere {level:.3g}' if level else ''})")
                rows.append(Row("tokens", family.labels[i], p.short, status, note=note))
            beams = _beam_checks(family, export, path, p.short, level) if getattr(family, "beams", True) else []
            checks += beams
            for check in beams:
                rows.append(Row("tokens", f"{family.labels[check.prompt]}, {check.kind}", p.short,
                                "fail" if check.verdict == "DIVERGED" else "pass", note=_beam_note(check)))
    identical = sum(c.first_difference is None for c in checks)
    ties = sum(c.verdict == "near-tie" for c in checks)
    beam_text = (f", and the {BEAMS} kept beams of a {BEAMS}-beam search (transformers' own, over the files: "
                 "onnx_nb.to_transformers)") if getattr(family, "beams", True) else ""
    notes = [f"Generation parity: {family.describe}; {max_new_tokens} greedy tokens each{beam_text}, against "
             f"PyTorch generate(): {identical} identical, {ties} near-tie(s), "
             f"{len(checks) - identical - ties} divergence(s). A near-tie is a first difference where PyTorch's "
             f"logits for the two picks were within {NEAR_TIE:g} of the logits' scale, or within twice the logits' "
             "error measured under teacher forcing (random weights make them common); for a beam, where PyTorch scores "
             "ONNX's beam within that error of its own (summed log-probabilities)."]
    report = ParityReport(model=path.name, reference=f"PyTorch {export.source.name} (generate, with cache)",
                          precision=precision, rows=rows, shapes={}, notes=notes,
                          unverified=list(getattr(export, "unverified", []) or []), generation=checks,
                          cpu=this_cpu().label)
    from ...runtime.onnxfile import load_proto

    report.notes += file_notes(load_proto(path))
    return report


def compare_tokens(logits_at: Any, mine: list[int], theirs: list[int], index: int, level: float = 0.0) -> TokenCheck:
    """``logits_at(prefix)``: PyTorch's next-token logits after the prompt and ``prefix`` of generated tokens.
    ``level``: the largest logits error measured under teacher forcing; as in
    :func:`~onnx_nb.results.tolerance.rank_check`, a first difference whose margin is within twice that error (or
    within ``NEAR_TIE`` of the logits' scale) is a near-tie the file's precision explains, not a divergence."""
    diff = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
    if diff is None:
        return TokenCheck(index, mine, theirs, None, False, None)
    logits = logits_at(theirs[:diff])
    # PyTorch's own margin between its pick and the one ONNX made: tiny means both picks are right
    gap = float(logits[theirs[diff]] - logits[mine[diff]])
    scale = float(logits.abs().max()) or 1.0
    return TokenCheck(index, mine, theirs, diff, gap <= max(NEAR_TIE * scale, 2 * level), gap)


def _beam_checks(family: Any, export: Any, path: Path, provider: str, level: float) -> list[TokenCheck]:
    """The kept beams of a :data:`BEAMS`-beam search over the files (transformers' beam search on
    :func:`onnx_nb.to_transformers`) against PyTorch's, per input; a differing beam is a near-tie when PyTorch
    scores it within the logits' error of its own beam (summed log-probabilities, twice the error per token)."""
    from transformers import GenerationMixin

    from ..generate.transformers_api import to_transformers

    wrapped = to_transformers(family.files(), provider=provider, config=family.model.config)
    checks = []
    asked = family_key(family)

    def log_probs(index: int, tokens: list[int]) -> float:
        return answer(family.model, (*asked, "log_probs", index, tuple(tokens)),
                      lambda: family.log_probs(index, tokens))

    def beams(model: Any, feed: dict[str, Any], settings: dict[str, Any]) -> list[list[int]]:
        with torch.no_grad():  # GenerationMixin's own: Whisper's generate() adds its task tokens
            return GenerationMixin.generate(model, **feed, **settings).tolist()

    for index, (feed, before) in enumerate(family.feeds()):
        settings = plain(before + family.new, family.pad, num_beams=BEAMS, num_return_sequences=BEAMS)
        want = answer(family.model, (*asked, "beams", index), functools.partial(beams, family.model, feed, settings))
        got = beams(wrapped, feed, settings)
        for beam, (mine, theirs) in enumerate(zip(got, want)):
            mine, theirs = mine[before:], theirs[before:]
            diff = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
            if diff is None:
                checks.append(TokenCheck(index, mine, theirs, None, False, None, kind=f"beam {beam + 1}"))
                continue
            gap = log_probs(index, theirs) - log_probs(index, mine)
            near = gap <= max(NEAR_TIE, 4 * level * len(mine))
            checks.append(TokenCheck(index, mine, theirs, diff, near, gap, kind=f"beam {beam + 1}"))
    return checks


def _beam_note(check: TokenCheck) -> str:
    if check.first_difference is None:
        return f"{check.kind} of {BEAMS}: {len(check.onnx)} tokens identical to PyTorch's"
    return (f"{check.kind} of {BEAMS}: first difference at step {check.first_difference}; PyTorch scores its own beam "
            f"{check.gap:.3g} above ONNX's ({'a near-tie' if check.near_tie else 'a real divergence'})")
