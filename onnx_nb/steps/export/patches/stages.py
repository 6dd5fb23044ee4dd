"""A depth model's reassemble stage that stacks its backbone stages along the batch and splits them again by the
batch size (ZoeDepth: ``torch.cat(stages)`` then ``split(batch_size)``, each piece through its own readout projection
and resize layer).

With a symbolic batch the split's piece count is ``(4 * batch + batch - 1) // batch``, which torch.export cannot
simplify to 4: it guarded on it and fixed the batch at the sample's, and TorchScript's file baked the split sizes
(ONNX Runtime: "Cannot split using values in 'split' attribute"). Within :func:`stage_by_stage` each stage goes
through its readout projection and layer on its own: the same rows through the same modules (the projection and
the layers work per image), so the same values, without the stacking.

Recognised by what the module holds and takes, not by family: ``readout_type`` "project", ``layers`` and as many
``readout_projects``, a forward of ``(hidden_states, patch_height, patch_width)`` with every size required, and no
stages to ignore (DPT's ``neck_ignore_stages``: its hybrid backbone's stages take another path, and its stage does
not stack them; CHMv2's stage, its sizes optional, takes feature-map and token pairs and projects no readout).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

from .contract import Patch

CALL = ("self", "hidden_states", "patch_height", "patch_width")


def staged_forward(self: Any, hidden_states: Any, patch_height: Any, patch_width: Any) -> list[Any]:
    """The stage's forward, one backbone stage at a time: the class token's readout concatenated to each patch,
    projected, laid out as an image, resized by the stage's layer."""
    import torch

    out = []
    for index, stage in enumerate(hidden_states):
        batch = stage.shape[0]
        token, patches = stage[:, 0], stage[:, 1:]
        patches = patches.reshape(batch, patch_height, patch_width, -1).permute(0, 3, 1, 2).contiguous()
        patches = patches.flatten(2).permute((0, 2, 1))
        patches = torch.cat((patches, token.unsqueeze(dim=1).expand_as(patches)), -1)
        patches = self.readout_projects[index](patches)
        patches = patches.permute(0, 2, 1).reshape(batch, -1, patch_height, patch_width)
        out.append(self.layers[index](patches))
    return out


def _is_stacking_stage(module: Any) -> bool:
    projects, layers = getattr(module, "readout_projects", None), getattr(module, "layers", None)
    if getattr(module, "readout_type", None) != "project" or hasattr(module, "neck_ignore_stages") \
            or projects is None or layers is None or len(projects) != len(layers):
        return False
    try:
        parameters = inspect.signature(type(module).forward).parameters
    except (TypeError, ValueError):
        return False
    # every size required: CHMv2's stage (sizes defaulting to None) takes (feature map, token) pairs and projects
    # no readout
    return tuple(parameters) == CALL and all(p.default is p.empty for p in parameters.values())


@contextlib.contextmanager
def stage_by_stage(model: Any) -> Iterator[list[str]]:
    """Within: every such stage of ``model`` handles its backbone stages one at a time; yields their names. Their
    own forwards come back on leaving."""
    from .lending import lent_to_modules

    with lent_to_modules(model, _is_stacking_stage, staged_forward) as names:
        yield names


PATCH = Patch(
    name="stages",
    applies_to="reassemble stages holding readout_type 'project', layers and as many readout_projects, called with "
               "(hidden_states, patch_height, patch_width), with no neck_ignore_stages",
    replaces="stacking the backbone's stages along the batch and splitting them by the batch size",
    why="the split's piece count is a size expression torch.export cannot simplify: it fixed the batch at the "
        "sample's, and TorchScript baked the split sizes",
    during=stage_by_stage)
