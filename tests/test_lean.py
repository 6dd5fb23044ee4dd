"""``export(folder, precision=...)``: decoders written layer by layer from their safetensors checkpoint (the lean
route), for each family it covers, each precision, checked against PyTorch by generation parity; its refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch

import onnx_nb
from onnx_nb.kinds.lean.safetensors_file import Checkpoint
from onnx_nb.results.tolerance import precision_of

BASE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 96, "vocab_size": 120, "max_position_embeddings": 64, "bos_token_id": 1,
        "eos_token_id": 2, "pad_token_id": 0}
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {"sliding_window": 4},  # shorter than the parity prompts: the window is exercised
    "qwen2": {},  # Q/K/V biases
    "qwen3": {"head_dim": 32},  # RMSNorm over each head of Q and K; a head size apart from hidden / heads
    "phi3": {"sliding_window": 5},  # packed qkv_proj and gate_up_proj
    "gemma": {"head_dim": 16},  # (1 + weight) norms, sqrt(hidden) embedding scale, tanh GELU, tied head
    "granite": {"embedding_multiplier": 3.0, "residual_multiplier": 0.5, "logits_scaling": 4.0,
                "attention_multiplier": 0.2},
    # mixtures of experts: ONNX Runtime's MoE op (QMoE for INT4/INT8)
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},  # top-k weights renormalized
    "qwen2_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,  # + a shared expert
                  "shared_expert_intermediate_size": 32, "decoder_sparse_step": 2},  # layer 0 dense, layer 1 sparse
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "head_dim": 16,
                  "norm_topk_prob": True},
    "olmoe": {"num_experts": 4, "num_experts_per_tok": 2},  # Q/K norms over the whole projection
}


def save_model(model_type: str, folder: Path, dtype: Any = None, **extra: Any) -> Path:
    import transformers

    config = transformers.AutoConfig.for_model(model_type, **{**BASE, **FAMILIES.get(model_type, {}), **extra})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # norms away from 1 and biases away from 0: a weight read wrongly shows
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(folder, max_shard_size="100KB")
    return folder


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lean")
    return {name: save_model(name, root / name) for name in FAMILIES}


def gqa_attrs(path: Path) -> list[dict[str, Any]]:
    proto = onnx.load(str(path), load_external_data=False)
    return [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            for n in proto.graph.node if n.op_type == "GroupQueryAttention"]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_each_family_matches_pytorch(checkpoints: dict[str, Path], name: str, tmp_path: Path) -> None:
    result = onnx_nb.export(checkpoints[name], precision="fp32", out=tmp_path / "m.onnx", progress=False)
    assert result, repr(result)
    assert result.exporter == "lean (fp32)" and result.check["cosine"] > 0.99999
    assert [i.name for i in result.inputs][:2] == ["input_ids", "attention_mask"]
    assert result.cache_layout.layers == 2 and result.source.model is None  # the model was never built
    assert len(gqa_attrs(result.path)) == 2
    assert (tmp_path / "m.onnx.data").is_file() and result.external_data
    report = onnx_nb.check_parity(result, progress=False)  # loads PyTorch: generation parity, left-padded batches
    assert report, repr(report)
    steps = [r for r in report.rows if r.output == "logits"]
    assert len(steps) == 9 and all((r.cosine or 0) > 0.99999 for r in steps)
    assert all(c.verdict == "identical" for c in report.generation)


def test_mixture_of_experts_in_int4(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """Mixtral to INT4: the experts are ONNX Runtime's QMoE (4-bit blocks), the router stays in float; generation
    parity against PyTorch passes. The generic exporter traces Mixtral too now (its expert dispatch and histc
    translated: steps/export/patches/translations.py); the lean route stays the lean road for the families it covers."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoints["mixtral"])
    traced = onnx_nb.export(model, out=tmp_path / "traced.onnx", progress=False)
    assert traced and traced.exporter == "dynamo" and traced.cache_layout is not None, repr(traced)
    result = onnx_nb.export(checkpoints["mixtral"], precision="int4", out=tmp_path / "moe.onnx", progress=False)
    assert result, repr(result)
    assert result.op_histogram.get("com.microsoft.QMoE") == 2
    report = onnx_nb.check_parity(result, progress=False)
    assert report, repr(report)
    assert all(c.verdict in ("identical", "near-tie") for c in report.generation)


def test_precisions_and_both_loops(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """int4 and int8 are MatMulNBits (4 bits with an 8-bit LM head, and 8 bits), fp16 computes in half with float32
    logits; each file passes its own check and generation parity; onnxruntime-genai's loop gives onnx-nb's tokens on
    the INT4 file."""
    sizes = {}
    for precision in ("int4", "int8", "fp16", "fp32"):
        result = onnx_nb.export(checkpoints["llama"], precision=precision, out=tmp_path / f"{precision}.onnx",
                                progress=False)
        assert result, repr(result)
        proto = onnx.load(str(result.path), load_external_data=False)
        assert precision_of(proto) == precision
        bits = {a.i for n in proto.graph.node if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "bits"}
        # int4: the LM head at 8 bits (the default lm_head_bits)
        assert bits == ({4, 8} if precision == "int4" else {8} if precision == "int8" else set())
        assert result.outputs[0].dtype == "float32"
        assert result.inputs[2].dtype == ("float16" if precision == "fp16" else "float32")
        sizes[precision] = result.file_size
        report = onnx_nb.check_parity(result, progress=False)
        assert report, repr(report)
        assert all(c.verdict in ("identical", "near-tie") for c in report.generation)
        if precision == "int4":
            prompts = [[5, 6, 7, 8, 9, 10, 11], [12], [13, 14, 15]]
            ours = onnx_nb.generate(result, prompts, max_new_tokens=6, eos_token_id=-1)
            theirs = onnx_nb.generate(result, prompts, max_new_tokens=6, eos_token_id=-1, runtime="onnxruntime-genai")
            assert ours.tokens == theirs.tokens
    assert sizes["int4"] < sizes["int8"] < sizes["fp16"] < sizes["fp32"]
    assert "peak memory" in repr(result) and "x the checkpoint" in result._repr_html_()
    assert result.memory["build_peak_bytes"] is not None and result.memory["weights_dtype"] == "float32"


def test_sliding_window_is_written_and_needed(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """Mistral's 4-token window becomes the op's local_window_size; the same file without it fails the check (the
    check's prompt is longer than the window), so the window is what makes it match."""
    from onnx_nb.kinds.lean.export import reference_check

    result = onnx_nb.export(checkpoints["mistral"], precision="fp32", out=tmp_path / "w.onnx", progress=False)
    assert [a["local_window_size"] for a in gqa_attrs(result.path)] == [4, 4]
    proto = onnx.load(str(result.path), load_external_data=False)
    for node in proto.graph.node:
        if node.op_type == "GroupQueryAttention":
            kept = [a for a in node.attribute if a.name != "local_window_size"]
            del node.attribute[:]
            node.attribute.extend(kept)
    onnx.save(proto, str(tmp_path / "w.onnx"))  # the weights stay in w.onnx.data
    info = {"layers": 2, "kv_heads": 2, "head_size": 16, "cache_dtype": "float32", "vocab": 120}
    assert not reference_check(str(checkpoints["mistral"]), tmp_path / "w.onnx", "fp32", info)["passed"]


def test_bf16_sharded_checkpoint(tmp_path: Path) -> None:
    """bfloat16 weights in shards: read exactly (the high half of a float32), the check judged at half precision
    against PyTorch in bfloat16."""
    folder = save_model("qwen3", tmp_path / "bf16", dtype=torch.bfloat16)
    assert (folder / "model.safetensors.index.json").is_file()
    ckpt = Checkpoint(folder)
    assert ckpt.stored_dtype() == "bfloat16" and len({e.file for e in ckpt.entries.values()}) > 1
    from safetensors.torch import load_file

    name = "model.layers.1.mlp.down_proj.weight"
    shard = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"][name]
    want = load_file(str(folder / shard))[name].float().numpy()
    assert np.array_equal(ckpt.read(name), want)
    result = onnx_nb.export(folder, precision="int4", out=tmp_path / "q.onnx", progress=False)
    assert result, repr(result)
    assert result.check["reference_dtype"] == "bfloat16" and "judged as int4" in result.check["summary"]
    assert result.memory["weights_dtype"] == "bfloat16"


def test_refusals(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    import tiny_models

    with pytest.raises(onnx_nb.InvalidArgumentError, match="give its folder or hub id"):
        onnx_nb.export(tiny_models.build("llama"), precision="int4", out=tmp_path / "a.onnx")
    with pytest.raises(onnx_nb.InvalidArgumentError, match="use one of int4, int8, fp16, fp32"):
        onnx_nb.export(checkpoints["llama"], precision="int3", out=tmp_path / "a.onnx")
    odd = save_model("llama", tmp_path / "odd", head_dim=24)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="multiples of 16; this llama has 24"):
        onnx_nb.export(odd, precision="int4", out=tmp_path / "a.onnx", progress=False)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="cache= do not apply"):
        onnx_nb.export(checkpoints["llama"], precision="int4", cache=False, out=tmp_path / "a.onnx")
    gpt2 = tiny_models.save("gpt2", tmp_path / "gpt2")
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"this one is 'gpt2'.*quantize"):
        onnx_nb.export(gpt2, precision="int4", out=tmp_path / "a.onnx", progress=False)
    torch_only = tmp_path / "bin"  # a PyTorch-pickle checkpoint: the lean route reads safetensors only
    torch_only.mkdir()
    (torch_only / "config.json").write_text((checkpoints["llama"] / "config.json").read_text())
    torch.save({"model.embed_tokens.weight": torch.zeros(120, 64)}, torch_only / "pytorch_model.bin")
    with pytest.raises(onnx_nb.ModelLoadError, match="no safetensors weights"):
        onnx_nb.export(torch_only, precision="int4", out=tmp_path / "a.onnx", progress=False)
    onnx_nb.export(checkpoints["llama"], precision="int4", out=tmp_path / "kept.onnx", progress=False)
    with pytest.raises(onnx_nb.OutputExistsError):
        onnx_nb.export(checkpoints["llama"], precision="int4", out=tmp_path / "kept.onnx", progress=False)
    with pytest.raises(onnx_nb.HubUnavailableError):
        onnx_nb.export("someone/some-llama", precision="int4", out=tmp_path / "hub.onnx", progress=False)
    assert not list(tmp_path.glob("a.onnx*")) and not list(tmp_path.glob(".*.tmp"))


def test_steps_report_memory_and_refuse_what_cannot_fit(checkpoints: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every variant says its peak memory beside the weights; a step that would need more than the machine has
    available is refused before it starts, saying how much and what to do (for a decoder: the lean route); the lean
    export skips its PyTorch check when the model would not fit, and says so (unverified)."""
    from onnx_nb.runtime import memory

    export = onnx_nb.export(checkpoints["llama"], out=tmp_path / "generic.onnx", progress=False)
    variant = onnx_nb.quantize(export, method="int4", out=tmp_path / "q.onnx", validate=False)
    assert variant.memory["added_bytes"] is not None and variant.memory["weights_bytes"] == variant.size_before
    assert "peak memory" in repr(variant) and "the parent file" in repr(variant)
    with pytest.raises(MemoryError):
        memory.require((memory.available_bytes() or 0) + 2**40, "a test", "nothing to do")

    monkeypatch.setattr(memory, "available_bytes", lambda: 1000)
    with pytest.raises(onnx_nb.InsufficientMemoryError, match=r"int4 on generic\.onnx .* needs about .* this machine "
                       r"has 1.0 kB available\. For this decoder, export\(.*precision=\"int4\"\)"):
        onnx_nb.quantize(export, method="int4", out=tmp_path / "q2.onnx", validate=False)
    assert not (tmp_path / "q2.onnx").exists()
    lean = onnx_nb.export(checkpoints["llama"], precision="int4", out=tmp_path / "lean.onnx", progress=False)
    assert lean.status == "unverified" and not lean
    assert "not checked against PyTorch" in lean.unverified[0] and "check_parity" in repr(lean)
    # parity and benchmark too: the PyTorch reference loaded again from the checkpoint, a session's weights
    with pytest.raises(onnx_nb.InsufficientMemoryError, match=r"parity loads llama in PyTorch as its reference \(.* "
                       r"of weights\) needs about .* has 1.0 kB available\. Check the file against another ONNX"):
        onnx_nb.check_parity(lean, progress=False)
    from onnx_nb.runtime import sessions

    monkeypatch.setattr(sessions, "CHECK_ABOVE", 0)  # the tiny file counts as big
    for step in (lambda: onnx_nb.check_parity(export, progress=False),
                 lambda: onnx_nb.check_parity(variant, progress=False),
                 lambda: onnx_nb.benchmark(export, providers="cpu", runs=2, progress=False)):
        with pytest.raises(onnx_nb.InsufficientMemoryError, match=r"Opening (generic|q)\.onnx in ONNX Runtime \(.* "
                           r"of weights, held in memory\) needs about .* Free what this kernel holds"):
            step()
    monkeypatch.undo()
    assert onnx_nb.check_parity(variant, progress=False).rows  # the kernel goes on


def test_nbits_files_keep_their_packed_weights(checkpoints: dict[str, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A big file's session maps its weights instead of packing a copy, except a MatMulNBits file: unpacked, its
    blocks are unpacked again at every run (a 7B INT4 decode step took seconds instead of 0.2 s)."""
    from onnx_nb.runtime import sessions

    monkeypatch.setattr(sessions, "MAP_WEIGHTS_ABOVE", 0)  # every file with external data counts as big here
    entry = "session.disable_prepacking"
    for precision, mapped in (("fp32", True), ("int4", False)):
        result = onnx_nb.export(checkpoints["llama"], precision=precision, out=tmp_path / f"{precision}.onnx",
                                progress=False)
        assert _prepacking_off(sessions.session(result.path), entry) == mapped, precision


def _prepacking_off(session: Any, entry: str) -> bool:
    try:
        return session.get_session_options().get_session_config_entry(entry) == "1"
    except Exception:  # noqa: BLE001 - an entry never set is an error in ONNX Runtime's API
        return False


def test_command_line_and_magic(ip: object, checkpoints: dict[str, Path], tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "onnx_nb", "export", str(checkpoints["qwen2"]), "--precision",
                           "int8", "--out", str(tmp_path / "cli.onnx")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "lean (int8)" in done.stdout and "peak memory" in done.stdout
    result = ip.run_line_magic(  # type: ignore[attr-defined]
        "onnx_export", f"{checkpoints['qwen2']} --precision int4 --algorithm hqq --lm-head-bits 4 "
                       f"--out {tmp_path / 'magic.onnx'}")
    assert result.exporter == "lean (int4, hqq, LM head 4-bit)"


def nbits_nodes(path: Path) -> dict[str, tuple[int, int]]:
    """Each MatMulNBits node: (bits, how many inputs: 3 symmetric, 4 with zero points)."""
    proto = onnx.load(str(path), load_external_data=False)
    return {n.name: (next(a.i for a in n.attribute if a.name == "bits"), len([i for i in n.input if i]))
            for n in proto.graph.node if n.op_type == "MatMulNBits"}


def test_int4_algorithm_and_lm_head_bits(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """``precision="int4"`` writes asymmetric round-to-nearest blocks (zero points) with the LM head at 8 bits by
    default; ``algorithm=`` and ``lm_head_bits=`` choose otherwise, ONNX Runtime's quantizer one projection at a time.
    Each file passes its check against PyTorch, and the default brings the logits closer than symmetric blocks with a
    4-bit head (what the route wrote before)."""
    folder = checkpoints["llama"]
    made = {}
    for label, kwargs in (("default", {}), ("rtn4", {"algorithm": "rtn", "lm_head_bits": 4}),
                          ("hqq", {"algorithm": "hqq", "block_size": 16})):
        made[label] = onnx_nb.export(folder, precision="int4", out=tmp_path / f"{label}.onnx", progress=False,
                                     **kwargs)
        assert made[label], repr(made[label])
    default, rtn4, hqq = (nbits_nodes(made[k].path) for k in ("default", "rtn4", "hqq"))
    assert made["default"].exporter == "lean (int4, rtn_asym, LM head 8-bit)"
    assert default.pop("/lm_head") == (8, 3) and set(default.values()) == {(4, 4)}  # 8-bit head: symmetric RTN
    assert rtn4.pop("/lm_head") == (4, 3) and set(rtn4.values()) == {(4, 3)}
    assert hqq.pop("/lm_head") == (8, 3) and set(hqq.values()) == {(4, 4)}
    sizes = {a.i for n in onnx.load(str(made["hqq"].path), load_external_data=False).graph.node
             if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "block_size"}
    assert sizes == {16} and made["hqq"].exporter.endswith("blocks of 16)")
    assert made["default"].check["cosine"] > made["rtn4"].check["cosine"]
    with pytest.raises(onnx_nb.InvalidArgumentError, match="GPTQ and AWQ run the model on calibration data"):
        onnx_nb.export(folder, precision="int4", algorithm="gptq", out=tmp_path / "a.onnx")
    with pytest.raises(onnx_nb.InvalidArgumentError, match="do not apply to precision='fp16'"):
        onnx_nb.export(folder, precision="fp16", algorithm="rtn", out=tmp_path / "a.onnx")
    with pytest.raises(onnx_nb.InvalidArgumentError, match="block_size=24: MatMulNBits takes one of 16, 32"):
        onnx_nb.export(folder, precision="int4", block_size=24, out=tmp_path / "a.onnx")
    with pytest.raises(onnx_nb.InvalidArgumentError, match="lm_head_bits=3: give 4 or 8"):
        onnx_nb.export(folder, precision="int4", lm_head_bits=3, out=tmp_path / "a.onnx")
    with pytest.raises(onnx_nb.InvalidArgumentError, match="algorithm: not for"):
        onnx_nb.export(folder, algorithm="hqq", out=tmp_path / "a.onnx")
    # k-quant's odd block count is refused before the first layer is written: it names the first weight it meets
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"k_quant': model\.layers\.0\.\S+ has \d+ inputs, 1 blocks "
                                                           r"of 256, an odd number"):
        onnx_nb.export(folder, precision="int4", algorithm="k_quant", block_size=256, out=tmp_path / "a.onnx")
    assert not list(tmp_path.glob("a.onnx*"))


def test_loose_weight_files_fold_into_one(tmp_path: Path) -> None:
    """An exporter's one-file-per-weight external data (TorchScript's, over 2 GB: a 1.1B decoder left 157 files)
    becomes one page-aligned data file beside the model, read back by ONNX Runtime to the same outputs."""
    import onnxruntime as ort

    from onnx_nb.runtime.onnxedit import consolidate_external

    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
    x = torch.randn(3, 64)
    folder = tmp_path / "stage"
    folder.mkdir()
    plain = onnx_nb.export(net, x, out=tmp_path / "plain.onnx", progress=False)
    proto = onnx.load(str(plain.path))
    onnx.save(proto, str(folder / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=False,
              size_threshold=0)
    loose = [p for p in folder.iterdir() if p.name != "m.onnx"]
    assert len(loose) == 4
    proto = onnx.load(str(folder / "m.onnx"), load_external_data=False)
    assert consolidate_external(proto, folder, "m.onnx.data") == 4
    onnx.save(proto, str(folder / "m.onnx"))
    assert sorted(p.name for p in folder.iterdir()) == ["m.onnx", "m.onnx.data"]
    offsets = [int(e.value) for t in proto.graph.initializer for e in t.external_data if e.key == "offset"]
    assert all(o % 4096 == 0 for o in offsets)
    got = ort.InferenceSession(str(folder / "m.onnx")).run(None, {plain.inputs[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, net(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_quantize_a_decoder_file_by_path(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """quantize() on a decoder's .onnx path (no export object: inputs come from the graph) makes consistent inputs
    for its own measurements: 3 cached tokens, 4 new, the mask over both (was: Gather out of bounds)."""
    from onnx_nb.runtime.feeds import graph_sample

    export = onnx_nb.export(checkpoints["llama"], out=tmp_path / "generic.onnx", progress=False)
    sample, _ = graph_sample(export.path, 0)
    assert sample["attention_mask"].shape == (2, 7) and sample["past_key_values.0.key"].shape[2] == 3
    assert sample["position_ids"].tolist() == [[3, 4, 5, 6]] * 2
    variant = onnx_nb.quantize(str(export.path), method="dynamic", out=tmp_path / "q.onnx", validate=False)
    assert variant.path.exists() and "exclude" in variant.recipe


def test_saving_again_in_place_does_not_grow_the_data(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """onnx.save appends to an existing data file: optimize()'s in-place GroupQueryAttention rewrite of a 4.4 GB
    decoder wrote an 8.8 GB data file. save_proto starts the data file afresh when nothing still reads it."""
    from onnx_nb.runtime.onnxedit import save_proto
    from onnx_nb.runtime.onnxfile import load_proto

    result = onnx_nb.export(checkpoints["llama"], precision="fp32", out=tmp_path / "m.onnx", progress=False)
    data = tmp_path / "m.onnx.data"
    proto = load_proto(result.path, external=True)  # every weight in memory, as the rewrite holds them
    save_proto(proto, result.path, True)
    first = data.stat().st_size
    save_proto(proto, result.path, True)
    assert data.stat().st_size == first
    assert onnx_nb.check_parity(result, progress=False)


def test_an_export_that_cannot_fit_is_refused_before_loading(checkpoints: dict[str, Path], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx_nb.runtime import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 1000)
    with pytest.raises(onnx_nb.InsufficientMemoryError, match=r"export\(\) of llama .* needs about .* This llama "
                                                              r"decoder can take the lean route"):
        onnx_nb.export(checkpoints["llama"], out=tmp_path / "m.onnx", progress=False)
    assert not list(tmp_path.iterdir())
