"""A model's generation config in onnx-nb's generation loops: the logits rules transformers' ``generate()`` applies
(forced BOS/EOS, minimum lengths, repetition penalty, no-repeat n-grams, bad words, suppressed tokens), in
transformers' order, on numpy logits. A setting the loops do not run (beam search, contrastive search,
constraints, ...) is an error naming it, never silently ignored.

Lengths count as transformers counts them: for a decoder, the prompt and the new tokens; for an encoder-decoder,
the decoder's tokens, its start token included."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError

# settings and the value at which they do nothing; another value is refused (the loops do not run them)
NOT_RUN = {"num_beam_groups": 1, "penalty_alpha": None, "diversity_penalty": 0.0,
           "constraints": None, "force_words_ids": None, "guidance_scale": None, "sequence_bias": None,
           "encoder_repetition_penalty": 1.0, "encoder_no_repeat_ngram_size": 0,
           "exponential_decay_length_penalty": None, "typical_p": 1.0,
           "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "min_p": None, "watermarking_config": None,
           "assistant_model": None, "prompt_lookup_num_tokens": None}
# beam search: run by transformers' own generate() over the files
# (:func:`~.transformers_api.generate_with_transformers`)
BEAMS = {"num_beams": 1, "length_penalty": 1.0, "early_stopping": False, "num_return_sequences": 1}
RUN = ("forced_bos_token_id", "forced_eos_token_id", "min_length", "min_new_tokens", "repetition_penalty",
       "no_repeat_ngram_size", "bad_words_ids", "suppress_tokens", "begin_suppress_tokens")


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


@dataclass
class Rules:
    """The generation config's logits rules for one ``generate()`` call."""

    eos: set[int]
    forced_bos: int | None = None
    forced_eos: list[int] = field(default_factory=list)
    min_length: int = 0
    min_new_tokens: int = 0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    bad_words: list[list[int]] = field(default_factory=list)
    suppress: list[int] = field(default_factory=list)
    begin_suppress: list[int] = field(default_factory=list)
    prefix: list[int] = field(default_factory=list)  # forced_decoder_ids (Whisper's language and task): after start
    beams: dict[str, Any] = field(default_factory=dict)  # BEAMS' settings as the call and the config give them
    # settings onnx-nb's loops do not run (NOT_RUN's, on): the call goes through transformers' generate() instead
    elsewhere: dict[str, Any] = field(default_factory=dict)

    @property
    def through_transformers(self) -> bool:
        """Whether transformers' own generate() over the files runs this call (beam search, or a setting the
        loops lack)."""
        return self.num_beams > 1 or self.beams.get("num_return_sequences", 1) > 1 or bool(self.elsewhere)

    @property
    def num_beams(self) -> int:
        return int(self.beams.get("num_beams") or 1)

    @property
    def active(self) -> bool:
        return bool(self.forced_bos is not None or self.forced_eos or self.min_length or self.min_new_tokens
                    or self.repetition_penalty != 1.0 or self.no_repeat_ngram_size or self.bad_words
                    or self.suppress or self.begin_suppress)

    def apply(self, logits: np.ndarray, sequences: list[list[int]], start: int, max_length: int) -> np.ndarray:
        """The rules on one step's ``[batch, vocab]`` logits. ``sequences``: each row's tokens so far as
        transformers sees them (prompt or decoder start, then the new tokens); ``start``: the length at which the
        new tokens begin (the prompt's, or 1); ``max_length``: the length at which generation stops."""
        if not self.active:
            return logits
        scores = logits.astype(np.float32, copy=True)
        vocab = scores.shape[-1]
        cur = len(sequences[0])
        neg = -np.inf
        if self.repetition_penalty != 1.0:
            for row, seq in enumerate(sequences):
                seen = np.unique(np.asarray(seq, np.int64))
                got = scores[row, seen]
                scores[row, seen] = np.where(got < 0, got * self.repetition_penalty, got / self.repetition_penalty)
        n = self.no_repeat_ngram_size
        if n and cur + 1 >= n:
            for row, seq in enumerate(sequences):
                prefix = tuple(seq[cur - n + 1:]) if n > 1 else ()
                banned = {seq[i + n - 1] for i in range(cur - n + 1) if tuple(seq[i:i + n - 1]) == prefix}
                if banned:
                    scores[row, list(banned)] = neg
        for row, seq in enumerate(sequences):
            for words in self.bad_words:
                if len(words) == 1 or (len(seq) >= len(words) - 1 and seq[len(seq) - len(words) + 1:] == words[:-1]):
                    scores[row, words[-1]] = neg
        eos = sorted(e for e in self.eos if 0 <= e < vocab)  # (parity passes -1: no EOS)
        if eos and (cur < self.min_length or cur - start < self.min_new_tokens):
            scores[:, eos] = neg
        if self.forced_bos is not None and cur == 1:
            scores[:, :] = neg
            scores[:, self.forced_bos] = 0
        if self.forced_eos and cur == max_length - 1:
            scores[:, :] = neg
            scores[:, self.forced_eos] = 0
        if self.suppress:
            scores[:, [t for t in self.suppress if t < vocab]] = neg
        if self.begin_suppress and cur == start:
            scores[:, [t for t in self.begin_suppress if t < vocab]] = neg
        return scores


def rules_for(model_config: Any, eos: set[int], overrides: dict[str, Any]) -> Rules:
    """The rules of the model's generation config (``generation_config``, or the model config's own fields), with
    ``overrides`` (the call's settings) over it. A setting the loops do not run raises, naming it."""
    settings: dict[str, Any] = {}
    if model_config is not None:
        source = model_config if isinstance(model_config, dict) else model_config.to_dict()
        settings.update({k: v for k, v in source.items()
                         if k in RUN or k in NOT_RUN or k in BEAMS or k == "forced_decoder_ids"})
    unknown = sorted(set(overrides) - set(RUN) - set(NOT_RUN) - set(BEAMS) - {"forced_decoder_ids"})
    if unknown:
        raise InvalidArgumentError(f"generate() got unknown setting(s) {', '.join(unknown)}; generation settings "
                                   f"it takes: {', '.join((*RUN, *BEAMS))}. For any other, run transformers' "
                                   "generate() on the files: onnx_nb.to_transformers(result).generate(...).")
    settings.update(overrides)
    elsewhere = {name: settings[name] for name, neutral in NOT_RUN.items()
                 if settings.get(name) is not None and settings[name] != neutral
                 and not (isinstance(settings[name], (list, dict)) and not settings[name])}
    eos_ids = sorted(eos)
    bad = [list(map(int, w)) for w in settings.get("bad_words_ids") or [] if list(w) not in ([e] for e in eos_ids)]
    return Rules(
        eos=set(eos), forced_bos=settings.get("forced_bos_token_id"),
        forced_eos=_ids(settings.get("forced_eos_token_id")), min_length=int(settings.get("min_length") or 0),
        min_new_tokens=int(settings.get("min_new_tokens") or 0),
        repetition_penalty=float(settings.get("repetition_penalty") or 1.0),
        no_repeat_ngram_size=int(settings.get("no_repeat_ngram_size") or 0), bad_words=bad,
        suppress=_ids(settings.get("suppress_tokens")), begin_suppress=_ids(settings.get("begin_suppress_tokens")),
        prefix=_prefix(settings.get("forced_decoder_ids")),
        beams={k: settings.get(k) for k in BEAMS if settings.get(k) is not None}, elsewhere=elsewhere)


def _prefix(forced: Any) -> list[int]:
    """``forced_decoder_ids`` ([[1, lang], [2, task], ...], Whisper's) as the tokens after the start token; they
    must force positions 1, 2, ... in a row (transformers runs them as the decoder's prompt too)."""
    if not forced:
        return []
    pairs = sorted((int(p), int(t)) for p, t in forced)
    if [p for p, _ in pairs] != list(range(1, len(pairs) + 1)):
        raise InvalidArgumentError(f"forced_decoder_ids={forced!r} force positions that are not 1, 2, ... in a row; "
                                   "run transformers' generate() on the files: onnx_nb.to_transformers(result).")
    return [t for _, t in pairs]


def generation_config_of(model: Any) -> dict[str, Any] | None:
    """The generation config of an export's model as a dict: the transformers model's ``generation_config``, else
    the ``generation_config.json`` of the folder it came from (lean exports never build the model); None for
    other models."""
    import json
    from pathlib import Path

    from ...results.export import source_of

    source = source_of(model)
    config = getattr(getattr(source, "model", None), "generation_config", None)
    if config is not None:
        return config.to_dict()
    location = getattr(source, "location", None)
    found = Path(location) / "generation_config.json" if location else None
    if found is not None and found.is_file():
        return dict(json.loads(found.read_text()))
    return None
