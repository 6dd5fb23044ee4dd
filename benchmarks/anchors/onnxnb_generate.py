"""onnx-nb's candidates in their own process, timed like the anchors (``benchmarks/generation.py`` runs every
ONNX candidate this way, so each gets a fresh process, as onnxruntime-genai and Optimum do):

    python onnxnb_generate.py MODEL.onnx --prompt 5,6,7 --new-tokens 64 --threads 2 [--repeat 2]

Prints one JSON line per repeat: tokens, time to first token (s), decode time (s) and each decode step's seconds.
The first repeat is the caller's untimed warm-up.
"""

from __future__ import annotations

import json


def main() -> None:
    from arguments import parse  # beside this script

    args = parse()

    import onnx_nb

    prompt = [int(t) for t in args.prompt.split(",")]
    for _ in range(args.repeat):
        result = onnx_nb.generate(args.folder, [prompt], max_new_tokens=args.new_tokens, eos_token_id=-1)
        print(json.dumps({"tokens": result.tokens[0], "ttft": result.prefill_ms / 1e3,
                          "decode": sum(result.decode_ms) / 1e3, "steps": [t / 1e3 for t in result.decode_ms]}),
              flush=True)


if __name__ == "__main__":
    main()
