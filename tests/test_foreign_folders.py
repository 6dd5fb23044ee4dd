"""Generation folders another tool wrote, checked against the PyTorch model they came from: transformers' own exporter
(transformers.exporters: a prefill and a decode graph, export.json) on a tiny Llama, its tokens and every layer's
cache against PyTorch's, a weight changed on purpose traced to its layer; onnxruntime-genai's builder's folder;
Optimum's and transformers.js's folders as Optimum wrote them (tests/data/other_tools, made by
scripts/other_tools_folders.py in a side environment: Optimum pins an older transformers). Each also generates
(batches, beams through to_transformers) as PyTorch does."""

from __future__ import annotations

import ast
import json
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
from onnx_nb.runtime.generation_folders import decoder_file


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
    # generate() runs the folder's graphs in onnx-nb's loop: PyTorch's greedy tokens; the graphs take no mask (no
    # padding: batches by prompt length) and were traced on one row (a batch's rows run one after another)
    prompts = [[5, 17, 42, 9], [11, 3, 8], [4, 4, 4, 4]]
    made = onnx_nb.generate(folder, prompts, max_new_tokens=6, eos_token_id=-1)
    assert made.tokens == [pytorch_greedy(model, p, 6) for p in prompts]
    assert made.batching == "2 batches by prompt length, run in lockstep: the folder's graphs take no attention mask"
    beams_equal_pytorch(model, onnx_nb.to_transformers(folder), [5, 17, 42, 9])
    # timed as onnx-nb's own decoder files are: prefill and decode rows beside PyTorch eager's; its disk size holds
    # the weights twice (each graph its own copy)
    table = onnx_nb.benchmark(folder, reference=model, providers="cpu", shapes=[{"prompt": 6}, {"past": 6}], runs=3,
                              warmup=1, min_seconds=0, progress=False)
    rows = {(r.variant, r.shape): r for r in table.rows}
    for shape in ("prefill 6 tokens", "decode 1 token after 6"):
        row = rows[("tiny-llama", shape)]
        assert row.status == "ok" and row.options["runner"] == "transformers' OnnxModelRunner", row
        assert row.size_mb and row.size_mb * 1e6 >= 2 * sum(p.numel() * 4 for p in model.parameters()), row
        assert rows[("PyTorch eager", shape)].status == "ok"


def pytorch_greedy(model: torch.nn.Module, prompt: list[int], new: int) -> list[int]:
    with torch.no_grad():
        ids = torch.tensor([prompt])
        made = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                              do_sample=False)
    return made[0, len(prompt):].tolist()


def scale_weight(file: Path, node_name: str) -> None:
    """The weight a MatMul named ``node_name`` multiplies by (in the graph or a branch of an If), times 1.5."""
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(str(file))

    def nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
        found = list(graph.node)
        for node in graph.node:
            found += [n for a in node.attribute if a.type == onnx.AttributeProto.GRAPH for n in nodes(a.g)]
        return found

    node = next(n for n in nodes(proto.graph) if n.name == node_name)
    weight = next(i for i in proto.graph.initializer if i.name in node.input)
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(1.5), weight.name))
    onnx.save_model(proto, str(file))


def beams_equal_pytorch(model: torch.nn.Module, wrapped: torch.nn.Module, prompt: list[int]) -> None:
    """transformers' beam search over the folder's files (to_transformers) gives PyTorch's beams."""
    ids = torch.tensor([prompt])
    settings = {"max_new_tokens": 6, "num_beams": 3, "num_return_sequences": 3, "do_sample": False,
                "eos_token_id": None, "pad_token_id": 0}
    with torch.no_grad():
        assert wrapped.generate(ids, attention_mask=torch.ones_like(ids), **settings).tolist() == \
            model.generate(ids, attention_mask=torch.ones_like(ids), **settings).tolist()


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


def test_folders_refused_or_errors_say_why(exported: tuple[torch.nn.Module, Path], tmp_path: Path) -> None:
    folder = exported[1]
    with pytest.raises(onnx_nb.OnnxNbError, match="the PyTorch model it came from"):
        onnx_nb.check_parity(folder)
    with pytest.raises(onnx_nb.OnnxNbError, match="no images, io_binding or other runtime"):
        onnx_nb.generate(folder, [[1, 2, 3]], images=np.zeros((1, 3, 8, 8), np.float32))
    config_only = tmp_path / "config-only"  # a model's folder with no ONNX file in it: the layouts read are named
    config_only.mkdir()
    shutil.copy(folder / "config.json", config_only)
    with pytest.raises(onnx_nb.OnnxNbError, match=r"Optimum's \(model.onnx or decoder_model_merged.onnx"):
        onnx_nb.generate(config_only, [[1, 2, 3]])
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    (bad / "export.json").write_text('{"export_format": "onnx", "components": {"model": {"file": "m.onnx"}}}')
    with pytest.raises(onnx_nb.OnnxNbError, match="prefill and a decode graph"):
        onnx_nb.generate(bad, [[1, 2, 3]])
    # a vision-language model's default split (benchmarks/exporter_peer_vlm.py): its language graphs, no tower
    (bad / "export.json").write_text(json.dumps({"export_format": "onnx", "components": {
        name: {"file": f"{name}.onnx"} for name in ("language_model", "lm_head", "decode")}}))
    with pytest.raises(onnx_nb.OnnxNbError, match="no graph that takes the image or the audio"):
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
    prompts = [[5, 17, 42, 9], [11, 3]]  # a padded batch; the folder's tokenizer comes along
    made = onnx_nb.generate(out, prompts, max_new_tokens=6, eos_token_id=-1)
    assert made.tokens == [pytorch_greedy(model, p, 6) for p in prompts] and made.text is not None
    with pytest.raises(onnx_nb.OnnxNbError, match=r"holds no config\.json: pass config="):
        onnx_nb.to_transformers(out)  # the builder keeps its own genai_config.json only
    beams_equal_pytorch(model, onnx_nb.to_transformers(out, config=folder), prompts[0])
    # timed too: its cache's heads and head size are named axes its genai_config.json gives
    table = onnx_nb.benchmark(out, providers="cpu", shapes=[{"past": 5}], runs=3, warmup=1, min_seconds=0,
                              progress=False)
    assert [r.status for r in table.rows] == ["ok"] and table.rows[0].moved_gb, table


OTHER_TOOLS = Path(__file__).parent / "data" / "other_tools"


@pytest.mark.parametrize("layout", ["optimum", "transformers-js"])
def test_optimum_and_transformers_js_folders(layout: str, tmp_path: Path) -> None:
    """Optimum's folder (model.onnx beside config.json) and a transformers.js folder (config.json on top, Optimum's
    older merged decoder in onnx/, whose use_cache_branch picks the prompt's graph or a step's, and its INT8 copy)."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(OTHER_TOOLS / "llama").eval()
    folder = OTHER_TOOLS / layout
    report = onnx_nb.check_parity(model, folder, progress=False)
    assert report, repr(report)
    assert {"layer 0 keys", "layer 1 values", "tokens"} <= {r.output for r in report.rows}
    tool = {"optimum": "Optimum's ONNX exporter", "transformers-js": "transformers.js's layout"}[layout]
    assert report.notes[0].startswith(f"Generation parity of {layout}, written by {tool} (graph by ")
    # a padded batch: each prompt's tokens as alone (the file takes a mask and positions)
    prompts = [[5, 17, 42, 9], [11, 3], [7, 7, 7]]
    made = onnx_nb.generate(folder, prompts, max_new_tokens=6, eos_token_id=-1)
    assert made.tokens == [pytorch_greedy(model, p, 6) for p in prompts]
    wrapped = onnx_nb.to_transformers(folder)
    assert type(wrapped).__name__ == "LlamaForCausalLM"  # the folder's config names the class
    beams_equal_pytorch(model, wrapped, [5, 17, 42, 9])
    table = onnx_nb.benchmark(folder, providers="cpu", shapes=[{"prompt": 5}, {"past": 5}], runs=3, warmup=1,
                              min_seconds=0, progress=False)
    assert [(r.variant, r.status) for r in table.rows] == [(layout, "ok")] * 2, table
    if layout == "transformers-js":  # the quantized sibling, passed alone: judged at INT8's tolerance
        quantized = folder / "onnx" / "decoder_model_merged_quantized.onnx"
        report = onnx_nb.check_parity(model, quantized, progress=False)
        assert report.precision == "int8" and report.notes[0].startswith(
            "Generation parity of decoder_model_merged_quantized.onnx, written by onnx.quantize"), report.notes
        assert [r.status for r in report.rows if r.output == "tokens"] == ["pass"] * 3, repr(report)
    # a weight of layer 1's value projection changed: the first bad layer is named
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    file = decoder_file(broken)
    assert file is not None and file.parent.name == ("onnx" if layout == "transformers-js" else broken.name)
    scale_weight(file, "/model/layers.1/self_attn/v_proj/MatMul")
    # on two runtimes at once: against PyTorch each fails from layer 1; against each other (the same file in ONNX
    # Runtime and in OpenVINO, no PyTorch between them) they agree: the file is wrong, not a runtime
    report = onnx_nb.check_parity(model, broken, providers=["cpu", "openvino-runtime"], progress=False)
    status = {(r.output, r.shape, r.provider): r.status for r in report.rows}
    for runtime in ("cpu", "openvino-runtime"):
        assert status[("layer 0 values", "after the prefill", runtime)] == "pass"
        assert status[("layer 1 values", "after the prefill", runtime)] == "fail", repr(report)
    assert not report and any(n.startswith("First layer off on cpu: layer 1 (after the prefill)") for n in report.notes)
    across = [r for r in report.rows if r.provider == "openvino-runtime vs cpu"]
    assert {r.output for r in across} >= {"tokens", "logits", "layer 0 keys", "layer 1 values"}
    assert all(r.status == "pass" for r in across), repr(report)
    assert any(n.startswith("openvino-runtime (OpenVINO ") and "tokens identical for 3 of 3 prompts" in n
               for n in report.notes), report.notes
