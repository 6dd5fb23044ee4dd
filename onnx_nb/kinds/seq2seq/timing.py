"""An encoder-decoder's rows in :func:`onnx_nb.benchmark`'s generation table (the seq2seq shape's timing): decode
steps after the encoder ran once, in ONNX Runtime and in PyTorch eager with its cache and without one; a prefill is
refused (the first token comes after the encoder file). Only imported by functions that already need torch."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from ...runtime.providers import threads_for
from ...steps.benchmark.generation_latency import ENCODER_SEQUENCE, DecoderTiming
from ...steps.export.caches.hf_names import cache_kwargs
from ...steps.export.caches.seq2seq import (
    FEATURE_INPUTS,
    EncoderWithCross,
    as_encoder_output,
    decoder_vocab,
    encoder_decoder_cache,
    encoder_inputs,
)
from ...steps.export.caches.seq2seq import layout_of as seq2seq_layout
from ..hf.samples import feature_rows


class Seq2SeqTiming(DecoderTiming):
    notes = (f"An encoder-decoder's decode steps read an encoder output of {ENCODER_SEQUENCE} positions (or the "
             "length the file fixes, e.g. Whisper's), computed once before the timed steps, in PyTorch as in ONNX "
             "Runtime.",)
    prefill_refused = ("an encoder-decoder's first token comes after its encoder file: time decode steps "
                       "({'past': N}) here")

    @staticmethod
    def torch(model: Any, length: int, past: int, cache: bool, threads: int | None, layout: Any) -> Any:
        return partial(TorchDecodeStep, model, past, cache, threads, ENCODER_SEQUENCE)


class TorchDecodeStep:
    """PyTorch eager, one decoder step of an encoder-decoder after ``past`` generated tokens, given the encoder's
    output (computed once, as ``generate()`` does): with the cache (self-attention cache of ``past`` tokens, the
    cross-attention cache filled once), or without (``cache=False``: the ``past + 1`` tokens again)."""

    def __init__(self, model: Any, past: int, cache: bool, threads: int | None, encoder_length: int) -> None:
        from ...runtime.memory import weight_bytes

        config = model.config
        g = torch.Generator().manual_seed(0)
        names = encoder_inputs(model)
        if names[0] in FEATURE_INPUTS:
            feed = feature_rows(model, 1)[0]
        else:
            ids = torch.randint(min(3, config.vocab_size - 1), config.vocab_size, (1, encoder_length), generator=g)
            feed = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        with torch.inference_mode():
            encoded = EncoderWithCross(model, names)(*[feed[n] for n in names])
        self.model, self.cache_on, self.past = model, cache, past
        self.states = encoded["encoder_hidden_states"]
        self.mask = {"attention_mask": feed["attention_mask"]} if "attention_mask" in feed else {}
        vocab = decoder_vocab(model)
        self.ids = torch.randint(min(3, vocab - 1), vocab, (1, 1 if cache else past + 1), generator=g)
        self.cache = None
        if cache:
            layout = seq2seq_layout(model, feed)
            shape = (1, layout.heads, past, layout.head_size)
            own = [(torch.randn(shape, generator=g), torch.randn(shape, generator=g)) for _ in range(layout.layers)]
            cross = [(encoded[f"present.{i}.encoder.key"], encoded[f"present.{i}.encoder.value"])
                     for i in range(layout.layers)]
            self.cache = encoder_decoder_cache(model, own, cross)
        self.options = {"mode": "eager, inference_mode", "threads": threads_for(threads) or torch.get_num_threads(),
                        "cache": "on" if cache else "off (whole sequence each token)",
                        "encoder": f"{self.states.shape[1]} positions, computed once"}
        self.held_bytes = weight_bytes(model)  # loaded before the row: counted into its peak memory
        self.encoded = as_encoder_output(self.states)  # made once, outside the timed call

    def __call__(self) -> None:
        with torch.inference_mode():
            self.model(encoder_outputs=self.encoded, decoder_input_ids=self.ids,
                       **cache_kwargs(self.model, self.cache), use_cache=self.cache_on, return_dict=True, **self.mask)
        if self.cache is not None:
            self.cache.self_attention_cache.crop(-1)  # the step appended its token: back to ``past`` for the next
