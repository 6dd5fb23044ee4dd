"""Diffusion pipelines (Stable Diffusion-like diffusers pipelines) written as their text encoder, UNet and VAE decoder
files; the scheduler and the loop stay Python.

- ``adapter.py``: the adapter (:class:`~.adapter.DiffusersAdapter`).
- ``export.py``: each part through the PyTorch route at its own sample, checked at other shapes.
- ``result.py``: :class:`~.result.DiffusionExport` and :class:`~.result.DiffusionParity`.
- ``pipeline.py``: :func:`onnx_nb.to_diffusers`, the files in a diffusers pipeline's place, timed per part.
- ``parity.py``: :func:`onnx_nb.check_diffusion` (an image through both pipelines, PSNR) and
  :func:`onnx_nb.unet_calibration` (the UNet's static INT8 calibration from real denoising steps)."""
