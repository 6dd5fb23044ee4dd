"""4-beam translation on a Marian-base-sized model: transformers' generate() on the ONNX files
(``onnx_nb.to_transformers``) against PyTorch eager's generate(), in one run.

    .venv/bin/python benchmarks/beam_translation.py [--rounds 3] [--threads 2] [--out onnx_nb_out/beams]
        [--optimum-python SIDE/bin/python]

MarianMTModel with random weights at opus-mt-en-de's size (6 + 6 layers, d_model 512, 8 heads, FFN 2048,
vocabulary 58,101), its generation config (4 beams, bad word = pad, forced EOS at the length limit), a batch
of 4 "sentences" of 12-20 token ids, 24 new tokens at most. Both candidates run the same ``generate()`` call
(transformers' beam search; the ONNX one's forward is ONNX Runtime over the encoder file and the decoder file
with its cache); visited in a shuffled order each round with untimed runs first
(``onnx_nb.runtime.timing.interleaved``). Prints the median seconds per batch, the ratio, whether the tokens are
equal, and the load average.

``--optimum-python``: a side environment with ``torch==2.13.0 optimum-onnx onnxruntime`` (optimum-onnx pins
transformers < 4.58); the model is saved with ``save_pretrained``, exported by ``optimum-cli export onnx --task
text2text-generation-with-past`` and run by Optimum's ``ORTModelForSeq2SeqLM`` in a process of its own
(``anchors/optimum_seq2seq.py``, which waits on its pipe while the others run), as it comes and with the thread
settings ``to_transformers`` uses (ONNX Runtime's threads stop spinning after a run, ``session.force_spinning_stop``;
torch's beam search between the runs on one thread), so that the two are also compared like with like.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "anchors"))
from arguments import Served


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--out", default=None)
    parser.add_argument("--optimum-python", default=None, help="a side environment's python with optimum-onnx")
    args = parser.parse_args()

    import torch
    import transformers

    import onnx_nb
    from onnx_nb.runtime.timing import interleaved

    torch.set_num_threads(args.threads)
    config = transformers.MarianConfig(
        vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
        decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, max_position_embeddings=512,
        pad_token_id=58100, eos_token_id=0, decoder_start_token_id=58100, forced_eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    model.generation_config = transformers.GenerationConfig(
        num_beams=4, bad_words_ids=[[58100]], max_length=512, decoder_start_token_id=58100, eos_token_id=0,
        pad_token_id=58100, forced_eos_token_id=0)
    gen = torch.Generator().manual_seed(1)
    lengths = [12, 15, 18, 20]
    ids = torch.full((4, max(lengths)), 58100)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n - 1] = torch.randint(5, 58000, (n - 1,), generator=gen)
        ids[row, n - 1] = 0
        mask[row, :n] = 1
    out = Path(args.out or tempfile.mkdtemp(prefix="beams-"))
    result = onnx_nb.export(model, out=out / "marian.onnx", overwrite=True)
    wrapped = onnx_nb.to_transformers(result, threads=args.threads)

    def run(candidate: object) -> torch.Tensor:
        with torch.no_grad():
            return candidate.generate(input_ids=ids, attention_mask=mask, max_new_tokens=24)  # type: ignore[attr-defined]

    candidates = {"PyTorch eager": lambda: run(model), "onnx-nb (to_transformers)": lambda: run(wrapped)}
    if args.optimum_python:
        candidates.update(optimum_anchors(args, model, ids, mask, out))
    tokens = {name: candidate() for name, candidate in candidates.items()}
    times = interleaved(candidates, rounds=args.rounds, warmup=1, runs=2)
    for candidate in candidates.values():
        getattr(candidate, "close", lambda: None)()
    eager = statistics.median(times["PyTorch eager"])
    print(f"Marian-base-sized, 4 sentences x 4 beams, 24 new tokens at most, {args.threads} threads")
    for name, values in times.items():
        median = statistics.median(values)
        same = torch.equal(torch.as_tensor(tokens[name]), tokens["PyTorch eager"])
        print(f"  {name:48s} {median * 1e3:8.1f} ms per batch   {eager / median:5.2f}x PyTorch eager   "
              f"tokens equal to PyTorch's: {same}")
    print(f"  load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


class OptimumAnchor(Served):
    """Optimum's ORTModelForSeq2SeqLM in the side environment: each call one generate() of the batch, its tokens."""

    def __call__(self) -> list[list[int]]:
        return list(self.request()["tokens"])


def optimum_anchors(args: argparse.Namespace, model: object, ids: object, mask: object,
                    out: Path) -> dict[str, OptimumAnchor]:
    import numpy as np

    folder, exported = out / "hf", out / "optimum"
    model.save_pretrained(folder)  # type: ignore[attr-defined]
    subprocess.run([str(Path(args.optimum_python).parent / "optimum-cli"), "export", "onnx", "--model", str(folder),
                    "--task", "text2text-generation-with-past", str(exported)], check=True, capture_output=True)
    np.savez(out / "batch.npz", input_ids=ids.numpy(), attention_mask=mask.numpy())  # type: ignore[attr-defined]
    command = [args.optimum_python, str(Path(__file__).parent / "anchors" / "optimum_seq2seq.py"), str(exported),
               "--inputs", str(out / "batch.npz"), "--new-tokens", "24", "--threads", str(args.threads)]
    return {"Optimum ORTModelForSeq2SeqLM": OptimumAnchor(command),
            "Optimum ORTModelForSeq2SeqLM, onnx-nb's thread settings": OptimumAnchor([*command,
                                                                                       "--threads-as-onnx-nb"])}


if __name__ == "__main__":
    main()
