"""Anchor: greedy generation with llama.cpp (its Python package, ``llama-cpp-python``, built from source in a side
environment: ``pip install --no-binary llama-cpp-python llama-cpp-python``) on a GGUF file, called by
``benchmarks/lean_decoder.py --llamacpp PYTHON``.

    python llamacpp_generate.py MODEL.gguf --prompt 5,6,7 --new-tokens 64 --threads 2

The model is loaded once, not timed; then one generation per line on stdin (``arguments.serve``): the prompt's ids
evaluated (prefill), then one token at a time, each the argmax of the last logits (greedy, no repetition penalty),
with its tokens, time to first token, decode time and each decode step's seconds as a JSON line.
"""

from __future__ import annotations

import time


def main() -> None:
    import numpy as np
    from arguments import parse, serve  # beside this script

    args = parse()
    import llama_cpp
    from llama_cpp import Llama

    prompt = [int(t) for t in args.prompt.split(",")]
    llm = Llama(model_path=str(args.folder), n_ctx=len(prompt) + args.new_tokens + 8, n_threads=args.threads,
                n_threads_batch=args.threads, n_batch=512, verbose=False)
    vocab = llm.n_vocab()

    def last() -> int:  # the argmax of the last evaluated token's logits (kept by llama.cpp, not copied out)
        return int(np.argmax(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(vocab,))))

    def generation() -> dict:
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        token = last()
        first = time.perf_counter() - start
        tokens, steps = [token], []
        start = time.perf_counter()
        while len(tokens) < args.new_tokens:
            step = time.perf_counter()
            llm.eval([token])
            token = last()
            steps.append(time.perf_counter() - step)
            tokens.append(token)
        return {"tokens": tokens, "ttft": first, "decode": time.perf_counter() - start, "steps": steps}

    serve(generation)


if __name__ == "__main__":
    main()
