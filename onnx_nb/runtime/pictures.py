"""Pictures as a user holds them (PIL images, image files, ``[height, width, 3]`` uint8 arrays) made into the pixel
values a model's image processor gives; a processor made of an image processor and a tokenizer saved side by side."""

from __future__ import annotations

import os
from typing import Any

from ..errors import InvalidArgumentError


def listed(items: Any) -> list[Any]:
    """One image or clip given alone (an array, a PIL image, a path) as a list of one."""
    import numpy as np

    return [items] if isinstance(items, (np.ndarray, str, os.PathLike)) or hasattr(items, "convert") else list(items)


class Pictures(list):
    """Images given as ``images=`` to a model that reads them as its inputs (an image-to-text encoder-decoder): a
    list of pictures, marked so that a model of other inputs refuses them by name."""


class ImageTextProcessor:
    """An image processor and a tokenizer saved side by side with no processor class naming both (ViT-GPT2's
    folder): used as a processor is (``image_processor``, ``tokenizer``, ``decode``, ``save_pretrained``)."""

    def __init__(self, image_processor: Any, tokenizer: Any) -> None:
        self.image_processor, self.tokenizer = image_processor, tokenizer

    def decode(self, *args: Any, **kwargs: Any) -> Any:
        return self.tokenizer.decode(*args, **kwargs)

    def batch_decode(self, *args: Any, **kwargs: Any) -> Any:
        return self.tokenizer.batch_decode(*args, **kwargs)

    def save_pretrained(self, folder: Any) -> None:
        self.image_processor.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)


def image_processor_of(processor: Any) -> Any:
    """The image processor of ``processor`` (a processor's, or itself), None where it makes no pixel values."""
    found = getattr(processor, "image_processor", processor)
    return found if found is not None and "pixel_values" in (getattr(found, "model_input_names", None) or ()) \
        else None


def is_pictures(inputs: Any) -> bool:
    """Whether ``inputs`` are images as a user holds them (what :func:`pictures_of` reads): a PIL image, an image
    file's path, a ``[height, width, 3]`` uint8 array, or a list of them."""
    import numpy as np

    items = inputs if isinstance(inputs, (list, tuple)) and inputs else [inputs]
    return all(hasattr(i, "convert") or isinstance(i, (str, os.PathLike)) or (
        isinstance(i, np.ndarray) and i.dtype == np.uint8 and i.ndim == 3 and i.shape[-1] == 3) for i in items)


def pictures_of(images: Any) -> list[Any]:
    """``images`` (one, or a list: PIL images, image files, ``[height, width, 3]`` uint8 arrays) as writable
    ``[height, width, 3]`` uint8 RGB arrays."""
    import numpy as np
    from PIL import Image

    out = []
    for image in listed(images):
        if isinstance(image, (str, os.PathLike)):
            if not os.path.isfile(image):
                raise InvalidArgumentError(f"No image file at {str(image)!r}: give an image's path, a PIL image or "
                                           "a [height, width, 3] uint8 array.")
            image = Image.open(image)
        array = np.array(image.convert("RGB") if hasattr(image, "convert") else image)
        if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
            raise InvalidArgumentError(f"An image of {array.shape} {array.dtype}: give PIL images, image files or "
                                       "[height, width, 3] uint8 arrays.")
        out.append(array)
    return out


def pixel_values_of(images: Any, processor: Any) -> dict[str, Any]:
    """``{"pixel_values": ...}`` (float32) for ``images`` (:func:`pictures_of`) from ``processor``'s image
    processor."""
    import numpy as np

    made = image_processor_of(processor)
    if made is None:
        raise InvalidArgumentError("Images need the model's image processor: export from a folder or hub id that "
                                   "holds one (preprocessor_config.json), or pass {'pixel_values': array} made by it.")
    return {"pixel_values": np.asarray(made(pictures_of(images), return_tensors="np")["pixel_values"], np.float32)}
