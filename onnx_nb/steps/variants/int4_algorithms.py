"""Which INT4 weight-only algorithm writes a file's MatMulNBits weights, chosen by measured error.

ONNX Runtime's ``matmul_nbits_quantizer`` ships several ways to pick each block's INT4 values and scale:

- ``"rtn"``: symmetric round-to-nearest per block of ``block_size`` (the quantizer's default; what onnx-nb wrote
  before this choice existed);
- ``"rtn_asym"``: round-to-nearest with each block's minimum and maximum at the ends of the range (a uint8 zero
  point per block: all 16 levels used), the lean route's default;
- ``"k_quant"``: a k-quant-style search of each block's scale and offset (asymmetric), the scheme of
  onnxruntime-genai's ``k_quant`` options;
- ``"hqq"``: half-quadratic quantization (asymmetric; each block's zero point and scale fitted to the weights by a
  few optimisation steps), no calibration data needed;
- ``"gptq"``: GPTQ (asymmetric; each column's rounding error pushed onto the columns not yet quantized, weighted by
  the layer's inputs on calibration data): data-aware, its calibration from :func:`calibration` (the samples given,
  sentences through the model's own tokenizer, or inputs generated from the sample);
- ``"awq"``: activation-aware scaling (:mod:`onnx_nb.steps.variants.int4_awq`: each layer's input channels scaled by
  their measured magnitude to the power searched per layer, the inverse scale a ``Mul`` before the layer), then
  round-to-nearest blocks: data-aware, the same calibration as GPTQ.

``quantize(method="int4", algorithm="auto")`` makes each (the file under ``BUILD_EVERY_BELOW`` of weights: one file
each to quantize and check; above it, RTN only, and the recipe says so), checks each against the fp32 parent on the
same inputs (a decoder's: generation parity, logits per step and greedy tokens), and keeps the one whose largest
error is smallest among those that pass. Every algorithm writes the same MatMulNBits kernel, so speed does not
tell them apart; the errors do. Given ``data=``, the task decides instead: each file that passes is measured by
:func:`onnx_nb.evaluate` on those examples (perplexity for a causal LM), and the best by that metric is kept. The
two need not agree: on a small LM trained on Python's documentation, HQQ had the smallest largest error and RTN the
lowest perplexity.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError, QuantizationError, first_line
from ...results.variant import Recipe
from .int8_schemes import BUILD_EVERY_BELOW, worst_error

ALGORITHMS = ("rtn", "rtn_asym", "k_quant", "hqq", "gptq", "awq")
DATA_AWARE = ("gptq", "awq")  # their calibration from calibration()
SENTENCES = (  # GPTQ's calibration text for a model with a tokenizer (general prose; no check or benchmark uses it)
    "The weather was lovely today, so we walked along the beach until sunset.",
    "Please send me the quarterly report before the meeting on Friday morning.",
    "Stock markets fell sharply after the central bank's announcement.",
    "He has played the violin in the city orchestra for twenty years.",
    "Where is the nearest train station, and how often do the trains run?",
    "The recipe needs two eggs, a cup of sugar and a pinch of salt.",
    "Our team shipped the new release last night after fixing the last bug.",
    "Birds migrate south when the days get shorter and the nights colder.",
    "The library will be closed on Monday for the national holiday.",
    "A good night's sleep improves memory, mood and concentration.",
    "The river flooded the lower fields after a week of heavy rain.",
    "Could you explain how the new billing system calculates the fees?",
    "Scientists observed a distant galaxy forming stars at a record rate.",
    "The children built a small wooden boat and sailed it on the pond.",
    "Install the package, restart the server and check the log for errors.",
    "Her first novel was translated into thirty languages within a year.",
)


def choose(method: str, algorithm: str, recipe: Recipe) -> list[str]:
    """The algorithms to make (the first is made first; ``[""]`` for a method that is not INT4)."""
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise InvalidArgumentError(f"algorithm={algorithm!r}: choose 'auto' or one of "
                                   f"{', '.join(map(repr, ALGORITHMS))} (INT4 weight-only).")
    if method != "int4":
        if algorithm != "auto":
            raise InvalidArgumentError(f"algorithm={algorithm!r} is for method='int4' (the INT4 weight-only "
                                       f"algorithm); method={method!r} has none.")
        return [""]
    if algorithm != "auto":
        recipe["int4_algorithm_rule"] = f"given (algorithm={algorithm!r})"
        return [algorithm]
    recipe["int4_algorithm_rule"] = ("auto: " + ", ".join(ALGORITHMS) + " each made and checked against the fp32 "
                                     "parent; the smallest largest-error that passes kept")
    return list(ALGORITHMS)


def refuse_big_data_aware(path: Path, algorithm: str) -> None:
    """GPTQ runs through ONNX Runtime's copy of Intel Neural Compressor, which holds the whole model in one protobuf
    message (2 GB at most); AWQ runs the model on calibration data in a session, which the quantizer's view of a big
    file (its weights left in their data file: :mod:`.by_reference`) cannot open. A file over 2 GB asking for either
    is refused before any work, with what to use instead."""
    from .ort_quantizer import is_big

    if algorithm in ("gptq", "awq") and is_big(path):
        raise InvalidArgumentError(
            f"algorithm={algorithm!r} on {path.name}: its weights are over 2 GB, and "
            + ("ONNX Runtime's GPTQ holds the whole model in one protobuf message (2 GB at most)"
               if algorithm == "gptq" else "AWQ runs the whole model on its calibration data")
            + ". Use algorithm='hqq', 'k_quant' or 'rtn_asym' (layer by layer, no calibration), or for a decoder "
            "checkpoint export(folder, precision='int4').")


def calibration(model: Any, given: Any) -> list[dict[str, Any]]:
    """GPTQ's calibration inputs for ``model``'s file: the samples given (a list of input dicts), else
    :data:`SENTENCES` through the export's tokenizer when the file takes only token inputs, else inputs generated
    from the export's sample (a decoder's cache inputs included)."""
    from ...runtime.onnxfile import load_proto, signature
    from .variants import generated_calibration, parent_of

    path, _ref, source = parent_of(model)
    names = [i.name for i in signature(load_proto(path))[0]]
    if given is not None and not isinstance(given, (str, Path)):
        return [{k: v for k, v in item.items() if k in names} for item in given]
    pre = getattr(source, "preprocessor", None)
    tokenizer = getattr(pre, "tokenizer", pre)
    if callable(tokenizer) and set(names) <= {"input_ids", "attention_mask", "token_type_ids"}:
        try:
            enc = tokenizer(list(SENTENCES), padding="max_length", max_length=24, truncation=True,
                            return_tensors="np")
            return [{n: enc[n][i:i + 1].astype("int64") for n in names} for i in range(len(SENTENCES))]
        except Exception:  # noqa: BLE001 - a tokenizer that cannot pad or lacks an input: generated inputs instead
            pass
    return generated_calibration(model)


def on_task(data: Any, metric: str) -> Callable[[dict[str, Any]], Any] | None:
    """Files (name -> variant) measured on ``data`` by :func:`onnx_nb.evaluate`: its Evaluation; None without
    data."""
    if data is None:
        return None

    def measured(made: dict[str, Any]) -> Any:
        from ..evaluate.scoring import scored

        return scored(made, data, metric, pytorch=False, progress=False)
    return measured


def by_task(evaluation: Any, passing: list[str], sizes: dict[str, int]) -> tuple[str | None, dict[str, float]]:
    """The best algorithm by the task's metric, except that a smaller file the examples cannot tell from it (their
    paired interval holds zero) is kept instead: a difference within the noise of the data is no reason for a bigger
    file, and did not hold on other text."""
    scored = {r.name: r.value for r in evaluation.rows if r.value is not None and r.name in passing}
    if not scored:
        return None, {}
    pick = max if evaluation.metric.higher_is_better else min
    top = pick(scored, key=lambda a: scored[a])
    tied = [a for a in scored if evaluation.tied(a, top)]
    return min(tied, key=lambda a: (sizes[a], a != top)), scored


def most_accurate(first: Any, algorithms: list[str], build: Callable[[str, Any, bool], Any], scratch: Path,
                  task: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """Every algorithm in ``algorithms`` made (``first``, the first, already at its place; the others in
    ``scratch``) and the one with the smallest largest error that passes parity kept (made again at ``first``'s
    place when it is not the first); with ``task`` (:func:`on_task`), the best by the task's metric among those that
    pass (:func:`by_task`). The errors (and the task's values) go into the recipe."""
    made = {algorithms[0]: first}
    if first.size_before > BUILD_EVERY_BELOW:  # quantizing a big file again costs minutes: RTN only
        first.recipe["int4_algorithm_rule"] += (f"; {', '.join(algorithms[1:])} not made: over "
                                                f"{BUILD_EVERY_BELOW >> 30} GiB of weights")
        return first
    failed: dict[str, str] = {}
    for algorithm in algorithms[1:]:
        try:
            made[algorithm] = build(algorithm, scratch / f"{algorithm}.onnx", True)
        except QuantizationError as exc:  # ONNX Runtime's implementation refuses this file: the others still run
            failed[algorithm] = first_line(exc).split("failed: ", 1)[-1][:160]
    errors = {a: worst_error(v) for a, v in made.items()}
    passing = [a for a, v in made.items() if v]
    best = min(passing, key=lambda a: errors[a]) if passing else algorithms[0]
    by_error, said = best, ""
    scored: dict[str, float] = {}
    if task is not None and passing:
        evaluation = task({a: made[a] for a in passing})
        chosen, scored = by_task(evaluation, passing, {a: made[a].size_after for a in passing})
        if chosen is not None:
            best = chosen
            said = (f"; by {evaluation.metric.name} on the data given: "
                    + ", ".join(f"{a} {v:.4g}" for a, v in scored.items())
                    + " (the smallest file among those the examples cannot tell from the best)"
                    + (f"; the smallest largest error was {by_error}'s" if by_error != best else ""))
    variant = made[best] if best == algorithms[0] else build(best, first.path, True)
    variant.recipe["int4_errors"] = {a: float(f"{e:.4g}") for a, e in errors.items()}
    if scored:
        variant.recipe["int4_task"] = {a: float(f"{v:.6g}") for a, v in scored.items()}
    variant.recipe["int4_algorithm_rule"] += "; " + ", ".join(
        [f"{a} largest error {errors[a]:.3g}{'' if made[a] else ' (failed parity)'}" for a in made]
        + [f"{a} not made ({why})" for a, why in failed.items()]) + said + f": {best} kept"
    return variant


# a remake's own
REMADE = ("int4_algorithm", "symmetric", "lm_head_bits", "accuracy_level", "eight_bit_layers", "awq_alpha")


def carried(made: Any, before: Any) -> Any:
    """``made`` (a file made again at ``before``'s place with other settings) with what the earlier choices wrote
    into ``before``'s recipe and its per-layer measurement kept."""
    if made is not before:
        made.recipe = {**before.recipe, **{k: v for k, v in made.recipe.items() if k in REMADE}}
        made.layers = made.layers or before.layers
    return made


LM_HEAD_GAIN = 1.25  # 8-bit LM head kept when it cuts the largest error by this much (or saves a failed parity)


def lm_head_measured(four: Any, build: Callable[[int, Any, bool], Any], scratch: Path) -> Any:
    """A decoder's INT4 file with its LM head at 8 bits beside the one at 4 (``four``): the 8-bit head kept when
    it passes where 4 bits fail, or cuts the largest error by :data:`LM_HEAD_GAIN`; the recipe says which and why."""
    eight = build(8, scratch / "lm_head_8bit.onnx", True)
    e4, e8 = worst_error(four), worst_error(eight)
    keep = bool(eight) and (not four or (e8 > 0 and e4 >= LM_HEAD_GAIN * e8))
    chosen = carried(build(8, four.path, True), four) if keep else four
    chosen.recipe["lm_head_bits"] = 8 if keep else 4
    chosen.recipe["lm_head_rule"] = (f"auto: LM head at 4 bits largest error {e4:.3g}"
                                     f"{'' if four else ' (failed parity)'}, at 8 bits {e8:.3g}"
                                     f"{'' if eight else ' (failed parity)'}: "
                                     f"{8 if keep else 4} bits kept (8 when it passes where 4 fails or cuts the error "
                                     f"{LM_HEAD_GAIN}x)")
    return chosen


def level_measured(fast: Any, build: Callable[[Any, bool], Any], scratch: Path) -> Any:
    """A decoder's INT4 file at accuracy level 4 (activations quantized to INT8 inside MatMulNBits: the fast CPU
    path), ``fast``, beside the same file computing in fp32: level 4 kept unless its parity fails where fp32
    compute passes (onnxruntime#29849: level 4 flips the argmax on models with massive activations)."""
    exact = build(scratch / "accuracy_level_fp32.onnx", True)
    e4, e0 = worst_error(fast), worst_error(exact)
    keep_fast = bool(fast) or not exact
    chosen = fast if keep_fast else carried(build(fast.path, True), fast)
    chosen.recipe["accuracy_level"] = 4 if keep_fast else None
    chosen.recipe["accuracy_level_rule"] = (
        f"auto: level 4 (INT8 compute) largest error {e4:.3g}{'' if fast else ' (failed parity)'}, fp32 compute "
        f"{e0:.3g}{'' if exact else ' (failed parity)'}: "
        + ("level 4 kept (the fast path; fp32 compute only where level 4 fails and it passes)" if keep_fast else
           "fp32 compute kept: level 4 failed where it passes"))
    return chosen
