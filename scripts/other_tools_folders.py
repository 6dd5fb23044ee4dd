"""Writes tests/data/other_tools/: a tiny Llama's PyTorch folder and the generation folders Optimum's ONNX exporter
writes for it, read by tests/test_foreign_folders.py (onnx-nb checks files other tools wrote against the model they
came from). Optimum pins transformers<4.58, so this runs in a side environment, never in the project's:

    python3 -m venv /tmp/optimum && /tmp/optimum/bin/pip install torch==2.13.0 && \
        /tmp/optimum/bin/pip install optimum-onnx onnxruntime
    /tmp/optimum/bin/python scripts/other_tools_folders.py [--out tests/data/other_tools]

Written (each folder as its tool leaves it, nothing edited):
- ``llama/``: the PyTorch model (``save_pretrained``: config, safetensors weights, generation config);
- ``optimum/``: ``optimum-cli export onnx --task text-generation-with-past`` (``model.onnx``, one graph with the
  cache, an attention mask and positions);
- ``transformers-js/``: the layout transformers.js loads, as most of its hub folders hold it (its
  ``scripts/convert.py`` on an Optimum that still merged decoders): ``config.json`` on top, and in ``onnx/``
  ``decoder_model_merged.onnx`` (Optimum's ``decoder_model`` and ``decoder_with_past_model`` merged by its
  ``merge_decoders``, an ``If`` on the ``use_cache_branch`` input) with ``decoder_model_merged_quantized.onnx`` beside
  it from ONNX Runtime's dynamic INT8 quantizer as that script calls it (its default ``q8`` mode: weights as
  unsigned 8-bit, the If's branches quantized too).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

CONFIG = {"vocab_size": 128, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
          "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "tie_word_embeddings": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "data" /
                                             "other_tools"))
    args = parser.parse_args()

    import torch
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG, initializer_range=0.3)).eval()
    model.save_pretrained(out / "llama")
    cli = str(Path(sys.executable).parent / "optimum-cli")
    subprocess.run([cli, "export", "onnx", "--model", str(out / "llama"), "--task", "text-generation-with-past",
                    str(out / "optimum")], check=True)
    js = out / "transformers-js"
    merged(model, js / "onnx")
    for name in ("config.json", "generation_config.json"):
        (js / "onnx" / name).rename(js / name)
    quantize_dynamic(js / "onnx" / "decoder_model_merged.onnx", js / "onnx" / "decoder_model_merged_quantized.onnx",
                     weight_type=QuantType.QUInt8, extra_options={"EnableSubgraph": True, "MatMulConstBOnly": True})
    for name in ("decoder_model.onnx", "decoder_with_past_model.onnx"):  # transformers.js keeps the merge only
        (js / "onnx" / name).unlink()
    versions = {"transformers": transformers.__version__, "torch": torch.__version__}
    from importlib.metadata import version

    versions.update({p: version(p) for p in ("optimum", "optimum-onnx", "onnxruntime", "onnx")})
    (out / "VERSIONS.txt").write_text("".join(f"{k} {v}\n" for k, v in versions.items()))
    for path in sorted(out.rglob("*")):
        if path.is_file():
            print(f"{path.stat().st_size:>9}  {path.relative_to(out)}")


def merged(model: object, out: Path) -> None:
    """Optimum's older decoder layout (its ``--legacy`` export, gone from the CLI in optimum-onnx 0.1): the prompt's
    graph and a step's, exported by Optimum's own exporter, then merged by its ``merge_decoders`` as the decoder
    config's post-processing does."""
    from optimum.exporters.onnx.convert import export_models
    from optimum.exporters.tasks import TasksManager

    config = model.config  # type: ignore[attr-defined]
    make = TasksManager.get_exporter_config_constructor("onnx", model_type=config.model_type,
                                                        task="text-generation-with-past", library_name="transformers")
    parts = {"decoder_model": (model, make(config, task="text-generation", use_past=True, use_past_in_inputs=False)),
             "decoder_with_past_model": (model, make(config, task="text-generation", use_past=True,
                                                     use_past_in_inputs=True))}
    names = [f"{name}.onnx" for name in parts]
    out.mkdir(parents=True)
    export_models(parts, out, output_names=names)
    parts["decoder_model"][1].post_process_exported_models(out, parts, names)
    config.save_pretrained(out)
    model.generation_config.save_pretrained(out)  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
