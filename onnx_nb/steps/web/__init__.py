"""Deploying to the web: an export and its variants as the folder transformers.js loads, checked by transformers.js
itself (:func:`onnx_nb.to_transformers_js`)."""
