"""Causal language models exported with their key/value cache: one graph for prefill and decode, generation in
ONNX Runtime, and generation parity against PyTorch (tiny GPT-2, Llama, Qwen2, Phi and GPT-NeoX configs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

import onnx_nb
import tiny_models
from onnx_nb.steps.export.caches.decoder import CacheLayout
from onnx_nb.steps.parity.generation import compare_tokens
from onnx_nb.steps.parity.probes import default_prompts

DECODERS = ["gpt2", "llama", "qwen2", "phi", "gpt_neox"]


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory,
            gpt2_export: onnx_nb.ExportResult) -> dict[str, onnx_nb.ExportResult]:
    folder = tmp_path_factory.mktemp("decoders")  # GPT-2's: conftest's shared export, read only
    return {name: gpt2_export if name == "gpt2" else
            onnx_nb.export(tiny_models.build(name), out=folder / f"{name}.onnx", progress=False) for name in DECODERS}


@pytest.mark.lower_bounds
@pytest.mark.parametrize("name", DECODERS)
def test_cache_graph_and_generation_parity(exports: dict[str, onnx_nb.ExportResult], name: str) -> None:
    result = exports[name]
    model = result.source.model
    layers = model.config.num_hidden_layers
    assert result, repr(result)
    assert [i.name for i in result.inputs][:3] == ["input_ids", "attention_mask", "position_ids"]
    assert [i.name for i in result.inputs][3:5] == ["past_key_values.0.key", "past_key_values.0.value"]
    assert len(result.inputs) == 3 + 2 * layers and len(result.outputs) == 1 + 2 * layers
    past = result.inputs[3]
    assert past.shape[0] == "batch" and past.shape[2] == "past_sequence"
    assert result.outputs[1].name == "present.0.key" and result.outputs[1].shape[2] == "total_sequence"
    layout = result.cache_layout
    assert isinstance(layout, CacheLayout) and layout.layers == layers and layout.kv_heads == past.shape[1]
    assert layout.bytes_per_token == 2 * layers * layout.kv_heads * layout.head_size * 4
    assert "key/value cache" in repr(result) and "per token" in result._repr_html_()

    report = onnx_nb.check_parity(result, progress=False)
    assert report, repr(report)
    steps = [r for r in report.rows if r.output == "logits"]
    assert steps[0].shape == "prefill (left-padded batch)" and len(steps) == 9  # prefill + 8 decode steps
    assert all((r.cosine or 0) > 0.99999 for r in steps)
    assert [r.output for r in report.rows].count("tokens") == 3 + 3 * 4  # 3 prompts: greedy, and 4 kept beams each
    assert sum(c.kind.startswith("beam") for c in report.generation) == 12
    assert all(c.verdict in ("identical", "near-tie") for c in report.generation)
    assert "Generation parity: 3 prompts of 3, 6, 9 tokens" in report.notes[0]


@pytest.mark.lower_bounds
def test_generate_matches_pytorch(exports: dict[str, onnx_nb.ExportResult]) -> None:
    result = exports["llama"]
    model = result.source.model
    prompts = default_prompts(model)
    batch = onnx_nb.generate(result, prompts, max_new_tokens=6, eos_token_id=-1)  # left-padded batch
    for prompt, tokens in zip(prompts, batch.tokens):
        with torch.no_grad():
            ids = torch.tensor([prompt])
            want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, min_new_tokens=6,
                                  do_sample=False, pad_token_id=0)[0, len(prompt):].tolist()
        assert tokens == want
        alone = onnx_nb.generate(result, [prompt], max_new_tokens=6, eos_token_id=-1)
        assert alone.tokens[0] == tokens, "batching with left padding changes nothing"
    assert batch.batching == "one batch, left-padded" and "prompts ran as one batch, left-padded" in repr(batch)
    assert batch.prefill_ms > 0 and len(batch.decode_ms) == 5 and batch.tokens_per_second
    assert "GenerationResult" in repr(batch)


# positions from the past length (Marian as a causal LM), a recurrent state (RWKV), and Blenderbot (positions from
# the past length, and a generation-config rule that sends the call through transformers' generate() over the file)
@pytest.mark.parametrize("model_type", ["marian", "rwkv", "blenderbot"])
def test_prompts_of_different_lengths_get_their_own_tokens(model_type: str, tmp_path: Path) -> None:
    """A file whose logits change under left padding runs one batch per prompt length, in lockstep: each prompt
    gets the tokens it gets alone (PyTorch's), streaming still sees every row at each step, and the result says so."""
    import transformers

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from registry_sweep import tiny_config

    config = tiny_config(model_type)
    torch.manual_seed(0)
    model = transformers.MODEL_FOR_CAUSAL_LM_MAPPING[type(config)](config).eval()
    result = onnx_nb.export(model, out=tmp_path / "m", progress=False)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [15, 16, 17]]
    streamed: list[list[int]] = []
    through_loop = model_type != "blenderbot"  # (transformers' generate() settles its tokens at the end)
    batch = onnx_nb.generate(result, prompts, max_new_tokens=5, eos_token_id=-1,
                             stream=streamed.append if through_loop else None)
    for prompt, tokens in zip(prompts, batch.tokens):
        ids = torch.tensor([prompt])
        with torch.no_grad():
            want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, min_new_tokens=5,
                                  do_sample=False, eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
        assert tokens == want, (prompt, batch.tokens)
    assert batch.batching.startswith("2 batches by prompt length"), batch.batching
    assert "changes under left" in repr(batch) or "change under left" in repr(batch)
    if through_loop:
        assert [len(s) for s in streamed] == [3] * 5 and [s[1] for s in streamed] == batch.tokens[1]
    same = onnx_nb.generate(result, prompts[1:], max_new_tokens=2, eos_token_id=-1)
    assert same.batching == "one batch, left-padded", "prompts of one length need no padding"


def test_sampling_eos_and_inputs(exports: dict[str, onnx_nb.ExportResult]) -> None:
    result = exports["gpt2"]
    prompt = [[5, 6, 7, 8]]
    greedy = onnx_nb.generate(result, prompt, max_new_tokens=5, eos_token_id=-1)
    top1 = onnx_nb.generate(result, prompt, max_new_tokens=5, do_sample=True, top_k=1, eos_token_id=-1)
    assert top1.tokens == greedy.tokens, "top-k 1 sampling is greedy"
    a = onnx_nb.generate(result, prompt, max_new_tokens=8, do_sample=True, temperature=5.0, seed=3, eos_token_id=-1)
    b = onnx_nb.generate(result, prompt, max_new_tokens=8, do_sample=True, temperature=5.0, seed=3, eos_token_id=-1)
    c = onnx_nb.generate(result, prompt, max_new_tokens=8, do_sample=True, temperature=5.0, seed=4, eos_token_id=-1)
    assert a.tokens == b.tokens and a.tokens != c.tokens
    nucleus = onnx_nb.generate(result, prompt, max_new_tokens=8, do_sample=True, top_p=1e-6, eos_token_id=-1)
    assert nucleus.tokens == onnx_nb.generate(result, prompt, max_new_tokens=8, eos_token_id=-1).tokens
    first = greedy.tokens[0][0]
    stopped = onnx_nb.generate(result, prompt, max_new_tokens=5, eos_token_id=first)
    assert stopped.tokens[0] == [first], "stops at EOS (kept)"
    streamed: list[list[int]] = []
    onnx_nb.generate(result, {"input_ids": np.array(prompt), "attention_mask": np.ones((1, 4))}, max_new_tokens=3,
                     eos_token_id=-1, stream=streamed.append)
    assert [s[0] for s in streamed] == greedy.tokens[0][:3]
    with pytest.raises(onnx_nb.InvalidArgumentError, match="need a tokenizer"):
        onnx_nb.generate(result, "hello", max_new_tokens=2)


def test_text_in_text_out(minilm_dir: Path, tmp_path: Path) -> None:
    """With a tokenizer, prompts and results are text."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = transformers.AutoConfig.for_model("gpt2", n_embd=32, n_layer=1, n_head=2, vocab_size=tokenizer.vocab_size,
                                               n_positions=64)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "g.onnx", progress=False)
    out = onnx_nb.generate(result, ["the cat sat", "a much longer prompt about dogs"], tokenizer=tokenizer,
                           max_new_tokens=4, eos_token_id=-1)
    assert out.text is not None and len(out.text) == 2 and all(isinstance(t, str) and t for t in out.text)


def test_exact_tie_is_a_near_tie() -> None:
    model = tiny_models.build("gpt2")
    prompt = [5, 6, 7]
    with torch.no_grad():
        top = int(torch.argmax(model(input_ids=torch.tensor([prompt])).logits[0, -1]))
        other = (top + 1) % 100
        model.lm_head.weight[other] = model.lm_head.weight[top]  # identical rows: identical logits
    def logits_at(prefix: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return model(input_ids=torch.tensor([prompt + prefix])).logits[0, -1]

    check = compare_tokens(logits_at, [other], [top], 0)
    assert check.verdict == "near-tie" and check.gap == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():
        low = int(torch.argmin(model(input_ids=torch.tensor([prompt])).logits[0, -1]))
    far = compare_tokens(logits_at, [low], [top], 0)
    assert far.verdict == "DIVERGED" and far.gap is not None and far.gap > 0
    assert compare_tokens(logits_at, [top], [top], 0).verdict == "identical"


def test_a_damaged_decoder_diverges(exports: dict[str, onnx_nb.ExportResult], tmp_path: Path) -> None:
    result = exports["gpt2"]
    proto = onnx.load(str(result.path))
    inits = {i.name: i for i in proto.graph.initializer}
    matmul = [n for n in proto.graph.node if n.op_type in ("MatMul", "Gemm") and any(i in inits for i in n.input)]
    biggest = inits[next(i for i in matmul[len(matmul) // 2].input if i in inits)]
    weight = onnx.numpy_helper.to_array(biggest)
    noise = np.random.default_rng(0).normal(0, 5 * float(weight.std()), weight.shape).astype(weight.dtype)
    biggest.CopyFrom(onnx.numpy_helper.from_array(noise, biggest.name))
    bad = tmp_path / "bad.onnx"
    onnx.save(proto, str(bad))
    report = onnx_nb.check_parity(result, bad, progress=False)
    assert not report and any(r.status == "fail" and r.output == "logits" for r in report.rows)
    assert any(c.verdict == "DIVERGED" for c in report.generation)


def test_cache_false_keeps_whole_sequence_logits(tmp_path: Path, gpt2_whole_export: onnx_nb.ExportResult,
                                                 bert_export: onnx_nb.ExportResult) -> None:
    result = gpt2_whole_export  # read only (conftest's shared exports)
    assert [i.name for i in result.inputs] == ["input_ids", "attention_mask", "position_ids"]  # as generate() passes
    assert [o.name for o in result.outputs] == ["logits"] and result.cache_layout is None
    # generate() runs such a file on the whole sequence at each step: PyTorch's tokens, more slowly
    model = tiny_models.build("gpt2")
    for prompt in ([1, 2], [5, 6, 7, 8]):
        with torch.no_grad():
            eager = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                   max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
        assert onnx_nb.generate(result, [prompt], max_new_tokens=6, min_new_tokens=6).tokens == \
            [eager[0, len(prompt):].tolist()]
    classifier = bert_export  # read only (conftest's shared exports)
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"is not a decoder: generate.. needs an input_ids input "
                                                           "and a logits output per token"):
        onnx_nb.generate(classifier, [[1, 2]], max_new_tokens=2)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="cache='yes': use True, False or 'auto'"):
        onnx_nb.export(tmp_path / "nowhere", cache="yes")  # said before any model is looked for
    with pytest.raises(onnx_nb.InvalidArgumentError, match="cache=True is for generative models"):
        onnx_nb.export(tiny_models.build("bert"), out=tmp_path / "b.onnx", cache=True, progress=False)


def test_magic_and_cli(ip: object, exports: dict[str, onnx_nb.ExportResult]) -> None:
    import json
    import subprocess
    import sys

    result = exports["gpt2"]
    want = onnx_nb.generate(result, [[5, 6, 7], [8, 9]], max_new_tokens=3).tokens
    ip.user_ns["dec"] = result  # type: ignore[attr-defined]
    out = ip.run_line_magic("onnx_generate", "dec --ids '5,6,7;8,9' --max-new-tokens 3")  # type: ignore[attr-defined]
    assert isinstance(out, onnx_nb.GenerationResult) and out.tokens == want
    done = subprocess.run([sys.executable, "-m", "onnx_nb", "generate", str(result.path), "--ids", "5,6,7",
                           "--max-new-tokens", "3", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tokens"] == [want[0]]


@pytest.mark.lower_bounds
def test_generation_latency(exports: dict[str, onnx_nb.ExportResult], monkeypatch: pytest.MonkeyPatch) -> None:
    result = exports["llama"]
    table = onnx_nb.benchmark(result, reference=result, providers="cpu", shapes=[{"prompt": 16}, {"past": 24}],
                              runs=5, warmup=1, progress=False)
    got = [(r.variant, r.shape, r.status) for r in table.rows]
    assert got == [("PyTorch eager", "prefill 16 tokens", "ok"), ("fp32", "prefill 16 tokens", "ok"),
                   ("PyTorch eager", "decode 1 token after 24", "ok"),
                   ("PyTorch eager, no cache", "decode 1 token after 24", "ok"),
                   ("fp32", "decode 1 token after 24", "ok")], got
    onnx_row = table.rows[-1]
    assert onnx_row.speedup and onnx_row.throughput and onnx_row.batch == 1
    assert table.rows[0].speedup == pytest.approx(1.0) and table.rows[3].speedup is not None
    assert any("time to first token" in n for n in table.notes)
    weights = sum(p.numel() * 4 for p in result.source.model.parameters())
    held = Path(result.path).stat().st_size  # what an ORT session holds, however little the process grew (0.05 MB
    for row in table.rows:  # was shown for an 8.6 MB decoder): a torch row counts the weights it held
        assert row.peak_mb is not None, row.variant
        assert row.peak_mb * 1e6 >= (weights if row.backend.startswith("torch") else held), (row.variant, row.peak_mb)
    assert "peak_mb" in repr(table) and "peak_mb" in table.to_pandas().columns
    # a decode row moves its weights and its cache of 24 tokens once a step: judged on the bytes against this
    # machine's read bandwidth (prefill rows and the cacheless row are not bandwidth rows)
    from onnx_nb.runtime.onnxfile import file_bytes
    from onnx_nb.steps.benchmark import roofline
    from onnx_nb.steps.benchmark.generation_latency import OrtStep

    cache = sum(v.nbytes for k, v in OrtStep(result.path, "CPUExecutionProvider", 1, 24, 1, 100).feed.items()
                if k.startswith("past_key_values"))
    decode = {r.variant: r for r in table.rows if r.shape.startswith("decode")}
    assert decode["fp32"].moved_gb == pytest.approx((file_bytes(Path(result.path)) + cache) / 1e9)
    assert decode["PyTorch eager"].moved_gb and decode["PyTorch eager, no cache"].moved_gb is None
    assert all(r.moved_gb is None for r in table.rows if r.shape.startswith("prefill"))
    # this decoder moves a few MB a step: read from the CPU's caches, not judged against the memory's bandwidth;
    # a model past the size is (here: the same rows judged with the size set to nothing)
    assert all(r.of_peak is None for r in decode.values()) and not any("read bandwidth" in n for n in table.notes)
    monkeypatch.setattr(roofline, "BANDWIDTH_ABOVE", 0)
    note = roofline.add_bandwidth(table.rows, None)
    assert "read bandwidth" in note and all(
        r.of_peak == pytest.approx(r.moved_gb / (r.p50_ms / 1e3) / roofline.bandwidth_gbs(None))
        for r in decode.values() if r.moved_gb)
    # a variant's rows name their parent's and are marked (never the best) where no faster than them
    int8 = onnx_nb.quantize(result, method="dynamic", out=Path(result.path).with_name("llama.int8.onnx"),
                            overwrite=True)
    table = onnx_nb.benchmark([result, int8], reference=result, providers="cpu", shapes=[{"past": 24}], runs=5,
                              warmup=1, progress=False)
    parent = next(r for r in table.rows if r.variant == "fp32")
    child = next(r for r in table.rows if r.variant == int8.name)
    assert child.parent == "fp32" and child.slower == (child.p50_ms >= parent.p50_ms), (child, parent)
    assert ("slower than its parent fp32" in child.note) == child.slower
    with pytest.raises(onnx_nb.InvalidArgumentError, match="'prompt': N"):
        onnx_nb.benchmark(result, shapes=[{"batch": 2}], progress=False)


def test_io_binding_keeps_the_cache_in_onnx_runtime(exports: dict[str, onnx_nb.ExportResult]) -> None:
    """With I/O binding (on by default for GPU providers; forced here on the CPU) the cache never becomes numpy
    between steps, and the tokens are the same."""
    import onnxruntime as ort

    from onnx_nb.steps.generate.generation import OnnxDecoder, left_pad

    result = exports["llama"]
    decoder = OnnxDecoder(result.path, io_binding=True)
    assert decoder.device == "cpu" and OnnxDecoder(result.path).device is None
    ids, mask = left_pad([[5, 6, 7], [8, 9]], 0)
    logits, cache = decoder.step(ids, mask, decoder.empty_cache(2))
    assert isinstance(logits, np.ndarray) and logits.shape[:2] == (2, 3)
    assert all(isinstance(v, ort.OrtValue) and v.shape()[2] == 3 for v in cache.values())
    prompts = [[5, 6, 7], [8, 9]]
    assert onnx_nb.generate(result, prompts, max_new_tokens=6, eos_token_id=-1, io_binding=True).tokens == \
        onnx_nb.generate(result, prompts, max_new_tokens=6, eos_token_id=-1).tokens


def test_peak_memory_is_measured() -> None:
    """The kernel's high-water mark, reset before the work: 64 MiB touched and freed reads as ~67 MB."""
    from onnx_nb.runtime.memory import peak_memory

    with peak_memory() as peak:
        block = np.ones(64 * 2**20 // 8)
        del block
    assert peak.mb is not None and 60 <= peak.mb <= 80, peak.mb
    with peak_memory() as idle:
        pass
    assert idle.mb is not None and idle.mb < 8, idle.mb


NESTED_PEAKS = """
import json, numpy as np
from onnx_nb.runtime.memory import gives_memory_back, peak_memory, process_peak_bytes

with peak_memory() as outer:
    block = np.ones(64 * 2**20 // 8)
    del block
    with peak_memory() as inner:
        pass

def resident():
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmRSS:"))

@gives_memory_back
def step():
    blocks = [np.ones(100_000 // 8) for _ in range(3000)]  # 300 MB in pieces below mmap's threshold
    kept = blocks[::10]  # every tenth kept: the freed ones are holes the heap cannot shrink past
    del blocks
    return kept, resident()

kept, during = step()
print(json.dumps({"inner": inner.mb, "outer": outer.mb, "outer_high": outer.high_bytes,
                  "process": process_peak_bytes(), "during": during, "after": resident(), "kept": len(kept)}))
"""


def test_nested_peaks_the_process_peak_and_memory_given_back() -> None:
    """A block nested inside another resets the high-water mark, yet the outer block still sees the peak before it,
    and so does the process's own peak; memory a step freed in the middle of the heap goes back to the system after
    it (a kernel held 1.65 GB after MiniLM's export, optimize and quantize, 0.91 GB once given back). In a process of
    its own: another test's threads freeing memory meanwhile would move the figures."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", NESTED_PEAKS], capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    assert got["inner"] is not None and got["inner"] < 8 and got["outer"] is not None and got["outer"] >= 60, got
    assert got["process"] >= got["outer_high"] > 0, got
    assert got["during"] - got["after"] > 150e6 and got["kept"] == 300, got


def test_full_collections_where_a_step_left_memory_or_they_cost_little(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full collection after every step and sub-step took 0.5 s each in the test suite's workers (a process holding
    many models), most of a run: one runs where the step left LEFT_BEHIND bytes more resident than it found (ORT's
    transformer optimizer left 270 to 376 MB of cyclic garbage after MiniLM's), or where the last took at most
    FULL_SHARE of the time since it ended; otherwise the young generations are collected."""
    import time

    from onnx_nb.runtime import memory

    monkeypatch.setattr(memory, "_LAST_FULL", {"seconds": 0.0, "ended": float("-inf")})
    memory.give_back(full=True)  # nothing says what the work found: a full one
    ended = memory._LAST_FULL["ended"]
    assert ended > float("-inf")
    monkeypatch.setitem(memory._LAST_FULL, "seconds", 0.05)  # as if it had taken 50 ms

    @memory.gives_memory_back
    def step(seconds: float, keep: int = 0) -> np.ndarray:
        time.sleep(seconds)
        return np.ones(keep // 8)

    step(0.1)
    memory.give_back(full=True, before=memory.resident_bytes())
    assert memory._LAST_FULL["ended"] == ended  # neither a short step nor a call right after it
    held = step(0.0, keep=2 * memory.LEFT_BEHIND)  # a step that leaves memory behind
    assert memory._LAST_FULL["ended"] > ended
    ended = memory._LAST_FULL["ended"]
    monkeypatch.setitem(memory._LAST_FULL, "seconds", 0.05)
    step(0.5)  # 0.05 s is a tenth of the time since
    assert memory._LAST_FULL["ended"] > ended and held.size


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_optimize_reexports_decoders_with_standard_attention(exports: dict[str, onnx_nb.ExportResult], name: str,
                                                             tmp_path: Path) -> None:
    """optimize(attention="standard") on a decoder's export (and "auto" on GPT-2, which has no rotary embedding for
    GroupQueryAttention): torch.export at opset 23, one ONNX Attention per layer (its cache in and out), a
    smaller graph (no Softmax left) with the same signature; generation parity passes, and so does its dynamic INT8
    (ORT's quantizer would turn the standard Attention into a QAttention the runtime rejects)."""
    result = exports[name]
    fast = onnx_nb.optimize(result, out=tmp_path / "fast.onnx", attention="standard" if name == "llama" else "auto")
    assert fast, repr(fast.parity)
    layers = result.cache_layout.layers
    assert f"Attention x{layers}" in fast.recipe["attention_route"] and "opset 23" in fast.recipe["attention_route"]
    if name == "gpt2":
        assert "not GroupQueryAttention: no rotary embedding" in fast.recipe["attention_route"]
    before, after = onnx.load(str(result.path)).graph, onnx.load(str(fast.path)).graph
    assert sum(n.op_type == "Attention" and n.domain == "" for n in after.node) == layers
    assert not any(n.op_type == "Softmax" for n in after.node)  # each layer's attention is the one node
    assert len(after.node) < len(before.node), (len(after.node), len(before.node))

    def dims(graph: onnx.GraphProto) -> list[tuple[str, list[str | int]]]:
        return [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]) for i in graph.input]

    assert dims(after) == dims(before)  # same names, same axis names: a drop-in file
    prompts = [[5, 6, 7], [8, 9]]
    assert onnx_nb.generate(fast, prompts, max_new_tokens=5, eos_token_id=-1).tokens == \
        onnx_nb.generate(result, prompts, max_new_tokens=5, eos_token_id=-1).tokens
    int8 = onnx_nb.quantize(fast, out=tmp_path / "fast.int8.onnx")
    assert int8, repr(int8.parity)
    assert not any(n.op_type == "QAttention" for n in onnx.load(str(int8.path)).graph.node)


@pytest.mark.lower_bounds
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_group_query_attention_route(exports: dict[str, onnx_nb.ExportResult], name: str, tmp_path: Path) -> None:
    """optimize() on a Llama or Qwen2 export (Qwen2: Q/K/V biases): one GroupQueryAttention per layer with packed
    QKV and the rotary embedding inside, no position_ids input; generation parity passes (teacher-forced logits of
    a left-padded batch, greedy tokens); generate() gives the export's tokens on prompts of different lengths; its
    dynamic INT8 passes too."""
    result = exports[name]
    fast = onnx_nb.optimize(result, out=tmp_path / "gqa.onnx")
    assert fast, repr(fast.parity)
    layers = result.cache_layout.layers
    assert fast.recipe["attention_route"].startswith("GroupQueryAttention") and "shared" in fast.recipe["kv_cache"]
    graph = onnx.load(str(fast.path)).graph
    assert sum(n.op_type == "GroupQueryAttention" for n in graph.node) == layers
    assert not any(n.op_type in ("Attention", "RotaryEmbedding") for n in graph.node)
    assert sum(n.op_type == "MatMul" for n in graph.node) == 5 * layers + 1  # qkv (was 3), o, gate, up, down; lm head
    inputs = [i.name for i in graph.input]
    assert inputs[:2] == ["input_ids", "attention_mask"] and "position_ids" not in inputs
    assert inputs[2:] == [i.name for i in result.inputs][3:]
    assert [r.status for r in fast.parity.rows if r.output == "logits"] == ["pass"] * 9
    assert all((r.cosine or 0) > 0.99999 for r in fast.parity.rows if r.output == "logits")
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [15]]
    assert onnx_nb.generate(fast, prompts, max_new_tokens=10, eos_token_id=-1).tokens == \
        onnx_nb.generate(result, prompts, max_new_tokens=10, eos_token_id=-1).tokens
    int8 = onnx_nb.quantize(fast, out=tmp_path / "gqa.int8.onnx")
    assert int8, repr(int8.parity)
    assert sum(n.op_type == "GroupQueryAttention" for n in onnx.load(str(int8.path)).graph.node) == layers


def test_shared_key_value_buffer(exports: dict[str, onnx_nb.ExportResult], tmp_path: Path) -> None:
    """The GroupQueryAttention file's steps write into one buffer per cache tensor, bound as past and present:
    the same OrtValue after every step, the new token's keys written in place at its position; a buffer that runs
    out of room grows (copied) and the logits stay the export's, step by step."""
    import onnxruntime as ort

    from onnx_nb.steps.generate.generation import OnnxDecoder, SharedBufferDecoder, decoder_for, left_pad

    result = exports["llama"]
    fast = onnx_nb.optimize(result, out=tmp_path / "gqa.onnx", validate=False)
    shared, plain = decoder_for(fast.path), decoder_for(result.path)
    assert isinstance(shared, SharedBufferDecoder) and type(plain) is OnnxDecoder
    ids, mask = left_pad([[5, 6, 7, 8], [9, 10]], 0)
    cache = shared.empty_cache(2)  # no capacity given: the buffer fits the prompt, then grows
    reference = plain.empty_cache(2)
    logits, cache = shared.step(ids, mask, cache)
    expected, reference = plain.step(ids, mask, reference)
    np.testing.assert_allclose(logits[:, -1], expected[:, -1], atol=1e-4)
    name = "past_key_values.0.key"
    assert cache["buffers"][name].shape()[2] == 4
    for step in range(6):
        before = cache["buffers"][name]
        nxt = np.array([[20 + step], [30 + step]])
        mask = np.concatenate([mask, np.ones((2, 1), np.int64)], axis=1)
        logits, cache = shared.step(nxt, mask, cache)
        expected, reference = plain.step(nxt, mask, reference)
        np.testing.assert_allclose(logits[:, -1], expected[:, -1], atol=1e-4)
        buffer = cache["buffers"][name]
        assert isinstance(buffer, ort.OrtValue)
        grown = buffer.shape()[2] != before.shape()[2]
        assert grown or buffer.data_ptr() == before.data_ptr()  # written in place unless it had to grow
        keys, want = buffer.numpy(), reference[name]
        lengths = mask.sum(axis=1)
        for row in range(2):  # the row's keys sit at its first `length` positions (right-aligned in the export)
            np.testing.assert_allclose(keys[row, :, :lengths[row]], want[row, :, -lengths[row]:], atol=1e-5)
    assert cache["buffers"][name].shape()[2] >= 10


def test_generate_keeps_its_session_and_reads_builder_folders(exports: dict[str, onnx_nb.ExportResult],
                                                             tmp_path: Path) -> None:
    """A second generate() on the same file reuses the first one's decoder (no second parse, no second session);
    a changed file gets a new one. A GroupQueryAttention file as onnxruntime-genai's builder writes it (cache dims
    named, not fixed; its own rotary table names) generates the same tokens with the genai_config.json beside it,
    and is refused, saying what is missing, without."""
    from onnx_nb.steps.export.caches.gqa_io import COS, SIN
    from onnx_nb.steps.generate import runners

    fast = onnx_nb.optimize(exports["llama"], out=tmp_path / "gqa.onnx", validate=False)
    first = onnx_nb.generate(fast, [[5, 6, 7], [8]], max_new_tokens=6, eos_token_id=-1, threads=1)
    decoder = runners.LAST_RUNNER["runner"]
    again = onnx_nb.generate(fast, [[5, 6, 7], [8]], max_new_tokens=6, eos_token_id=-1, threads=1)
    assert runners.LAST_RUNNER["runner"] is decoder and again.tokens == first.tokens
    alone = subprocess.run(  # a process that only generates from a file never imports torch
        [sys.executable, "-c", "import sys, onnx_nb; r = onnx_nb.generate(sys.argv[1], [[5, 6, 7], [8]], "
         "max_new_tokens=6, eos_token_id=-1); print(r.tokens, 'torch' in sys.modules)", str(fast.path)],
        capture_output=True, text=True, timeout=300)
    assert alone.stdout.strip() == f"{first.tokens} False", alone.stderr[-2000:]

    proto = onnx.load(str(fast.path))
    renamed = {COS: "cos_cache", SIN: "sin_cache"}
    for tensor in proto.graph.initializer:
        tensor.name = renamed.get(tensor.name, tensor.name)
    for node in proto.graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
    for value in [*proto.graph.input, *proto.graph.output]:
        if value.name.startswith(("past_key_values.", "present.")):
            value.type.tensor_type.shape.dim[3].dim_param = "kv_cache_dim"
    folder = tmp_path / "builder"
    folder.mkdir()
    onnx.save(proto, str(folder / "model.onnx"))
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"genai_config\.json"):
        onnx_nb.generate(folder / "model.onnx", [[5, 6, 7]], max_new_tokens=2)
    config = exports["llama"].source.model.config
    layout = {"head_size": config.hidden_size // config.num_attention_heads,
              "num_key_value_heads": config.num_key_value_heads}
    (folder / "genai_config.json").write_text(json.dumps({"model": {"decoder": layout}}))
    builder = onnx_nb.generate(folder / "model.onnx", [[5, 6, 7], [8]], max_new_tokens=6, eos_token_id=-1)
    assert runners.LAST_RUNNER["runner"] is not decoder and builder.tokens == first.tokens
    assert runners.LAST_RUNNER["runner"].max_positions == config.max_position_embeddings  # read from "cos_cache"
    by_genai = onnx_nb.generate(folder / "model.onnx", [[5, 6, 7], [8]], max_new_tokens=6, eos_token_id=-1,
                                runtime="onnxruntime-genai")  # onnx-nb's C++-loop route reads such a file too
    assert by_genai.tokens == first.tokens


def test_onnxruntime_genai_runtime(ip: object, exports: dict[str, onnx_nb.ExportResult], tmp_path: Path) -> None:
    """runtime='onnxruntime-genai' drives onnx-nb's own GroupQueryAttention file with onnxruntime-genai's C++ loop:
    the same greedy tokens as onnx-nb's loop for prompts of different lengths, EOS stops a prompt, sampling is
    reproducible by seed; its folder (config + links) lives as long as the kept runner; the CLI and the magic
    carry it; a file without GroupQueryAttention or an unknown runtime is refused with what to do."""
    from onnx_nb.steps.generate import runners

    fast = onnx_nb.optimize(exports["llama"], out=tmp_path / "gqa.onnx", validate=False)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12], [13, 14, 15]]
    ours = onnx_nb.generate(fast, prompts, max_new_tokens=7, eos_token_id=-1)
    theirs = onnx_nb.generate(fast, prompts, max_new_tokens=7, eos_token_id=-1, runtime="onnxruntime-genai")
    assert theirs.tokens == ours.tokens and len(theirs.decode_ms) == 3 * 6 and theirs.prefill_ms > 0
    folder = runners.LAST_RUNNER["runner"].folder
    config = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]
    want = exports["llama"].source.model.config
    assert (folder / "gqa.onnx").is_symlink() and config["num_key_value_heads"] == want.num_key_value_heads
    assert config["num_hidden_layers"] == want.num_hidden_layers
    stop = ours.tokens[0][2]
    stopped = onnx_nb.generate(fast, [prompts[0]], max_new_tokens=7, eos_token_id=stop, runtime="onnxruntime-genai")
    assert stopped.tokens == [ours.tokens[0][:3]]
    sampled = [onnx_nb.generate(fast, [prompts[2]], max_new_tokens=6, do_sample=True, top_k=20, seed=seed,
                                runtime="onnxruntime-genai").tokens for seed in (1, 1, 2)]
    assert sampled[0] == sampled[1] and len(sampled[2][0]) == 6
    ip.user_ns["dec"] = fast  # type: ignore[attr-defined]
    out = ip.run_line_magic(  # type: ignore[attr-defined]
        "onnx_generate", "dec --ids '5,6,7,8,9,10,11' --max-new-tokens 7 --runtime onnxruntime-genai")
    assert out.tokens == [ours.tokens[0]]
    onnx_nb.generate(exports["llama"], [[5]], max_new_tokens=1)  # another file: the genai runner and folder go
    assert not folder.exists()
    with pytest.raises(onnx_nb.InvalidArgumentError, match="no GroupQueryAttention"):
        onnx_nb.generate(exports["llama"], [[5, 6]], runtime="onnxruntime-genai")
    with pytest.raises(onnx_nb.InvalidArgumentError, match="runtime='genai'"):
        onnx_nb.generate(fast, [[5, 6]], runtime="genai")
    done = subprocess.run([sys.executable, "-m", "onnx_nb", "generate", str(fast.path), "--ids", "12",
                           "--max-new-tokens", "7", "--runtime", "onnxruntime-genai", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tokens"] == [ours.tokens[1]]


def test_gqa_route_refusals(ip: object, exports: dict[str, onnx_nb.ExportResult], tmp_path: Path) -> None:
    """attention='gqa' where it cannot apply says why; attention= on a model that is no decoder export is refused;
    the magic carries the option."""
    with pytest.raises(onnx_nb.NotRewritableError, match="no rotary embedding"):
        onnx_nb.optimize(exports["gpt2"], attention="gqa", out=tmp_path / "g.onnx", validate=False)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="decoder's own export"):
        onnx_nb.optimize(exports["llama"].path, attention="standard", out=tmp_path / "p.onnx")
    with pytest.raises(onnx_nb.InvalidArgumentError, match="attention='fast'"):
        onnx_nb.optimize(exports["llama"], attention="fast")
    ip.user_ns["dec"] = exports["qwen2"]  # type: ignore[attr-defined]
    out = ip.run_line_magic(  # type: ignore[attr-defined]
        "onnx_optimize", f"dec --attention standard --out {tmp_path / 'std.onnx'}")
    assert out and out.recipe["attention_route"].startswith("re-exported with torch.export")


def test_int4_for_decoders(exports: dict[str, onnx_nb.ExportResult], tmp_path: Path) -> None:
    """Decoders get every projection in INT4 (GPT-2's Gemm ones too) with int8 compute; the variant is checked by
    generation parity (random tiny weights do not survive 4 bits: the report says how)."""
    import onnxruntime as ort

    from onnx_nb.steps.variants.quantizing import gemm_to_matmul

    variant = onnx_nb.quantize(exports["gpt2"], method="int4", out=tmp_path / "g4.onnx")
    assert variant.recipe["accuracy_level"] == 4 and variant.recipe["gemm_as_matmul"] is True
    assert variant.fused["com.microsoft.MatMulNBits"] >= 2 * 4  # attention and MLP projections of both layers
    assert variant.parity is not None and variant.parity.generation and variant.parity.precision == "int4"

    proto = onnx.load(str(exports["gpt2"].path))
    gemms = sum(n.op_type == "Gemm" for n in proto.graph.node)
    assert gemm_to_matmul(proto) == gemms > 0 and not any(n.op_type == "Gemm" for n in proto.graph.node)
    onnx.save(proto, str(tmp_path / "mm.onnx"))
    feed = {i.name: v.numpy() for i, v in zip(exports["gpt2"].inputs, exports["gpt2"].source.sample.values())}
    before = ort.InferenceSession(str(exports["gpt2"].path)).run(None, feed)[0]
    after = ort.InferenceSession(str(tmp_path / "mm.onnx")).run(None, feed)[0]
    np.testing.assert_allclose(after, before, atol=1e-5)



def bart() -> object:
    import transformers

    config = transformers.AutoConfig.for_model(
        "bart", d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=37, decoder_ffn_dim=37, vocab_size=100, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.BartForConditionalGeneration(config).eval()


@pytest.mark.lower_bounds
@pytest.mark.parametrize("name", ["t5", "bart", "whisper"])
def test_encoder_decoder_with_caches(name: str, tmp_path: Path) -> None:
    model = bart() if name == "bart" else tiny_models.build(name)
    result = onnx_nb.export(model, out=tmp_path / "m.onnx", progress=False)
    assert result, repr(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.encoder.onnx", "m.onnx"]
    assert len(result.files) == 2 and result.exporter == "torchscript"
    assert result.parts == {"encoder": (tmp_path / "m.encoder.onnx").resolve()}  # a named part of its result
    names = [i.name for i in result.inputs]
    assert names[0] == "decoder_input_ids" and "past_key_values.0.decoder.key" in names
    assert "past_key_values.0.encoder.key" in names, "the cross-attention cache comes from the encoder file"
    assert [o.name for o in result.outputs][:2] == ["logits", "present.0.decoder.key"]
    assert "cross-attention cache computed once" in repr(result)
    encoder = onnx.load(str(tmp_path / "m.encoder.onnx"))
    assert {o.name for o in encoder.graph.output} >= {"encoder_hidden_states", "present.0.encoder.key"}

    report = onnx_nb.check_parity(result, progress=False)
    assert report, repr(report)
    assert next(r.shape for r in report.rows if r.output == "logits") == "first decoder step (batch)"
    assert all(c.verdict in ("identical", "near-tie") for c in report.generation) and len(report.generation) == 3 + 12

    if name == "whisper":
        features = torch.randn(1, model.config.num_mel_bins, 2 * model.config.max_source_positions)
        got = onnx_nb.generate(result, {"input_features": features}, max_new_tokens=4, eos_token_id=-1)
        assert len(got.tokens[0]) == 4
    else:
        got = onnx_nb.generate(result, [[5, 6, 7, 8]], max_new_tokens=4, eos_token_id=-1)
        with torch.no_grad():
            want = model.generate(torch.tensor([[5, 6, 7, 8]]), max_new_tokens=4, min_new_tokens=4, do_sample=False,
                                  eos_token_id=None)[0, 1:].tolist()
        assert got.tokens[0] == want
    table = onnx_nb.benchmark(result, reference=result, providers="cpu", shapes=[{"past": 8}], runs=3, warmup=1,
                              progress=False)
    got = [(r.variant, r.status) for r in table.rows]
    assert got == [("PyTorch eager", "ok"), ("PyTorch eager, no cache", "ok"), ("fp32", "ok")], got
    assert all(r.shape == "decode 1 token after 8" and r.speedup for r in table.rows)
    assert "computed once" in table.rows[0].options["encoder"]


def test_encoder_decoder_whole_sequence_still_available(tmp_path: Path) -> None:
    result = onnx_nb.export(tiny_models.build("t5"), out=tmp_path / "t.onnx", cache=False, progress=False)
    assert [i.name for i in result.inputs] == ["input_ids", "attention_mask", "decoder_input_ids"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.onnx"]


def test_variants_of_an_encoder_decoder(tmp_path: Path) -> None:
    """optimize() and quantize() work on the decoder file; the variant runs with the export's encoder file."""
    result = onnx_nb.export(tiny_models.build("t5"), out=tmp_path / "t.onnx", progress=False)
    variant = onnx_nb.quantize(result, out=tmp_path / "t.int8.onnx")
    assert variant and variant.parity.generation, repr(variant.parity)
    assert not (tmp_path / "t.int8.encoder.onnx").exists()
    assert onnx_nb.generate(variant, [[5, 6, 7]], max_new_tokens=3, eos_token_id=-1).tokens == \
        onnx_nb.generate(result, [[5, 6, 7]], max_new_tokens=3, eos_token_id=-1).tokens


def test_pytorchs_answers_are_asked_once_while_kept(gpt2_export: onnx_nb.ExportResult) -> None:
    """quantize() judges every candidate file against one model on the same inputs: inside pytorch_answers_kept,
    PyTorch's greedy tokens and beams are computed once (fewer of the model's forward passes the second time, the
    same verdicts); outside it, every check asks PyTorch again (a model changed between two calls is never stale)."""
    from onnx_nb.steps.parity.answers import pytorch_answers_kept

    model = gpt2_export.source.model
    calls: list[int] = []

    def checked() -> tuple[int, list[str]]:
        calls.clear()
        report = onnx_nb.check_parity(gpt2_export, progress=False)
        return len(calls), [f"{r.output} {r.shape} {r.status} {r.note}" for r in report.rows]

    hook = model.register_forward_hook(lambda *_: calls.append(1))
    try:
        plain = [checked(), checked()]
        with pytorch_answers_kept():
            kept = [checked(), checked()]
        after = checked()
    finally:
        hook.remove()
    assert plain[0][0] == plain[1][0] == kept[0][0] == after[0] > kept[1][0] > 0, (plain, kept, after)
    assert plain[0][1] == kept[1][1] == after[1]
