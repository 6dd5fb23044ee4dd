"""A vision-language model as three ONNX files (:class:`VlmExport`): its vision encoder, its text embedding with
the image features merged in, and its decoder with a key/value cache."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...results.parts import PartsExport

PARTS = ("vision", "embed", "decoder")


@dataclass(repr=False)
class ChainedExport(PartsExport):
    """Files run together to generate (a tower's, the embedding's and the decoder's), checked as a chain against the
    model's own forward at export (``chain``): the base of :class:`VlmExport` and a speech LLM's export."""

    chain: dict[str, Any] = field(default_factory=dict)  # the three files chained against the model's forward

    @property
    def status(self) -> str:
        """The parts' status, "failed" when the chain of the three differs from the model's forward."""
        return "failed" if self.chain and not self.chain.get("passed") else super().status

    def __bool__(self) -> bool:
        return self.status != "failed"

    @property
    def source(self) -> Any:
        """The decoder part's record: what later steps ask."""
        return self.parts["decoder"].source

    @property
    def preprocessor(self) -> Any:
        return self.source.preprocessor

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "chain": self.chain}

    def __repr__(self) -> str:
        text = super().__repr__()
        if self.chain:
            text += (f"\n  chained against PyTorch: max abs diff {self.chain.get('max_abs_diff', float('nan')):.1e} "
                     f"({'passed' if self.chain.get('passed') else 'FAILED'})"
                     + (f": {self.chain['error']}" if self.chain.get("error") else ""))
        return text


@dataclass(repr=False)
class VlmExport(ChainedExport):
    """An image-text-to-text model as onnxruntime-genai's builder splits one: ``vision.onnx`` (pixels -> one feature
    row per image token, run once per image), ``embed.onnx`` (token ids + features -> the decoder's embeddings) and
    ``decoder.onnx`` (embeddings -> logits, with its cache). ``onnx_nb.generate(result, inputs, images=...)``
    runs the three in ONNX Runtime; the whole chain was checked against the model's own forward at export
    (``chain``).

    Example::

        vlm = onnx_nb.export("HuggingFaceTB/SmolVLM-256M-Instruct")
        inputs = processor(text=prompt, images=image, return_tensors="np")
        onnx_nb.generate(vlm, inputs, max_new_tokens=20).text
    """

    TITLE = "Vision-language model exported"
    image_token: int = 0
    # which images the vision file takes: "every grid" (a grid family's file takes the tensors of each image's
    # grid), "any image size" (one image cropped to its image_sizes row, or its tiles packed by it), "one grid" or
    # "one image size" (traced at the sample's values of image_grid_thw or image_sizes: another is refused), else
    # "the tower's size" (the processor resizes every picture to it)
    image_sizes: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "image_token": self.image_token, "image_sizes": self.image_sizes}

    def __repr__(self) -> str:
        lines = super().__repr__().split("\n")
        return "\n".join([*lines[:len(self.parts) + 1], f"  images: {self.image_sizes}", *lines[len(self.parts) + 1:]])
