"""transformers.js's own run of a folder (:func:`onnx_nb.runtime.transformers_js.run_check`), judged against PyTorch:
the tokens its tokenizer gave fed to the PyTorch model, every output compared at the file's tolerance (the same rule
as ``check_parity``), a feature-extraction pipeline's pooled embeddings by cosine, and a decoder's greedy tokens one
by one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...render import sig
from ...results.web_bundle import WebBundle, WebCheck
from .inputs import CAPTIONS

GENERATING = ("text-generation", "text2text-generation")  # judged by their greedy tokens


class Judge:
    """Judges transformers.js's runs of one bundle against PyTorch; what PyTorch gives (a decoder's greedy tokens, an
    encoder's reference) is made once, on the first run that needs it, however many places the folder is run in."""

    def __init__(self, bundle: WebBundle, export: Any, files: dict[str, tuple[Path, str]],
                 max_new_tokens: int, images: list[Any] | None = None, audio: list[Any] | None = None) -> None:
        self.bundle, self.export, self.files, self.max_new_tokens = bundle, export, files, max_new_tokens
        self.images = list(images or [])  # an image task's, as [height, width, 3] uint8 arrays
        self.audio = list(audio or [])  # speech recognition's clips (float32 samples)
        # as transformers.js's request carries them, made once for every place the folder is run in
        self._pixels = [{"width": int(a.shape[1]), "height": int(a.shape[0]), "data": a.reshape(-1).tolist()}
                        for a in self.images]
        self._samples = [c.tolist() for c in self.audio]
        self._expected: Any = None
        # generated from what transformers.js's processor made of each clip or image (speech, an image's text)
        self.from_features = bool(self.audio) or bundle.task == CAPTIONS

    def expected(self) -> Any:
        if self._expected is None:
            from ..export.adapters.registry import adapter_of

            export, bundle = self.export, self.bundle
            if self.from_features or bundle.task in GENERATING:
                model = adapter_of(export).reload(export.source, "to_transformers_js").model
                # speech, an image's text: the model itself, its tokens made from each run's own features
                self._expected = model if self.from_features else greedy_tokens(
                    model, export.source.preprocessor, bundle.texts, self.max_new_tokens)
            else:
                self._expected = adapter_of(export).reference(export, export.path, None, 0)
        return self._expected

    def checked(self, run_folder: Any) -> None:
        """Run transformers.js on the bundle's folder (``run_folder``:
        :func:`~onnx_nb.runtime.transformers_js.run_check` or :func:`~onnx_nb.runtime.transformers_js.run_in_page`) at
        each dtype of ``files`` (dtype -> (written file, onnx-nb's precision)) and add a :class:`WebCheck` per dtype
        to the bundle."""
        import statistics

        bundle, files = self.bundle, self.files
        ran = run_folder(bundle.folder.parent, bundle.folder.name, bundle.task, list(files), bundle.texts,
                         self.max_new_tokens, images=self._pixels, audio=self._samples)
        bundle.transformers_js = str(ran.get("version", ""))
        if ran.get("untimed"):
            bundle.notes.append(f"{ran.get('where', 'a browser')}: runs not timed on {ran['untimed']}.")
        for run in ran.get("runs", []):
            path, precision = files[run["dtype"]]
            times = run.get("times_ms") or []
            row = WebCheck(run["dtype"], path.relative_to(bundle.folder).as_posix(), path.stat().st_size, precision,
                           "error", where=str(ran.get("where", "")), load_ms=run.get("load_ms"),
                           run_ms=statistics.median(times) if times else None, untimed=str(ran.get("untimed", "")))
            bundle.checks.append(row)
            if run.get("error"):
                row.measure = f"transformers.js {bundle.transformers_js}: {run['error']}"
            elif self.from_features:
                _judge_from_features(row, run, self.expected(), self.export.source.preprocessor,
                                     self.audio or self.images, self.max_new_tokens)
            elif bundle.task in GENERATING:
                _judge_tokens(row, run["tokens"], self.expected())
            elif self.images:
                _judge_image_outputs(row, run, self.expected(), self.export.source.preprocessor, self.images)
            else:
                _judge_outputs(row, run, self.expected(), self.export.source.preprocessor, bundle)


def greedy_tokens(model: Any, tokenizer: Any, texts: list[str], max_new_tokens: int) -> list[list[int]]:
    """PyTorch's greedy generation of each text alone (a decoder's prompt tokens included; an encoder-decoder's
    decoder tokens from its start token), under the model's generation config but for its beams (one: greedy)."""
    import torch

    out = []
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt")  # what transformers.js feeds a decoder: ids and mask
            made = model.generate(input_ids=ids["input_ids"], attention_mask=ids.get("attention_mask"),
                                  max_new_tokens=max_new_tokens, do_sample=False, num_beams=1)
            out.append([int(t) for t in made[0]])
    return out


def _judge_tokens(row: WebCheck, theirs: list[list[int]], ours: list[list[int]], what: str = "prompts") -> None:
    equal = sum(a == b for a, b in zip(theirs, ours))
    row.figures = {"prompts": len(ours), "tokens_equal": equal}
    row.status = "pass" if equal == len(ours) == len(theirs) else "fail"
    row.measure = f"greedy tokens equal for {equal} of {len(ours)} {what}"
    for i, (a, b) in enumerate(zip(theirs, ours)):
        if a != b:
            at = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            row.note = f"{what[:-1]} {i + 1}: position {at} is {a[at] if at < len(a) else 'missing'}, PyTorch's " \
                       f"{b[at] if at < len(b) else 'missing'}"
            break


def _judge_outputs(row: WebCheck, run: dict[str, Any], reference: Any, tokenizer: Any, bundle: WebBundle) -> None:
    feed = {k: _array(v) for k, v in run["inputs"].items()}  # the tokenizer's ids and masks
    pairs = bundle.task == "question-answering"  # [question, context]: the tokenizer's text and text pair
    given = ([t[0] for t in bundle.texts], [t[1] for t in bundle.texts]) if pairs else (bundle.texts,)
    made = tokenizer(*given, padding=True, truncation=True, return_tensors="np")
    # what transformers.js's tokenizer does not give is fed as zeros below: the same only where transformers' is
    differ = ["input_ids"] if "input_ids" not in feed else [
        k for k in ("input_ids", "token_type_ids")
        if k in made and not np.array_equal(made[k], feed[k] if k in feed else np.zeros_like(made[k]))]
    if differ:
        row.status, row.measure = "fail", f"its tokenizer gives other {' and '.join(differ)} than transformers'"
        return
    for name in reference.flat.input_names:  # what transformers.js's tokenizer does not give is all zeros
        feed.setdefault(name, np.zeros_like(feed["input_ids"]))
    expected = reference.run(feed)
    mask = feed["attention_mask"].astype(bool) if "attention_mask" in feed else None
    words, passed = _compared(row, run, expected, mask)
    if not words:
        return
    if bundle.task == "feature-extraction" and "last_hidden_state" in expected and mask is not None:
        pooled = _pooled(expected["last_hidden_state"], mask)
        theirs = np.asarray(run["answer"], dtype=np.float64)
        cosines = (theirs * pooled).sum(-1) / (np.linalg.norm(theirs, axis=-1) * np.linalg.norm(pooled, axis=-1))
        row.figures["pooled_cosine"] = float(cosines.min())
        words.append(f"pooled embeddings cos {float(cosines.min()):.6f}")
    row.status = "pass" if passed else "fail"
    row.measure = "; ".join(words)


def _judge_from_features(row: WebCheck, run: dict[str, Any], model: Any, processor: Any, items: list[Any],
                         max_new_tokens: int) -> None:
    """Each clip's (speech) or image's (image-to-text) greedy tokens from transformers.js against PyTorch's
    ``generate`` on the features or pixel values transformers.js's processor made; how far those are from
    transformers' own processor's on the same clips or images, beside."""
    import torch

    given = [{k: _array(v) for k, v in f.items()} for f in run.get("features", [])]
    main = next((k for k in ("input_features", "input_values", "pixel_values") if given and k in given[0]), None)
    if main is None or len(given) != len(items):
        row.status, row.measure = "fail", "its processor gave no input_features, input_values or pixel_values"
        return
    settings: dict[str, Any] = {}
    if getattr(getattr(model, "generation_config", None), "is_multilingual", False):
        settings = {"language": "en", "task": "transcribe"}  # transformers.js's default; PyTorch would detect one
    ours = []
    with torch.no_grad():
        for feed in given:
            made = model.generate(**{k: torch.from_numpy(v) for k, v in feed.items()}, max_new_tokens=max_new_tokens,
                                  do_sample=False, num_beams=1, **settings)
            ours.append([int(t) for t in made[0]])
    # transformers' Whisper generate() returns the new tokens alone and drops a closing end token; transformers.js
    # returns its start tokens (start, language, task, no-timestamps), the new ones and the end token
    start = [int(t) for t in run.get("init_tokens") or []]
    end = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ends = set(end if isinstance(end, (list, tuple)) else [end])
    theirs = []
    for tokens in run["tokens"]:
        if start and tokens[:len(start)] != start:
            row.status, row.measure = "fail", f"its start tokens {tokens[:len(start)]}, not the {start} it named"
            return
        theirs.append(tokens[len(start):] if start else tokens)
    if start:
        ours = [o[:-1] if o and o[-1] in ends else o for o in ours]
        theirs = [t[:-1] if t and t[-1] in ends else t for t in theirs]
    images = main == "pixel_values"
    _judge_tokens(row, theirs, ours, "images" if images else "clips")
    gaps = []
    for item, feed in zip(items, given):
        mine = _processed(processor, item, main)
        if mine.shape == feed[main].shape:
            gaps.append(float(np.abs(mine - feed[main]).max()))
    if gaps:
        row.figures["processor_max_abs" if images else "features_max_abs"] = max(gaps)
        row.measure += f"; its {'pixel values' if images else 'features'} within {sig(max(gaps))} of transformers'"


def _processed(processor: Any, item: Any, main: str) -> np.ndarray:
    """transformers' own processor's ``main`` for one clip (float samples) or image (``[height, width, 3]`` uint8)."""
    if main == "pixel_values":
        from ...runtime.pictures import pixel_values_of

        return np.asarray(pixel_values_of([item], processor)[main])
    extractor = getattr(processor, "feature_extractor", processor)
    rate = int(getattr(extractor, "sampling_rate", 16000))
    return np.asarray(extractor(item, sampling_rate=rate, return_tensors="np")[main])


def _judge_image_outputs(row: WebCheck, run: dict[str, Any], reference: Any, processor: Any,
                         images: list[Any]) -> None:
    """PyTorch's model on the ``pixel_values`` transformers.js's processor made, every output compared; how far
    those pixel values are from transformers' own processor's on the same images, reported beside."""
    given = {k: _array(v) for k, v in run["inputs"].items()}
    feed = {k: v for k, v in given.items() if k in reference.flat.input_names}
    if "pixel_values" not in feed:
        row.status, row.measure = "fail", f"its processor gave {', '.join(given) or 'nothing'}, no pixel_values"
        return
    words, passed = _compared(row, run, reference.run(feed), None)
    if not words:
        return
    from PIL import Image

    ours = np.asarray(processor(images=[Image.fromarray(a) for a in images], return_tensors="np")["pixel_values"])
    if ours.shape == feed["pixel_values"].shape:
        gap = float(np.abs(ours - feed["pixel_values"]).max())
        row.figures["processor_max_abs"] = gap
        words.append(f"its processor's pixel_values within {sig(gap)} of transformers'")
    else:
        words.append(f"its processor's pixel_values {list(feed['pixel_values'].shape)}, transformers' "
                     f"{list(ours.shape)}")
    row.status = "pass" if passed else "fail"
    row.measure = "; ".join(words)


def _array(tensor: dict[str, Any]) -> np.ndarray:
    """A tensor transformers.js gave back (``{"dims", "type", "data"}``) as an array of its own kind."""
    kind = np.int64 if tensor.get("type") in ("int64", "int32", "bool") else np.float32
    return np.asarray(tensor["data"], dtype=kind).reshape(tensor["dims"])


def _compared(row: WebCheck, run: dict[str, Any], expected: dict[str, Any],
              mask: np.ndarray | None) -> tuple[list[str], bool]:
    """Each output transformers.js's model gave that PyTorch's has, at the file's tolerance: the words, and whether
    all passed (none compared: the row failed, saying so)."""
    from ...results.tolerance import measure, tolerance_for

    words, passed = [], True
    for name, got in run["outputs"].items():
        if name not in expected:
            continue
        mine = np.asarray(got["data"], dtype=np.float64).reshape(got["dims"])
        stats, errors = measure(mine, expected[name], name, mask)
        verdict = errors.judge(tolerance_for(row.precision, name, None, None, None))
        passed &= bool(verdict["passed"])
        row.figures[name] = {"max_abs": stats["max_abs"], "cosine": stats["cosine"]}
        words.append(f"{name} max |Δ| {sig(stats['max_abs'])}, cos {stats['cosine']:.6f}")
    if not words:
        row.status, row.measure = "fail", f"no output PyTorch's model has ({', '.join(run['outputs'])})"
    return words, passed


def _pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean over the unmasked tokens, normalized: the feature-extraction pipeline's ``pooling: "mean",
    normalize: true``."""
    weights = mask[..., None].astype(np.float64)
    mean = (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
    return np.asarray(mean / np.linalg.norm(mean, axis=-1, keepdims=True))
