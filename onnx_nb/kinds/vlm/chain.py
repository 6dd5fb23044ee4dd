"""The three files of a vision-language export chained in ONNX Runtime: the image rows with their position columns
(:func:`with_positions`), what the decoder takes for a prompt's ids (:func:`token_feed`), and the prompt's logits
through vision, embed and the decoder's prefill (:func:`chain_logits`, the export's check). Only imported by
functions that already need the runtime."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidArgumentError
from ...runtime.facts import IMAGE_GRID as GRID
from .parts import COLUMNS, PARTS, POSITIONS, per_image
from .prompts import check_counts


def chain_logits(folder: Any, pixels: dict[str, Any], ids: Any, image_token: int, model: Any) -> Any:
    """The prompt's logits through the three files in ONNX Runtime (vision, embed, the decoder's prefill with an
    empty cache): what the export's check compares with the model's own forward."""
    import numpy as np

    from ...runtime.sessions import session
    from ...steps.generate.runners import OnnxDecoder

    vision, embed = (session(folder / f"{part}.onnx") for part in PARTS[:2])
    decoder = OnnxDecoder(folder / f"{PARTS[2]}.onnx")
    features = with_positions(embed, per_image(vision, pixels, model), pixels, model, image_token)
    check_counts(ids, image_token, int(features.shape[0]))
    batch, width = ids.shape
    positions = np.tile(np.arange(width, dtype=np.int64), (batch, 1))
    # the cache empty (keys and values [batch, heads, 0, size]; states at zero, the prompt then one token a step)
    logits, _ = decoder.run_tokens({"position_ids": positions, **token_feed(embed, ids, features, positions)},
                                   np.ones((batch, width), np.int64), decoder.empty_cache(batch))
    return logits


def token_feed(embed: Any, ids: Any, features: Any, positions: Any) -> dict[str, Any]:
    """What the decoder file takes for ``ids``: their embeddings from the embed file (``features`` merged at the
    image tokens; none: every token is text), their ``token_type_ids`` where the decoder reads them, and their
    three position sections from their text ``positions`` (Qwen-VL)."""
    import numpy as np

    inputs = {i.name: i for i in embed.get_inputs()}
    rows = list(inputs)[1]  # image_features (an audio file's embed: audio_features)
    given = {"input_ids": ids.astype(np.int64), rows: features, "text_position_ids": positions}
    if POSITIONS in inputs:  # a grid family's rows carry their position columns last (with_positions): its own input
        packed = features.shape[-1] != inputs["image_features"].shape[-1]
        given["image_features"] = features[:, :-COLUMNS] if packed else features
        given[POSITIONS] = np.rint(features[:, -COLUMNS:]).astype(np.int64) if packed else \
            np.zeros((features.shape[0], COLUMNS), np.int64)
    out = embed.run(None, {name: given[name] for name in inputs})
    return {o.name: value for o, value in zip(embed.get_outputs(), out)}


def with_positions(embed: Any, images: list[Any], pixels: dict[str, Any], model: Any, image_token: int) -> Any:
    """The images' feature rows (:func:`per_image`) one after another, each with its position columns last where the
    embed file numbers three sections (it takes ``image_positions``: :func:`token_feed` hands them to it as int64),
    read from ``model`` per image grid (:func:`.grid.position_columns`): one array for the runners to hold,
    split and repeat by rows (float32 holds those whole numbers exactly)."""
    import numpy as np

    features = np.concatenate(images, 0)
    if not features.shape[0] or POSITIONS not in {i.name for i in embed.get_inputs()}:
        return features
    if model is None:
        raise InvalidArgumentError(
            "This model's embed file numbers positions by each image's grid, which the model's own get_rope_index "
            "says: run the files through the export's result (onnx_nb.generate(result, ...)), which holds the model.")
    from .grid import position_columns

    grids = np.asarray(pixels[GRID]).reshape(-1, 3)
    columns = position_columns(model, image_token, grids, [int(x.shape[0]) for x in images]).numpy()
    return np.concatenate([features.astype(np.float32), columns.astype(np.float32)], 1)
