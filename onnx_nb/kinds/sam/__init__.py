"""Segment Anything (SAM) written as two files: the image encoder (run once per image) and the prompt encoder with
the mask decoder (run per prompt).

- ``adapter.py``: the adapter (:class:`~.adapter.SamAdapter`): recognises a SAM object, folder or hub id.
- ``export.py``: the two parts as modules, their samples (points, boxes), the check at other shapes.
- ``result.py``: :class:`~.result.SamExport` and :class:`~.result.SamParity`.
- ``parity.py``: :func:`onnx_nb.check_sam`, the two files chained in ONNX Runtime against the model (masks by pixel
  IoU, IoU scores)."""
