"""onnx-nb's INT4 file and onnxruntime-genai's builder INT4 folder in ONE process, generations alternating
(``benchmarks/generation.py`` runs it at the end when onnxruntime-genai is installed beside onnx-nb):

    python int4_one_process.py ONNX_NB_INT4.onnx BUILDER_FOLDER --prompt 5,6,7 --new-tokens 64 --threads 2 [--rounds 10]

The main table runs every candidate in a process of its own; processes started at different moments do not get
the same machine (memory placement, caches, the host's other tenants), and on this 2-core host that alone moves a
candidate by 5-10 %. Here three candidates share one process and take turns, generation by generation, in a
shuffled order each round with an untimed generation first: onnxruntime-genai's runtime on the builder's folder,
``onnx_nb.generate()`` on onnx-nb's file, and ``onnx_nb.generate(runtime="onnxruntime-genai")`` on it. Prints each
candidate's decode tokens/s (one over the median step, median of the rounds) and the median of its per-round ratio
to the builder's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("onnx_nb_file")
    parser.add_argument("builder_folder")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()

    import onnxruntime_genai as og

    import onnx_nb
    from onnx_nb.steps.generate import runners

    prompt = [int(t) for t in args.prompt.split(",")]
    length = len(prompt) + args.new_tokens
    builder = og.Model(args.builder_folder)  # its genai_config.json has the threads (generation.py set them)

    def genai_builder() -> float:
        params = og.GeneratorParams(builder)
        params.set_search_options(do_sample=False, max_length=length, min_length=length)
        generator = og.Generator(builder, params)
        generator.append_tokens(prompt)
        generator.generate_next_token()
        steps = []
        while not generator.is_done():
            start = time.perf_counter()
            generator.generate_next_token()
            steps.append(time.perf_counter() - start)
        return statistics.median(steps)

    kept: dict[str, dict] = {}  # generate() keeps one runner: each candidate's is put back before its turn

    def onnx_nb_generate(runtime: str) -> float:
        if runtime in kept:
            runners.LAST_RUNNER.clear()
            runners.LAST_RUNNER.update(kept[runtime])
        result = onnx_nb.generate(args.onnx_nb_file, [prompt], max_new_tokens=args.new_tokens, eos_token_id=-1,
                                  threads=args.threads, runtime=runtime)
        kept[runtime] = dict(runners.LAST_RUNNER)
        return statistics.median(result.decode_ms) / 1e3

    candidates = {
        "onnxruntime-genai runtime, builder INT4 folder": genai_builder,
        "onnx-nb generate(), onnx-nb INT4 file": lambda: onnx_nb_generate("onnx-nb"),
        "onnx-nb generate(runtime='onnxruntime-genai'), onnx-nb INT4 file": lambda: onnx_nb_generate(
            "onnxruntime-genai"),
    }
    steps: dict[str, list[float]] = {name: [] for name in candidates}
    for round_ in range(args.rounds):
        order = list(candidates)
        random.Random(round_).shuffle(order)
        for name in order:
            candidates[name]()  # untimed
            steps[name].append(candidates[name]())
    base = steps["onnxruntime-genai runtime, builder INT4 folder"]
    print(f"INT4 in one process, {args.rounds} rounds:")
    for name, values in steps.items():
        ratios = [b / v for v, b in zip(values, base)]
        print(f"  {name:68} {1 / statistics.median(values):6.1f} tok/s  {statistics.median(ratios):.2f}x the builder's "
              f"(rounds {min(ratios):.2f}-{max(ratios):.2f})", flush=True)


if __name__ == "__main__":
    main()
