"""Generation folders another tool wrote, checked against the PyTorch model they came from: transformers' own exporter
(transformers.exporters: a prefill and a decode graph, export.json) on a tiny Llama, its tokens and every layer's
cache against PyTorch's, a weight changed on purpose traced to its layer, and the other tools' folders refused with
the file to pass instead."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import onnx_nb
import tiny_models
from onnx_nb.frontends import demo_tasks


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    """A tiny Llama and the folder transformers' exporter writes for it (its default export_for_generation)."""
    exporters = pytest.importorskip("transformers.exporters")
    OnnxConfig, OnnxExporter = exporters.OnnxConfig, exporters.OnnxExporter

    model = tiny_models.build("llama")
    ids = torch.tensor([[5, 17, 42, 9, 7, 31]])
    made = OnnxExporter().export_for_generation(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                                 OnnxConfig(dynamic=True))
    folder = tmp_path_factory.mktemp("exporter") / "tiny-llama"
    made.save_pretrained(folder)
    return model, folder


def test_transformers_exporters_folder_is_checked_and_generates(exported: tuple[torch.nn.Module, Path]) -> None:
    model, folder = exported
    assert {"export.json", "prefill.onnx", "decode.onnx"} <= {p.name for p in folder.iterdir()}
    report = onnx_nb.check_parity(model, folder, progress=False)
    assert report, repr(report)
    outputs = {r.output for r in report.rows}
    assert {"logits", "tokens", "layer 0 keys", "layer 1 values"} <= outputs
    assert [c.first_difference for c in report.generation] == [None, None, None]
    assert any("each with its own copy of the weights" in n and "no attention mask" in n for n in report.notes)
    # generate() runs the folder by its own protocol: PyTorch's greedy tokens, one prompt at a time
    prompts = [[5, 17, 42, 9], [11, 3, 8]]
    made = onnx_nb.generate(folder, prompts, max_new_tokens=6, eos_token_id=-1)
    for prompt, tokens in zip(prompts, made.tokens):
        with torch.no_grad():
            ids = torch.tensor([prompt])
            theirs = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, min_new_tokens=6,
                                    do_sample=False)
        assert tokens == theirs[0, len(prompt):].tolist()
    assert made.batching == "one prompt at a time (the folder's graphs take no attention mask)"


def test_a_changed_weight_is_traced_to_its_layer(exported: tuple[torch.nn.Module, Path], tmp_path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    model, folder = exported
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    proto = onnx.load(str(broken / "prefill.onnx"))
    # the prefill graph's key projection of layer 1, found by the module scope the exporter records on each node
    node = next(n for n in proto.graph.node if n.op_type == "MatMul" and any(
        p.key == "pkg.torch.onnx.name_scopes" and "model.layers.1.self_attn.k_proj" in ast.literal_eval(p.value)
        for p in n.metadata_props))
    weight = next(i for i in proto.graph.initializer if i.name in node.input)
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(1.5), weight.name))
    (broken / "prefill.onnx.data").unlink()
    onnx.save_model(proto, str(broken / "prefill.onnx"), save_as_external_data=True, location="prefill.onnx.data")
    report = onnx_nb.check_parity(model, broken, progress=False)
    assert not report
    status = {(r.output, r.shape): r.status for r in report.rows}
    assert status[("layer 0 keys", "after the prefill")] == "pass"
    assert status[("layer 1 keys", "after the prefill")] == "fail"
    assert any(n.startswith("First layer off on cpu: layer 1 (after the prefill)") for n in report.notes), report.notes


def test_other_folders_are_refused_with_what_to_pass(exported: tuple[torch.nn.Module, Path], tmp_path: Path) -> None:
    folder = exported[1]
    optimum = tmp_path / "optimum"
    optimum.mkdir()
    (optimum / "decoder_model_merged.onnx").write_bytes(b"")
    with pytest.raises(onnx_nb.OnnxNbError, match=r"Optimum's ONNX exporter .*decoder_model_merged\.onnx"):
        onnx_nb.generate(optimum, [[1, 2, 3]])
    with pytest.raises(onnx_nb.OnnxNbError, match="the PyTorch model it came from"):
        onnx_nb.check_parity(folder)
    with pytest.raises(onnx_nb.OnnxNbError, match="greedily"):
        onnx_nb.generate(folder, [[1, 2, 3]], do_sample=True)
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    (bad / "export.json").write_text('{"export_format": "onnx", "components": {"model": {"file": "m.onnx"}}}')
    with pytest.raises(onnx_nb.OnnxNbError, match="prefill and a decode graph"):
        onnx_nb.generate(bad, [[1, 2, 3]])
    # a folder that cannot be opened is the report's error row, not a crash
    no_config = tmp_path / "no-config"
    shutil.copytree(folder, no_config)
    (no_config / "config.json").unlink()
    report = onnx_nb.check_parity(exported[0], no_config, progress=False)
    assert not report and any(r.status == "error" and "config.json" in r.note for r in report.rows), repr(report)


def test_onnxruntime_genai_builders_folder_is_checked_and_generates(tmp_path: Path) -> None:
    import transformers

    pytest.importorskip("onnxruntime_genai")
    folder = demo_tasks.docs_lm(tmp_path / "hf", steps=10)  # a Llama with its own tokenizer (the builder reads it)
    out = tmp_path / "genai"
    built = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(folder), "-o",
                            str(out), "-p", "fp32", "-e", "cpu", "-c", str(tmp_path / "cache")], cwd=tmp_path,
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    report = onnx_nb.check_parity(model, out, progress=False)
    assert report, repr(report)
    assert {"layer 0 keys", "layer 1 values"} <= {r.output for r in report.rows}
    assert any("onnxruntime-genai's builder" in n for n in report.notes)
    prompt = [5, 17, 42, 9]
    with torch.no_grad():
        ids = torch.tensor([prompt])
        theirs = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, min_new_tokens=6,
                                do_sample=False)[0, len(prompt):].tolist()
    assert onnx_nb.generate(out, [prompt], max_new_tokens=6, eos_token_id=-1).tokens == [theirs]
