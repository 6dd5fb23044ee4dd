"""Models from outside PyTorch, and ONNX files made elsewhere: Keras (on torch: the PyTorch route; on TensorFlow or
JAX: tf2onnx or Keras's own export), TensorFlow (a SavedModel, a ``tf.Module``), scikit-learn (skl2onnx), an
``.onnx`` file adopted in place.

- ``keras_adapter.py``, ``sklearn_adapter.py``, ``onnx_adapter.py``: the adapters; ``beyond.py``: what the kinds with
  no PyTorch model share (their refusals, their native references).
- ``keras_export.py``, ``sklearn_export.py``: the converters; ``converting.py``: the converters' route through the
  export's stage-check-publish loop, checked at another shape; ``onnx_adopt.py``: an adopted file's check."""
