"""Hugging Face models (an object, a folder or a hub id; a SentenceTransformer): encoders and classifiers as one
file, causal LMs with their key/value cache (one graph for prefill and decode), encoder-decoders handed to
:mod:`onnx_nb.kinds.seq2seq` through the registry's ``"seq2seq"`` shape.

- ``adapter.py``: the adapter (:class:`~.adapter.HfAdapter`), which vision-language models, speech LLMs and the lean
  route build on.
- ``loading.py``: a model, its task and preprocessor from an object, a folder or a hub id (never remote code);
  ``tasks.py``: the task a class serves and the Auto class that loads it; ``samples.py``: sample inputs made from the
  model and its preprocessor; ``sentence.py``: a SentenceTransformer as one module, its pooling and normalisation
  inside; ``noise.py``: text-to-speech models drawing random numbers in eval mode (VITS's noise scales, SpeechT5's
  prenet draws) taking them as inputs."""
