"""onnx-nb's candidates in their own process, timed like the anchors (``benchmarks/generation.py`` runs every
ONNX candidate this way, so each gets a process of its own, as onnxruntime-genai and Optimum do):

    python onnxnb_generate.py MODEL.onnx --prompt 5,6,7 --new-tokens 64 --threads 2 [--runtime onnxruntime-genai]

One ``onnx_nb.generate()`` per line on stdin (``arguments.serve``; the session is built by the first and kept for
the next ones, as ``generate()`` keeps its last decoder), its tokens, time to first token, decode time and each
decode step's seconds as a JSON line.
"""

from __future__ import annotations


def main() -> None:
    from arguments import parse, serve  # beside this script

    args = parse()

    import onnx_nb

    prompt = [int(t) for t in args.prompt.split(",")]

    def generation() -> dict:
        result = onnx_nb.generate(args.folder, [prompt], max_new_tokens=args.new_tokens, eos_token_id=-1,
                                  threads=args.threads, runtime=args.runtime)
        return {"tokens": result.tokens[0], "ttft": result.prefill_ms / 1e3, "decode": sum(result.decode_ms) / 1e3,
                "steps": [t / 1e3 for t in result.decode_ms]}

    serve(generation)


if __name__ == "__main__":
    main()
