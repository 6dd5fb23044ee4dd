"""Anchor: transformers' generate() with Optimum's ``ORTModelForSeq2SeqLM`` on a folder ``optimum-cli export onnx
--task text2text-generation-with-past`` wrote. Runs in a side environment (optimum-onnx pins transformers<4.58:
``pip install torch==2.13.0 optimum-onnx onnxruntime``), called by ``benchmarks/beam_translation.py``.

    python optimum_seq2seq.py FOLDER --inputs batch.npz --new-tokens 24 --threads 2 [--threads-as-onnx-nb]

The model is loaded once, not timed; then one ``generate()`` (the folder's generation config: beams and all) of the
batch in ``batch.npz`` (``input_ids``, ``attention_mask``) per line on stdin (``arguments.serve``), printed as one
JSON line: the tokens and the seconds. ``--threads-as-onnx-nb``: the thread settings ``onnx_nb.to_transformers``
uses, so the two are also compared like with like: ONNX Runtime's threads stop spinning after each run
(``session.force_spinning_stop``) and torch's work between the runs takes one thread.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> None:
    from arguments import serve  # beside this script

    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--inputs", type=Path, required=True)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--threads-as-onnx-nb", action="store_true")
    args = parser.parse_args()

    import numpy as np
    import onnxruntime as ort
    import torch
    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    torch.set_num_threads(args.threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    if args.threads_as_onnx_nb:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    model = ORTModelForSeq2SeqLM.from_pretrained(args.folder, session_options=options, use_cache=True)
    batch = np.load(args.inputs)
    ids, mask = torch.from_numpy(batch["input_ids"]), torch.from_numpy(batch["attention_mask"])

    def generation() -> dict:
        start = time.perf_counter()
        torch.set_num_threads(1 if args.threads_as_onnx_nb else args.threads)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new_tokens)
        torch.set_num_threads(args.threads)
        return {"tokens": out.tolist(), "seconds": time.perf_counter() - start}

    serve(generation)


if __name__ == "__main__":
    main()
