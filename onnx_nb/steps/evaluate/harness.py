"""An onnx-nb causal LM as a model of EleutherAI's lm-evaluation-harness, so its tasks (hellaswag, arc, mmlu, gsm8k,
a task of your own in YAML) run on an exported file or a variant with the harness's own code: prompts, few-shot
examples, answer extraction and metrics are all the harness's; onnx-nb only scores and generates tokens.

``lm_eval_model(int4)`` gives an ``lm_eval.api.model.TemplateLM``: ``loglikelihood`` (multiple choice: each
continuation's log-probability and whether it is the greedy one), ``loglikelihood_rolling`` (perplexity tasks: the
harness's own rolling windows), ``generate_until`` (greedy generation cut at the task's stop strings). The same class
over PyTorch (``pytorch=True``) gives the reference row."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from .candidates import Candidate, candidates
from .metrics import log_softmax


def lm_eval_model(model: Any, *, pytorch: bool = False, tokenizer: Any = None, max_length: int | None = None,
                  batch_size: int = 8, provider: str = "cpu") -> Any:
    """An lm-evaluation-harness model (``lm_eval.api.model.TemplateLM``) over a causal LM's file or variant, or over
    the PyTorch model it was exported from (``pytorch=True``); ``pip install lm-eval``.

    ``max_length`` (default: the config's ``max_position_embeddings``, at most 2,048) bounds each scored window;
    ``batch_size`` scores that many requests at once (right-padded).

    Example::

        import lm_eval
        lm = onnx_nb.lm_eval_model(int4)
        results = lm_eval.simple_evaluate(model=lm, tasks=["hellaswag"], limit=200)
        results["results"]["hellaswag"]
    """
    try:
        from lm_eval.api.model import TemplateLM
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
    except ImportError as exc:
        raise InvalidArgumentError("lm_eval_model() needs the harness: pip install lm-eval") from exc
    rows = candidates(model, pytorch=pytorch, provider=provider)
    row = rows[0]
    given: Any = tokenizer or getattr(row.source, "preprocessor", None)
    tok: Any = getattr(given, "tokenizer", given)
    if tok is None or not hasattr(tok, "encode"):
        raise InvalidArgumentError("lm_eval_model() needs the model's tokenizer: the export carries none here; pass "
                                   "tokenizer= (transformers.AutoTokenizer.from_pretrained(folder)).")
    config = getattr(getattr(row.source, "model", None), "config", None)
    longest = max_length or min(int(getattr(config, "max_position_embeddings", None) or 2048), 2048)

    class OnnxNbLM(TemplateLM):
        """The harness's view of one onnx-nb candidate (see :func:`lm_eval_model`)."""

        def __init__(self) -> None:
            super().__init__()
            self.candidate: Candidate = row
            self.tokenizer = tok
            self.max_length = longest
            self.batch_size = batch_size

        @property
        def eot_token_id(self) -> int:
            return int(tok.eos_token_id)

        def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
            return list(tok.encode(string, add_special_tokens=bool(add_special_tokens)))

        def _loglikelihood_tokens(self, requests: list[Any], disable_tqdm: bool = False,
                                  **kwargs: Any) -> list[tuple[float, bool]]:
            return score_continuations(self.candidate, [(c, k) for _, c, k in requests], self.max_length,
                                       self.batch_size)

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
            out = []
            for (text,) in [r.args for r in requests]:
                windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
                    self.tok_encode(text), self.prefix_token_id, self.max_length, 1)]
                out.append(float(sum(lp for lp, _ in score_continuations(self.candidate, windows, self.max_length,
                                                                          self.batch_size))))
            return out

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            out = []
            for context, kwargs in [r.args for r in requests]:
                until = kwargs.get("until") or [tok.decode([self.eot_token_id])]
                until = [until] if isinstance(until, str) else list(until)
                room = int(kwargs.get("max_gen_toks", 256))
                ids = self.tok_encode(context)[-max(self.max_length - room, 1):]  # the new tokens fit the length too
                new = self.candidate.generate([ids], room)[0]
                text = tok.decode(new, skip_special_tokens=True)
                for stop in until:
                    text = text.split(stop)[0] if stop else text
                out.append(text)
            return out

    return OnnxNbLM()


def score_continuations(candidate: Candidate, pairs: list[tuple[list[int], list[int]]], max_length: int,
                        batch_size: int) -> list[tuple[float, bool]]:
    """Each continuation's summed log-probability after its context and whether greedy decoding picks it, the
    context cut from the left to fit ``max_length``; right-padded batches of similar length."""
    results: list[tuple[float, bool]] = [(0.0, False)] * len(pairs)
    rows = []
    for context, continuation in pairs:
        whole = (list(context) + list(continuation))[-(max_length + 1):]
        rows.append((whole[:-1], len(continuation)))
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
    for start in range(0, len(order), batch_size):
        group = order[start:start + batch_size]
        width = max(len(rows[i][0]) for i in group)
        ids = np.zeros((len(group), width), np.int64)
        mask = np.zeros((len(group), width), np.int64)
        for r, i in enumerate(group):
            ids[r, :len(rows[i][0])] = rows[i][0]
            mask[r, :len(rows[i][0])] = 1
        logits = candidate.logits(ids, mask).astype(np.float64)
        for r, i in enumerate(group):
            inputs, count = rows[i]
            n = len(inputs)
            wanted = np.array(pairs[i][1][-count:] if count else [], np.int64)
            picked = logits[r, n - count:n]
            logp = log_softmax(picked)
            results[i] = (float(logp[np.arange(count), wanted].sum()),
                          bool((picked.argmax(-1) == wanted).all()))
    return results
