"""Hugging Face models (an object, a folder or a hub id; a SentenceTransformer): encoders and classifiers as one
file, causal LMs with their key/value cache (one graph for prefill and decode), encoder-decoders handed to
:mod:`onnx_nb.kinds.seq2seq` through the registry's ``"seq2seq"`` shape. ``source.py`` is the adapter
(:class:`~.source.HfSource`), which vision-language models and the lean route build on; loading, tasks, samples and
sentence-transformers' pooling are the export machinery's (``steps/export/hf/``), which other kinds load with too."""
