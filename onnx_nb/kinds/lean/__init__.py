"""The lean route (``export(folder or hub id, precision=...)``): a decoder written layer by layer straight from its
safetensors checkpoint, no PyTorch model built, at fp32, fp16, INT8 or INT4, in a fraction of the weights' memory.

- ``adapter.py``: the adapter (:class:`~.adapter.LeanAdapter`), and what it offers a decoder another route cannot
  export (``offers``: too big to load, failing to trace).
- ``families.py``: the families it writes (dense and mixture-of-experts), each family's names and settings.
- ``graph.py``: the graph, one layer at a time (attention as GroupQueryAttention, experts as QMoE).
- ``weights.py``: the weight-only blocks (round-to-nearest, k-quant, HQQ), one projection at a time; the settings
  ``precision=`` takes are checked with every other ``export()`` argument (``steps/export/precision.py``).
- ``safetensors_file.py``: the checkpoint read tensor by tensor (pread, never mapped).
- ``export.py``: the route through the export's stage-check-publish loop, checked against PyTorch on a prefill and
  decode steps where the model fits in memory."""
