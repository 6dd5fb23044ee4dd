"""What a bare ONNX file is, read from its inputs and nodes: the one place a file's input names are read for meaning.

Every step that holds only a path (a file made elsewhere, a variant, a file an earlier session wrote) asks
:func:`file_facts` instead of sniffing names itself: whether the file is a decoder with its key/value cache (and of
which family: a decoder-only model, or an encoder-decoder's decoder with cross-attention caches), whether its
attention is ONNX Runtime's GroupQueryAttention (its cache can be one shared buffer), whether it is a diffusion
UNet, and whether its token inputs carry a padding mask that a session may skip. The answer is kept per path and
modification time. A model that onnx-nb exported knows all this from its source record
(:class:`~onnx_nb.ModelSource`); these facts are for files.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError

# where transformers' generate() reads an encoder-decoder's first decoder token, in its order (mBART's and PLBart's
# default configs name no start token: the BOS then)
DECODER_START = ("decoder_start_token_id", "bos_token_id")
CACHE_PREFIX = "past_key_values."  # onnx-nb's (and Optimum's, and the builder's) cache input names
PRESENT_PREFIX = "present."
ENCODER_CACHE = ".encoder."  # an encoder-decoder's cross-attention cache, computed once from the encoder
STATE_KINDS = ("conv", "recurrent")  # per-layer states of fixed shape: past_key_values.{i}.conv.{j}, .recurrent.{j}
UNET_INPUTS = frozenset({"sample", "timestep", "encoder_hidden_states"})  # export(pipeline)'s unet.onnx
# a vision-language model's vision file: Qwen-VL's grid input, and the metadata prefix of an input traced as a
# constant (Qwen-VL's grid, LLaVA-NeXT's image size: "onnx_nb.fixed.<input>" -> one image's values)
IMAGE_GRID = "image_grid_thw"
IMAGE_COUNTS = "batch_num_images"  # LLaVA-OneVision's processor: each prompt's image count (one of several: one tile)
FIXED_INPUT = "onnx_nb.fixed."
GRID_DERIVED = "onnx_nb.grid_derived"  # a vision file's inputs computed per image from its grid (comma-separated)
SIZED_BY = "onnx_nb.sized_by"  # a vision file taking one image cropped to its size: the input that gives the size
# a whole-sequence file's metadata: the token the model's own generate() appends to the ids at every step (XLM's mask
# token); the logits at its position are the next token's
APPENDED = "onnx_nb.appended_token"
TILED = "onnx_nb.tiled"  # a vision file taking one image's tiles: its input packing their rows, computed per size
PACK_WEIGHT = "pack_weight"  # beside that input: each image token's rows' weights (a resized grid's), computed too


def fixed_inputs(vision: Any) -> dict[str, list[int]]:
    """The inputs a vision file was traced with as constants (name -> one image's values), from an ORT session."""
    meta = vision.get_modelmeta().custom_metadata_map
    return {k[len(FIXED_INPUT):]: [int(v) for v in value.split(",")] for k, value in meta.items()
            if k.startswith(FIXED_INPUT)}


def grid_derived(vision: Any) -> list[str]:
    """The inputs of a vision file that runners compute per image from its grid (Qwen-VL's attention spans and patch
    positions: :mod:`onnx_nb.kinds.vlm.grid`), from an ORT session; empty for other files."""
    value = vision.get_modelmeta().custom_metadata_map.get(GRID_DERIVED, "")
    return [n for n in value.split(",") if n]


def sized_by(vision: Any) -> str | None:
    """The input naming each image's size, where a vision file takes one image cropped to it (Pixtral's towers:
    :mod:`onnx_nb.kinds.vlm.sized`), from an ORT session; None for other files."""
    return vision.get_modelmeta().custom_metadata_map.get(SIZED_BY) or None


def tiled(vision: Any) -> str | None:
    """The input packing a tiled image's rows, where a vision file takes one image's tiles (LLaVA-NeXT:
    :mod:`onnx_nb.kinds.vlm.tiled`), from an ORT session; None for other files."""
    return vision.get_modelmeta().custom_metadata_map.get(TILED) or None


def is_cache(name: str) -> bool:
    """``name`` is a cache input (``past_key_values.{i}.key`` ...)."""
    return name.startswith(CACHE_PREFIX)


def is_cross_cache(name: str) -> bool:
    """``name`` is an encoder-decoder's cross-attention cache input (computed once by the encoder file)."""
    return is_cache(name) and ENCODER_CACHE in name


def is_state(name: str) -> bool:
    """``name`` is a cache input that keeps a state of fixed shape (``past_key_values.{i}.conv.{j}``,
    ``.recurrent.{j}``: Mamba, linear attention), not keys or values that grow."""
    parts = name.split(".")
    return is_cache(name) and len(parts) == 4 and parts[2] in STATE_KINDS


def present_of(name: str) -> str:
    """The output a cache input is carried to (``past_key_values.0.key`` -> ``present.0.key``)."""
    return PRESENT_PREFIX + name[len(CACHE_PREFIX):] if is_cache(name) else name


@dataclass(frozen=True)
class FileFacts:
    inputs: tuple[str, ...]
    generation: str | None  # "decoder" (a decoder-only model with its cache), "seq2seq" (an encoder-decoder's
    # decoder file, cross-attention caches included), None (one forward)
    gqa: bool  # attention in ONNX Runtime's GroupQueryAttention: past and present may share one buffer
    unet: bool  # a diffusion UNet (sample, timestep, encoder_hidden_states)
    padded_tokens: bool  # an attention_mask [batch, sequence] and no cache: a session may skip padding

    @property
    def cache_inputs(self) -> list[str]:
        return [n for n in self.inputs if is_cache(n)]

    @property
    def generative(self) -> bool:
        return self.generation is not None


def facts_of_proto(proto: Any) -> FileFacts:
    """The facts of a loaded model proto (its weights need not be loaded)."""
    from .onnxfile import gqa_node

    inputs = tuple(i.name for i in proto.graph.input)
    names = set(inputs)
    cache = [n for n in inputs if is_cache(n)]
    generation = ("seq2seq" if any(is_cross_cache(n) for n in cache) else "decoder") if cache else None
    mask = next((i for i in proto.graph.input if i.name == "attention_mask"), None)
    dims = list(mask.type.tensor_type.shape.dim) if mask is not None else []
    padded = not cache and len(dims) == 2 and bool(dims[1].dim_param)
    return FileFacts(inputs, generation, gqa_node(proto) is not None, names == UNET_INPUTS, padded)


def file_facts(path: str | Path) -> FileFacts:
    """The facts of the ONNX file at ``path`` (read once per path and modification time)."""
    p = Path(path)
    try:
        stat = p.stat()
    except OSError:
        from .onnxfile import load_proto

        load_proto(p)  # the clear error for a missing or unreadable file
        raise
    return _cached(str(p.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _cached(path: str, _mtime: int, _size: int) -> FileFacts:
    from .onnxfile import load_proto

    return facts_of_proto(load_proto(path))


def cache_dims(path: Any, shape: Sequence[Any]) -> tuple[int, int]:
    """Key/value heads and head size of a cache tensor: fixed in onnx-nb's files; an onnxruntime-genai builder
    folder names them (``kv_cache_dim``) and gives them in its ``genai_config.json``."""
    if isinstance(shape[1], int) and isinstance(shape[3], int):
        return shape[1], shape[3]
    config = Path(str(path)).parent / "genai_config.json"
    if config.is_file():
        decoder = json.loads(config.read_text())["model"]["decoder"]
        heads = shape[1] if isinstance(shape[1], int) else decoder["num_key_value_heads"]
        return int(heads), int(decoder["head_size"])
    raise InvalidArgumentError(
        f"{path}: the cache's heads and head size are not fixed in the file ({shape}) and there is no "
        "genai_config.json beside it to give them; export the decoder with onnx_nb.export(model, cache=True).")


def empty_shape(path: Any, shape: Sequence[Any]) -> tuple[int, ...]:
    """A cache tensor's shape before the first token, without its batch: ``(heads, 0, head size)``, or a
    sparse-attention layer's indexer keys' ``(0, size)`` (``[batch, past_sequence, size]``)."""
    if len(shape) == 3:
        return 0, int(shape[2])
    heads, size = cache_dims(path, shape)
    return heads, 0, size
