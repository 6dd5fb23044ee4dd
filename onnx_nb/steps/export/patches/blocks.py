"""A branch-free form of attention within fixed-size blocks of the sequence (Granite Speech's conformer: each block
of ``context_size`` frames attends to itself, with Shaw's relative positions), and of a projector that pools fixed
windows of frames into queries (its Q-Former), for an audio file that takes clips of any length.

The model's own forward decides in Python from the length: ``if remainder > 0`` it pads the last block and masks
the padded frames in place (``pos_attn[num_blocks - 1::num_blocks].masked_fill_``); ``math.ceil`` counts the blocks.
A trace keeps the sample's answers, so the file took clips of the sample's length only (another was refused).

Within :func:`traceable_blocks` each such module computes the same thing without a branch: the sequence is always
padded by ``-length % context_size`` frames (none when it fits), the blocks counted as the padded length over the
block size, and the mask built from the length as a tensor (every block but each row's last, and the frames before
the remainder in the last, see each other as in the model; with nothing padded it masks nothing), applied out of
place. The projector pads to whole windows the same way.

Recognised by what the modules hold, not by family: ``context_size``, ``rel_pos_emb``, ``to_q``, ``to_kv``,
``to_out`` and ``pre_norm`` (the block attention); ``window_size``, ``downsample_rate``, ``query``, ``qformer`` and
``linear`` (the projector).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .contract import Patch

ATTENTION = ("context_size", "rel_pos_emb", "to_q", "to_kv", "to_out", "pre_norm", "scale", "num_heads", "dropout")
PROJECTOR = ("window_size", "downsample_rate", "query", "qformer", "linear")
# the forwards' parameters, beside what the modules hold
CALLS = {ATTENTION: ("self", "hidden_states", "attention_dists"), PROJECTOR: ("self", "hidden_states")}


def block_attention(self: Any, hidden_states: Any, attention_dists: Any) -> Any:
    """The block attention's forward, the last block's padding and mask made from the length as tensors."""
    import torch

    hidden_states = self.pre_norm(hidden_states)
    frames = hidden_states.shape[1]
    size = self.context_size
    padded = torch.nn.functional.pad(hidden_states, (0, 0, 0, (-frames) % size))
    blocks = padded.shape[1] // size
    query = self.to_q(padded)
    key, value = self.to_kv(padded).chunk(2, dim=-1)
    heads, width = self.num_heads, int(query.shape[-1]) // self.num_heads  # (a -1 exports wrong: a head's width)
    # [batch, blocks, heads, size, width] by unflattening and flattening, never a reshape to sizes the exporter
    # works out (a -1 there, or the batch times the blocks, came out wrong at another clip length)
    query, key, value = (t.unflatten(1, (blocks, size)).unflatten(3, (heads, width)).transpose(2, 3)
                         for t in (query, key, value))
    positions = torch.einsum("b n h c d, c r d -> b n h c r", query, self.rel_pos_emb(attention_dists)) * self.scale
    # which padded frames are the clip's, as a tensor (the exporter's remainder and comparisons take no symbolic
    # scalar): a block's frame pairs are masked unless both are the clip's (only the last block has any padding,
    # and with none nothing is masked), for every row of the batch alike
    valid = torch.nn.functional.pad(padded.new_ones(frames), (0, padded.shape[1] - frames)).reshape(blocks, size)
    valid = valid.bool()
    masked = ~(valid[:, :, None] & valid[:, None, :])  # [blocks, size, size]
    positions = positions.masked_fill(masked[None, :, None], -torch.finfo(positions.dtype).max)
    # SDPA's math written out (the model asks for that backend): a view of the exported SDPA's output fails
    weights = torch.softmax(torch.matmul(query, key.transpose(-1, -2)) * self.scale + positions, dim=-1)
    out = torch.matmul(weights, value).transpose(2, 3).flatten(3).flatten(1, 2)
    return self.dropout(self.to_out(out[:, :frames, :]))


def window_projector(self: Any, hidden_states: Any) -> Any:
    """The projector's forward, padded to whole windows by ``-length % window_size`` frames."""
    import torch

    frames = hidden_states.shape[1]
    padded = torch.nn.functional.pad(hidden_states, (0, 0, 0, (-frames) % self.window_size), "constant", 0)
    windows = padded.shape[1] // self.window_size
    out = self.qformer(query_embeds=self.query, encoder_attention_mask=None, return_dict=True,
                       encoder_hidden_states=padded.unflatten(1, (windows, self.window_size)).flatten(0, 1))
    # each clip's windows' queries one after another (flattened, as in block_attention)
    return self.linear(out.last_hidden_state.unflatten(0, (-1, windows)).flatten(1, 2))


def _holds(module: Any, names: tuple[str, ...]) -> bool:
    """Whether ``module`` holds every one of ``names`` itself (its own attributes, submodules or parameters: never
    asked through ``getattr``, which reads a diffusers model's config with a deprecation warning) and its forward
    takes :data:`CALLS`' parameters."""
    import inspect

    held = {*vars(module), *getattr(module, "_modules", {}), *getattr(module, "_parameters", {})}
    if not set(names) <= held:
        return False
    try:
        return tuple(inspect.signature(type(module).forward).parameters) == CALLS[names]
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return False


@contextlib.contextmanager
def traceable_blocks(model: Any) -> Iterator[list[str]]:
    """Within: every block attention and window projector of ``model`` runs its branch-free form; yields their
    names. Their own forwards come back on leaving."""
    from .lending import lent

    found = [(name, m, block_attention if _holds(m, ATTENTION) else window_projector)
             for name, m in (model.named_modules() if hasattr(model, "named_modules") else [])
             if _holds(m, ATTENTION) or _holds(m, PROJECTOR)]
    with lent([(m, "forward", form.__get__(m)) for _, m, form in found]):
        yield [name for name, _, _ in found]


PATCH = Patch(
    name="blocks",
    applies_to="attention within blocks of context_size frames with relative positions (context_size, rel_pos_emb, "
               "to_q, to_kv, to_out, pre_norm), and projectors pooling windows of window_size frames into queries "
               "(window_size, downsample_rate, query, qformer, linear)",
    replaces="the model's branch on whether the last block is full and its in-place mask of the padded frames",
    why="the trace keeps the sample's answer: the file takes clips of the sample's length only",
    during=traceable_blocks)
