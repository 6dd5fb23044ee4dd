"""Causal LMs whose cache keeps a state per layer (transformers 5's cache layers: Mamba's convolution and SSM states,
linear attention's; Qwen3-Next's full-attention layers beside them): the file takes one token per step with every
state named, a prompt goes through it token by token, and its tokens are PyTorch's over many steps, through
onnx_nb.generate (a padded batch) and transformers' own generate() on the file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import onnx_nb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import registry_sweep

PROMPTS = [[5, 9, 14, 3, 22, 17], [8, 30, 11]]


def _mamba(folder: Path) -> Any:
    """A tiny Mamba whose weights are spread enough that its greedy tokens change at every step (the default init
    repeats one token, which would prove little)."""
    import transformers

    config = registry_sweep.tiny_config("mamba")
    config.vocab_size = 1000
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                p.normal_(0, 0.3)
    model.save_pretrained(folder)
    return model


def _pytorch_tokens(model: Any, prompt: list[int], new: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=new, do_sample=False, num_beams=1)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module")
def mamba(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    work = tmp_path_factory.mktemp("mamba")
    model = _mamba(work / "model")
    return model, onnx_nb.export(work / "model", out=work / "onnx" / "model.onnx", progress=False)


def test_state_file_takes_one_token_with_every_state_named(mamba: tuple[Any, Any]) -> None:
    import onnxruntime as ort

    _, result = mamba
    assert result, result.check
    layout = result.cache_layout
    assert layout is not None and layout.states and "one token per step" in layout.text()
    inputs = {i.name: i.shape for i in ort.InferenceSession(str(result.path)).get_inputs()}
    assert inputs["input_ids"] == ["batch", 1]
    for i in range(layout.layers):
        assert inputs[f"past_key_values.{i}.conv.0"][0] == "batch"
        assert all(isinstance(d, int) for d in inputs[f"past_key_values.{i}.conv.0"][1:])
        assert f"past_key_values.{i}.recurrent.0" in inputs
    assert not any(n.endswith(".key") for n in inputs)


def test_state_file_generates_pytorchs_tokens_over_many_steps(mamba: tuple[Any, Any]) -> None:
    from onnx_nb.steps.generate.runners import OnnxDecoder

    model, result = mamba
    made = onnx_nb.generate(result, PROMPTS, max_new_tokens=40, num_beams=1).tokens  # one padded batch
    for prompt, tokens in zip(PROMPTS, made):
        assert tokens == _pytorch_tokens(model, prompt, 40)
    # the states keep their shape however many tokens went through (a cache that grew would be a bug)
    runner = OnnxDecoder(result.path)
    cache = runner.empty_cache(2)
    shapes = {n: v.shape for n, v in cache.items()}
    ids = np.array([[5], [8]])
    for step in range(50):
        logits, cache = runner.step(ids, np.ones((2, step + 1), np.int64), cache)
        ids = logits[:, -1].argmax(-1)[:, None]
    assert {n: v.shape for n, v in cache.items()} == shapes


def test_state_file_through_transformers_generate(mamba: tuple[Any, Any]) -> None:
    model, result = mamba
    hf = onnx_nb.to_transformers(result)
    prompt = PROMPTS[0]
    out = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                      max_new_tokens=16, do_sample=False)
    assert out[0, len(prompt):].tolist() == _pytorch_tokens(model, prompt, 16)


def test_state_file_latency_rows(mamba: tuple[Any, Any]) -> None:
    """benchmark(): the prefill is the prompt's one-token steps, each fed the last one's states; a decode step runs
    on states of a sequence of any length; PyTorch's rows run its own prefill and its one-token path."""
    _, result = mamba
    table = onnx_nb.benchmark(result, reference=result, providers="cpu", shapes=[{"prompt": 8}, {"past": 16}],
                              runs=3, warmup=1, progress=False)
    got = [(r.variant, r.shape, r.status) for r in table.rows]
    assert ("fp32", "prefill 8 tokens", "ok") in got and ("fp32", "decode 1 token after 16", "ok") in got, got
    assert ("PyTorch eager", "decode 1 token after 16", "ok") in got, got
    prefill = next(r for r in table.rows if r.variant == "fp32" and r.shape.startswith("prefill"))
    assert "8 one-token steps" in str(prefill.options), prefill.options


def test_hybrid_of_states_and_attention(tmp_path: Path) -> None:
    """Qwen3-Next: a linear-attention layer (convolution and recurrent states) and a full-attention layer (keys and
    values that grow) in one file; its prefill path (a chunked scan with a triangular solve) never traced."""
    row = registry_sweep.one("qwen3_next", registry_sweep.registry()["qwen3_next"], tmp_path / "model",
                             variants=False)
    assert row["export"] == "ok" and row["generate"] == "same", row
