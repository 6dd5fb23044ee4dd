"""Anchor: greedy generation with Optimum's ``ORTModelForCausalLM`` on a folder ``optimum-cli export onnx --task
text-generation-with-past`` wrote. Runs in a side environment (optimum-onnx pins transformers<4.58:
``pip install optimum-onnx onnxruntime torch``), called by ``benchmarks/generation.py``.

    python optimum_generate.py FOLDER --prompt 5,6,7 --new-tokens 64 --threads 2

The model is loaded once, not timed; then one generation per line on stdin (``arguments.serve``): tokens, time to
first token (s; ``generate()`` of one token), decode time (s; the rest) and each decode step's seconds.
"""

from __future__ import annotations

import time


def main() -> None:
    from arguments import StepClock, parse, serve  # beside this script

    args = parse()

    import onnxruntime as ort
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    model = ORTModelForCausalLM.from_pretrained(args.folder, session_options=options, use_cache=True)
    ids = torch.tensor([[int(t) for t in args.prompt.split(",")]])
    mask = torch.ones_like(ids)

    def generation() -> dict:
        start = time.perf_counter()
        model.generate(ids, attention_mask=mask, max_new_tokens=1, do_sample=False, pad_token_id=0)
        first = time.perf_counter() - start
        clock = StepClock()
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, max_new_tokens=args.new_tokens,
                             min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None,
                             streamer=clock)
        total = time.perf_counter() - start
        tokens = [int(t) for t in out[0, ids.shape[1]:]]
        return {"tokens": tokens, "ttft": first, "decode": max(total - first, 1e-9), "steps": clock.steps()}

    serve(generation)


if __name__ == "__main__":
    main()
