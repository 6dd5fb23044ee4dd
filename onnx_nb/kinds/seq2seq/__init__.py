"""Encoder-decoders (T5, BART, Marian, Pegasus, Whisper, ...) written as two files: the encoder (which also computes
every decoder layer's cross-attention keys and values, once) and the decoder with its self-attention cache.
Hugging Face's adapter opens them and hands their export to this package through the registry's ``"seq2seq"``
shape.

- ``export.py``: both files through the export's stage-check-publish loop, each checked at other shapes.
- ``runner.py``: the two files in ONNX Runtime (:class:`~.runner.OnnxSeq2Seq`), ``generate()``'s loop, a variant's
  decoder beside the export's encoder (:class:`~.runner.BesideEncoder`).
- ``parity.py``: generation parity (:class:`~.parity.Seq2SeqParity`: inputs of three lengths or audio, the decoder's
  steps under teacher forcing, greedy tokens and beams against PyTorch's).
- ``transformers_model.py``: the files as a transformers model (Whisper's own ``generate()`` where the model's class
  has it).
- ``timing.py``: the benchmark's decode-step rows, PyTorch eager beside them.

What the files take and carry (cache names, the encoder's inputs, the export wrappers) is the export machinery's:
``steps/export/caches/seq2seq.py``."""
