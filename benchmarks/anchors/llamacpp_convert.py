"""A Hugging Face Llama checkpoint to GGUF with llama.cpp's own converter (``convert_hf_to_gguf.py`` of a llama.cpp
source tree: the llama-cpp-python sdist's ``vendor/llama.cpp``), run with onnx-nb's environment (torch, transformers);
called by ``benchmarks/lean_decoder.py --llamacpp``.

    python llamacpp_convert.py LLAMA_CPP_DIR CHECKPOINT OUT.gguf --outtype f32

The benchmark's checkpoint carries a WordPiece tokenizer (only its ids matter: every candidate is fed token ids), which
the converter cannot map to a llama.cpp tokenizer; its Llama vocabulary is taken from llama.cpp's own
``models/ggml-vocab-llama-spm.gguf`` instead (the converter's ``_set_vocab_builtin``, as it does for OpenELM), with
the checkpoint's 32,000 ids. The weights and their layout are the converter's own.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    source, checkpoint, out, *rest = sys.argv[1:]
    sys.path[0] = source  # the converter reads its built-in vocabularies from sys.path[0]/models
    sys.path.insert(1, str(Path(source) / "gguf-py"))
    from conversion.llama import LlamaModel

    LlamaModel.set_vocab = lambda self: self._set_vocab_builtin("llama-spm", self.hparams["vocab_size"])
    import convert_hf_to_gguf

    sys.argv = ["convert_hf_to_gguf.py", checkpoint, "--outfile", out, *rest]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
