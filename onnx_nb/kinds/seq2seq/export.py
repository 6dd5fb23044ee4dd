"""An encoder-decoder for generation, as two files written together: ``<name>.encoder.onnx`` (encoder states and the
cross-attention cache, computed once) beside the decoder file (its self-attention cache in and out). The encoder is
a named part of the result (``result.parts["encoder"]``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...progress import Steps
from ...results.export import ExportCheck, ExportResult, ModelSource
from ...runtime.files import check_space
from ...steps.export.machinery.torch_route import UPSTREAM, make_result, run_exporter, unverified_of


def export_seq2seq(adapter: Any, source: ModelSource, sample: Any, target: Path, opset: int,
                   steps: Steps) -> ExportResult:
    """An encoder-decoder for generation: ``<name>.encoder.onnx`` (encoder states and the cross-attention
    cache, computed once) beside the decoder file at ``target`` (self-attention cache in and out)."""
    from ...steps.export.caches import seq2seq as seq2seq_cache
    from ...steps.export.machinery.attempts import first_that_passes
    from ...steps.export.machinery.torch_exporters import first_line as exporter_error
    from ...steps.export.machinery.wrap import eval_mode
    from ...steps.export.patches import upstream
    from ...steps.export.patches.attention import eager_attention

    s = adapter.sample(source, sample, True)
    warnings_seen: list[str] = list(source.load_warnings)
    branches: list[Any] = []
    steps.add(1)

    def write(name: str, staged: Path) -> Any:  # both files into the staging folder, each checked at other shapes
        branches.clear()  # the traced branches of the files published only (TorchScript's are not dynamo's)
        return export_seq2seq_parts(source.model, s, target, opset, staged.parent, warnings_seen, branches, name)

    def check(_name: str, _staged: Path, written: Any) -> ExportCheck:  # the two files' checks as one
        checks = written[1]
        return ExportCheck(all(c["passed"] for c in checks.values()),
                           "; ".join(f"{k}: {c.get('error') or c['summary']}" for k, c in checks.items()),
                           checks["decoder"].get("shapes", {}),
                           max_abs_diff=max(c.get("max_abs_diff", float("inf")) for c in checks.values()),
                           route="parts", figures={"parts": {k: dict(c) for k, c in checks.items()}})

    # eager attention: SDPA's trace adds NaN guards and shape arithmetic per layer (a Marian-base decoder step:
    # 1230 nodes, 14.0 ms; eager: 924 nodes, 13.1 ms on 2 cores)
    with eval_mode(source.model), eager_attention(source.model):
        check_space(target.parent, sum(p.numel() * p.element_size() for p in source.model.parameters()) * 2)
        # TorchScript first: the files it writes are known good; dynamo when it cannot write them (Moonshine's
        # rotary: a Concat of unknown rank) or its files fail their check (a trace fixes data-dependent routing:
        # Switch's and NLLB-MoE's experts), under transformers' own patch set first where it registers patches
        # for one of this model's classes (NLLB-MoE's router; an encoder-decoder runs every class it holds, so
        # its classes are not watched as the single-file route's are); when every one fails its check, the last
        # written are published with theirs said, as every route's loop does
        order = ["torchscript", "dynamo"]
        if upstream.registered_for(source.model):
            order.insert(1, UPSTREAM)
        done = first_that_passes(order, target, write, check, steps, describe=exporter_error,
                                 verb="exporting the encoder and the decoder with", against="PyTorch")
        if not done.name and "torchscript" not in done.errors:  # dynamo could not write them either: TorchScript's
            tried = {k: v for k, v in done.attempts.items() if k != "torchscript"}  # files are published, their
            seconds = done.seconds                                                 # failed check said
            steps.add(2)
            done = first_that_passes(["torchscript"], target, write, check, steps,
                                     verb="exporting the encoder and the decoder again with", against="PyTorch")
            done.attempts, done.seconds = {**tried, **done.attempts}, done.seconds + seconds
    if not done.name:
        raise done.errors["torchscript"]
    layout, _, dec_sample, patched = done.written
    source.cache_layout = layout
    source.sample = dec_sample
    source.input_axes = {n: a for n, a in seq2seq_cache.axes(layout)[1].items() if n in dec_sample}
    source.as_kwargs = False
    attempts = done.attempts if done.name != "torchscript" or "dynamo" in done.attempts else {
        "dynamo": "not tried: TorchScript's files matched PyTorch; dynamo (under transformers' patch set first, "
                  "where it registers patches for this model) is the fallback for an encoder-decoder with its caches "
                  "when TorchScript cannot write them or they fail their check"}
    result = make_result(target, done.files, "dynamo" if done.name == UPSTREAM else done.name, attempts,
                         done.seconds, warnings_seen, source, done.check, s, [], True, unverified_of(branches, {}))
    result.patches = patched
    from ...steps.export.caches.seq2seq import encoder_path

    result.parts = {"encoder": encoder_path(target)}  # the decoder is the result's own file
    return result

def export_seq2seq_parts(model: Any, sample: Any, target: Path, opset: int, staged_dir: Path,
                         warnings: list[str], branches: list[Any], exporter: str = "torchscript"
                         ) -> tuple[Any, dict[str, Any], dict[str, Any], dict[str, list[str]]]:
    """Export the encoder file and the decoder file into ``staged_dir`` (named after ``target``), and check
    both in ONNX Runtime at other shapes. Returns the layout, the checks, the decoder's sample and, per patch lent
    while tracing either file, what it replaced."""
    import torch

    from ...steps.export.caches.seq2seq import (
        SUFFIX,
        DecoderWithCaches,
        EncoderWithCross,
        axes,
        decoder_names,
        decoder_sample,
        encoder_inputs,
        layout_of,
        step_tokens,
    )
    from ...steps.export.machinery.inputs import Sample, grow
    from ...steps.export.machinery.torch_exporters import check_file
    from ...steps.export.machinery.wrap import FlatModule, signature_module

    names = encoder_inputs(model)
    given = dict(sample.as_dict())
    enc_sample = {n: given[n] for n in names}
    layout = layout_of(model, enc_sample)
    enc_axes, dec_axes = axes(layout)
    grown = grow(Sample(list(names), [enc_sample[n] for n in names], False, {n: dict(enc_axes[n]) for n in names}))
    grown_sample = dict(zip(grown.names, grown.tensors))
    tokens = step_tokens(model, layout, enc_sample)
    parts = [(EncoderWithCross(model, names), list(names), enc_sample, grown_sample, enc_axes,
              target.stem + SUFFIX),
             (DecoderWithCaches(model, layout), decoder_names(layout),
              decoder_sample(model, layout, enc_sample, length=tokens),
              decoder_sample(model, layout, grown_sample, past=4, length=min(tokens, 2), seed=1), dec_axes,
              target.name)]
    checks: dict[str, Any] = {}
    patched: dict[str, list[str]] = {}
    for module, in_names, feed, other, spec, filename in parts:
        flat = FlatModule(module, in_names, False, {})
        tensors = [feed[n] for n in in_names]
        flat.discover(tensors)
        smp = Sample(list(in_names), tensors, False, {n: spec[n] for n in in_names if n in spec})
        all_axes = {**smp.axes, **{o: spec[o] for o in flat.output_names if o in spec}}
        staged = staged_dir / filename
        for patch, replaced in run_exporter(exporter, signature_module(flat), smp, flat, staged, all_axes, opset,
                                            False, warnings, [], branches).items():
            patched.setdefault(patch, []).extend(r for r in replaced if r not in patched.get(patch, []))
        probe = Sample(list(in_names), [other[n] for n in in_names], False, dict(smp.axes))
        with torch.no_grad():
            expected = flat.reference(*probe.tensors)
        checks["encoder" if filename.endswith(SUFFIX) else "decoder"] = check_file(staged, probe, expected,
                                                                                    flat.output_names)
    return layout, checks, parts[1][2], patched
