"""``GenerationResult``: the tokens (and text) ``onnx_nb.generate()`` made, its timings and how the prompts ran."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..render import CSS, esc, html_table


@dataclass
class GenerationResult:
    """Tokens (and text when a tokenizer is known) generated in ONNX Runtime, with timings.

    Example::

        out = onnx_nb.generate(result, ["Hello, my dog"], max_new_tokens=20)
        out.text, out.new_tokens, out.tokens_per_second
    """

    prompts: list[list[int]]
    tokens: list[list[int]]  # the new tokens of each prompt (stopped at EOS, which is kept)
    text: list[str] | None
    prefill_ms: float  # time to first token
    decode_ms: list[float] = field(default_factory=list)  # each later step
    images: list[str] = field(default_factory=list)  # a vision-language model's pictures, PNG data URIs, shown
    # how the prompts ran: one left-padded batch, or one batch per length (a file that changes under left padding)
    batching: str = "one batch, left-padded"

    @property
    def new_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def tokens_per_second(self) -> float | None:
        """Decode speed: new tokens after the first, per second of decode steps (batch rows counted)."""
        steps = sum(self.decode_ms) / 1e3
        return (self.new_tokens - len(self.tokens)) / steps if steps > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {"prompts": self.prompts, "tokens": self.tokens, "text": self.text, "prefill_ms": self.prefill_ms,
                "decode_ms": self.decode_ms, "tokens_per_second": self.tokens_per_second, "batching": self.batching}

    def __repr__(self) -> str:
        speed = self.tokens_per_second
        lines = [f"GenerationResult: {len(self.tokens)} prompt(s), {self.new_tokens} new tokens, first token "
                 f"{self.prefill_ms:.1f} ms" + (f", {speed:.1f} tokens/s after it" if speed else "")
                 + (f"; prompts ran as {self.batching}" if len(self.tokens) > 1 and self.prompts else "")]
        for i, toks in enumerate(self.tokens):
            lines.append(f"[{i}] " + (repr(self.text[i]) if self.text else " ".join(map(str, toks))))
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        rows = [(i, esc(self.text[i]) if self.text else esc(" ".join(map(str, t))), len(t))
                for i, t in enumerate(self.tokens)]
        head = esc(repr(self).splitlines()[0])
        pictures = [f'<img src="{esc(uri)}" alt="image {k}" style="max-height:96px">'
                    for k, uri in enumerate(self.images) if uri.startswith("data:image/png;base64,")]
        if pictures and len(pictures) == len(rows):  # one image per prompt: beside its answer
            table = html_table(["#", "image", "generated", "tokens"],
                               [(i, pic, text, n) for (i, text, n), pic in zip(rows, pictures)], raw_cols=(1, 2))
        else:
            table = "".join(pictures) + html_table(["#", "generated", "tokens"], rows, raw_cols=(1,))
        return f'{CSS}<div class="onnxnb"><h4>{head}</h4>{table}</div>'
