"""Vision-language models (image-text-to-text), written as three files as onnxruntime-genai's builder splits them:
``vision.onnx``, ``embed.onnx`` (the text embedding with the image features merged in) and ``decoder.onnx`` with its
cache, generated as a chain.

- ``adapter.py``: the adapter (:class:`~.adapter.VlmAdapter`): recognises the model, exports the three parts, checks
  the chain against the model's own forward, answers ``step_files``.
- ``parts.py``: the vision and merged-embedding modules, the samples counted from the model; ``chain.py``: the
  three files chained (the chain's logits, what the decoder takes for a prompt's ids); ``prompts.py``: prompts
  and token types; ``grid.py``: a grid family's vision file for every grid and its position columns (Qwen-VL);
  ``sized.py``, ``tiled.py``: Pixtral's and LLaVA-NeXT's vision files for any image size (cropped; tiled, packed
  by an index).
- ``result.py``: :class:`~.result.VlmExport`.
- ``runner.py``: the three files as one step runner for :func:`onnx_nb.generate` (:class:`~.runner.VlmDecoder`);
  ``parity.py``: generation parity on the chain (:class:`~.parity.VlmChain`); ``transformers_model.py``: the files
  as a transformers image-text-to-text model (:func:`onnx_nb.to_transformers`); ``timing.py``: the benchmark's rows.

The steps reach these through the registry's ``"chain"`` shape; the tower patches the export lends live with every
other export-time rewrite, in ``steps/export/patches/vision_towers.py``."""
