"""Anchor: greedy generation with onnxruntime-genai on a folder its model builder wrote. Runs in a side
environment (``pip install onnxruntime-genai onnx_ir torch transformers``), called by ``benchmarks/generation.py``.

    python genai_generate.py FOLDER --prompt 5,6,7 --new-tokens 64 --threads 2

The model is loaded once, not timed; then one generation per line on stdin (``arguments.serve``), its tokens, time
to first token, decode time and each decode step's seconds (around ``generate_next_token()``) as a JSON line.
"""

from __future__ import annotations

import json
import time


def main() -> None:
    from arguments import parse, serve  # beside this script

    args = parse()

    config_path = args.folder / "genai_config.json"
    config = json.loads(config_path.read_text())
    config["model"]["decoder"]["session_options"]["intra_op_num_threads"] = args.threads
    config_path.write_text(json.dumps(config, indent=2))

    import onnxruntime_genai as og

    model = og.Model(str(args.folder))
    prompt = [int(t) for t in args.prompt.split(",")]

    def generation() -> dict:
        params = og.GeneratorParams(model)
        length = len(prompt) + args.new_tokens  # min_length too: exactly --new-tokens, as the other candidates
        params.set_search_options(do_sample=False, max_length=length, min_length=length)
        start = time.perf_counter()
        generator = og.Generator(model, params)
        generator.append_tokens(prompt)
        generator.generate_next_token()
        first = time.perf_counter() - start
        start = time.perf_counter()
        steps = []
        while not generator.is_done():
            step = time.perf_counter()
            generator.generate_next_token()
            steps.append(time.perf_counter() - step)
        decode = time.perf_counter() - start
        tokens = [int(t) for t in generator.get_sequence(0)][len(prompt):]
        return {"tokens": tokens, "ttft": first, "decode": decode, "steps": steps}

    serve(generation)


if __name__ == "__main__":
    main()
