"""A fixed, representative subset of the registry sweep (benchmarks/registry_sweep.py), run as the sweep runs it:
each type built tiny from transformers' own default config, one default export of its folder, and generate() against
PyTorch's greedy tokens. The whole sweep (every causal LM type) is the supported-architectures page."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import onnx_nb
from onnx_nb.steps.export.machinery.torch_route import UPSTREAM

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import registry_sweep
import seq2seq_sweep

# one of each road a causal LM takes: a mixture of experts through the grouped-matmul translation (Mixtral, Qwen2-MoE),
# an encoder registered as a causal LM (BERT, is_decoder=False: no cache; Megatron-BERT, is_decoder=False yet filling
# the cache generate() hands it, so its file carries one), a decoder with no cache at all (GPT-1),
# Blenderbot's decoder (its generation config sets a rule onnx-nb's loop does not run), and Gemma 3's text model
# (sliding-window layers between global ones), Helium (RMS norms with an epsilon of 1e-8, and a prompt holding its
# padding token, whose embedding row is zero), and two whose cache is more than keys and values, exported without it:
# MiniMax (a cache class of its own) and Inkling 2 (linear attention's conv state beside its keys and values), and
# Gemma 4 as the registry gives it (its multimodal class with no towers; an audio token named but no audio tower to
# fill it, so not a speech LLM; its full-attention layers' heads twice its sliding layers': a cache shaped by layer),
# and DeepSeek-V3.2 (sparse attention: an indexer's keys cached beside each layer's keys and values),
# XLM-RoBERTa-XL (an encoder that fills the cache generate() hands it in place, returning none) and Inkling (its
# attention output viewed at strides only torch's fused kernel gives: dynamo traces it with eager attention)
# at the sweep's second size too (other widths, head counts and depth): sliding-window layers between global ones
SECOND_SIZE = {"gemma3_text"}
SUBSET = ["mixtral", "qwen2_moe", "bert", "megatron-bert", "openai-gpt", "blenderbot", "gemma3_text", "helium",
          "minimax", "inkling2_text", "gemma4", "deepseek_v32", "xlm-roberta-xl", "inkling_text"]


@pytest.mark.parametrize("model_type", SUBSET)
def test_registry_type_exports_and_generates_pytorchs_tokens(model_type: str, tmp_path: Path) -> None:
    row = registry_sweep.one(model_type, registry_sweep.registry()[model_type], tmp_path / "model", variants=False,
                             second=model_type in SECOND_SIZE)
    assert row["pytorch"] == "ok", row
    assert row["export"] == "ok", row
    assert row["generate"] == "same", row
    assert row["batch"] == "same", row  # the two prompts as one list: each its own tokens
    if model_type in SECOND_SIZE:
        assert row["second_size"] == "same", row


def test_a_cache_of_linear_attention_layers_only(tmp_path: Path) -> None:
    """LFM-3 of one layer: its cache holds linear-attention layers only, which cannot tell a sequence length, so the
    model counts no positions from it; the export hands it positions as generate() does."""
    import transformers

    config = registry_sweep.tiny_config("lfm3", {**registry_sweep.TINY, "num_hidden_layers": 1})
    torch.manual_seed(0)
    model = transformers.Lfm3ForCausalLM(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "m", progress=False)
    assert result, repr(result)
    prompt = [5, 9, 14, 3]
    with torch.no_grad():
        ids = torch.tensor([prompt])
        want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False,
                              eos_token_id=None)[0, len(prompt):].tolist()
    assert onnx_nb.generate(result, [prompt], max_new_tokens=5, eos_token_id=-1).tokens == [want]


def test_moe_file_runs_each_expert_on_its_own_tokens_only(tmp_path: Path) -> None:
    """The grouped-matmul translation: one MatMul per expert on that expert's rows, never every expert on every
    token (the file's MatMuls on the expert weights see a dynamic row count)."""
    import onnx

    config = registry_sweep.tiny_config("mixtral")
    torch.manual_seed(0)
    import transformers

    model = transformers.MixtralForCausalLM(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "m.onnx", progress=False)
    assert result and result.exporter == "dynamo", repr(result)
    graph = onnx.load(str(result.path), load_external_data=False).graph
    experts = config.num_local_experts * config.num_hidden_layers
    assert sum(n.op_type == "Range" for n in graph.node) >= experts  # each expert's rows (up and down share them)
    assert sum(n.op_type == "MatMul" for n in graph.node) >= 2 * experts  # each expert's up and down projections


def test_experts_with_their_own_loop_and_zero_compute_experts_export_and_generate(tmp_path: Path) -> None:
    """LongCat-Flash writes its own experts loop (``int(expert.item())`` per expert hit) and adds "zero-compute"
    experts (a slot that returns the token itself): the export dispatches them as transformers' grouped matmul
    (dynamo, no TorchScript ``If``), and the file gives PyTorch's tokens with slots of both kinds taken."""
    import transformers

    from onnx_nb.steps.export.patches.experts import traceable_experts

    config = transformers.LongcatFlashConfig(
        num_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=32,
        qk_rope_head_dim=8, qk_nope_head_dim=8, head_dim=8, qk_head_dim=16, v_head_dim=16, n_routed_experts=4,
        zero_expert_num=2, moe_topk=2, expert_ffn_hidden_size=32, ffn_hidden_size=128, vocab_size=100)
    torch.manual_seed(0)
    model = transformers.LongcatFlashForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
        prompt = torch.tensor([[5, 9, 14, 3, 22, 17, 40, 61]])
        taken = model.model.layers[0].mlp.router(model.model.embed_tokens(prompt))[2]
        assert bool((taken >= 4).any()) and bool((taken < 4).any()), taken  # computing and zero-compute slots
        expected = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False)
        plain = model(prompt).logits
        with traceable_experts(model) as names:  # the dispatch is the model's own arithmetic
            assert names == [f"model.layers.{i}.mlp.experts" for i in range(2)]
            assert model(prompt).logits.allclose(plain, atol=1e-5)
        assert "forward" not in vars(model.model.layers[0].mlp.experts)  # its own loop back
    result = onnx_nb.export(model, out=tmp_path / "l.onnx", progress=False)
    assert result and result.exporter == "dynamo", repr(result)
    made = onnx_nb.generate(result, prompt.tolist(), max_new_tokens=6, eos_token_id=-1).tokens[0]
    assert made == expected[0, prompt.shape[1]:].tolist()


def test_windows_compressed_into_entries_export_at_every_length_and_generate(tmp_path: Path) -> None:
    """DeepSeek-V4 (a cache whose layers are a class of its own, not carried: the file takes the whole sequence)
    pools each window of tokens into one more key/value entry (overlapping windows picked by an
    indexer in one layer, plain windows in the other) and decides from the length in Python whether any window
    closed: the trace fixed the sequence at the sample's 7 tokens. The branch-free form is the model's arithmetic at
    lengths with no window, one and several, padded; the file takes any length and gives PyTorch's tokens (those
    of its cached generate) while windows close during the generation. Prompts one at a time: PyTorch's own padded
    batch gives other tokens than its prompts alone (the padding enters the windows)."""
    import transformers

    from onnx_nb.steps.export.caches.decoder import NoKeyValueCache, layout_of
    from onnx_nb.steps.export.patches.windows import traceable_windows

    config = registry_sweep.causal_config("deepseek_v4", "DeepseekV4ForCausalLM", registry_sweep.TINY)
    config.compress_rates = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8}
    config.vocab_size = 300
    torch.manual_seed(0)
    model = transformers.DeepseekV4ForCausalLM(config).eval()
    with pytest.raises(NoKeyValueCache, match="DeepseekV4HCACache"):  # its cache layers are its own: not rebuilt
        layout_of(model)
    with torch.no_grad():
        for length in (3, 9, 17):
            ids = torch.randint(3, 300, (2, length))
            mask = torch.ones(2, length, dtype=torch.long)
            mask[1, :2] = 0
            given = {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
                     "use_cache": False}
            plain = model(**given).logits
            with traceable_windows(model) as names:
                assert model(**given).logits.allclose(plain, atol=1e-5), length
        assert names == ["model.layers.0.self_attn.compressor", "model.layers.1.self_attn.compressor",
                         "model.layers.1.self_attn.compressor.indexer"]
        # the indexer keeping fewer entries (2) than the windows closed (4 of 17 tokens); with this seed no two
        # scores tie at the cut (a tie at the ReLU's zero may go either way: other seeds differ there, and only there)
        config.index_topk = 2
        torch.manual_seed(0)
        fewer = transformers.DeepseekV4ForCausalLM(config).eval()
        ids = torch.randint(3, 300, (1, 17))
        plain = fewer(input_ids=ids, use_cache=False).logits
        with traceable_windows(fewer):
            assert fewer(input_ids=ids, use_cache=False).logits.allclose(plain, atol=1e-5)
        assert "forward" not in vars(model.model.layers[1].self_attn.compressor.indexer)
        prompts = [[5, 9, 14, 3, 22, 17], [40, 61, 7]]
        expected = [model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                   max_new_tokens=12, do_sample=False)[0, len(p):].tolist() for p in prompts]
    result = onnx_nb.export(model, out=tmp_path / "d.onnx", progress=False)
    assert result and result.exporter == "dynamo", repr(result)
    assert not result.fixed_axes, result.fixed_axes
    assert [onnx_nb.generate(result, [p], max_new_tokens=12, eos_token_id=-1).tokens[0] for p in prompts] == expected


@pytest.mark.parametrize("model_type, class_name", [("recurrent_gemma", "RecurrentGemmaForCausalLM"),
                                                     ("rwkv", "RwkvForCausalLM")])
def test_recurrences_looping_over_the_tokens_export_as_a_scan(tmp_path: Path, model_type: str,
                                                              class_name: str) -> None:
    """RecurrentGemma's RG-LRU and RWKV's WKV loop over the tokens in Python, which a trace unrolled at the sample's 7
    tokens. As a scan (the same arithmetic) the whole-sequence file takes any length, one token
    included, and gives PyTorch's tokens for prompts shorter and longer than the sample."""
    import transformers

    from onnx_nb.steps.export.patches.scans import traceable_scans

    config = registry_sweep.causal_config(model_type, class_name, registry_sweep.TINY)
    torch.manual_seed(0)
    model = getattr(transformers, class_name)(config).eval()
    prompts = [[5], [5, 9, 14, 3, 22, 17, 40, 61, 7, 11, 30]]
    with torch.no_grad():
        ids = torch.tensor([prompts[1]])
        plain = model(input_ids=ids, use_cache=False).logits
        with traceable_scans(model) as replaced:
            assert replaced and model(input_ids=ids, use_cache=False).logits.allclose(plain, atol=1e-5)
        expected = [model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                   max_new_tokens=6, do_sample=False)[0, len(p):].tolist() for p in prompts]
    result = onnx_nb.export(model, out=tmp_path / "r.onnx", progress=False)
    assert result and result.exporter == "dynamo" and not result.fixed_axes, repr(result)
    assert result.op_histogram.get("Scan"), result.op_histogram
    assert result.patch_set == "onnx-nb" and "token scans" in result.patches, result.patches
    if model_type == "rwkv":  # transformers registers a patch for RWKV (its kernels off): its set ran first and its
        # file, the loop traced at the sample's length, failed the check
        assert "did not match PyTorch" in result.fallback_reason[UPSTREAM], result.fallback_reason
    assert [onnx_nb.generate(result, [p], max_new_tokens=6, eos_token_id=-1).tokens[0] for p in prompts] == expected


def test_transformers_own_patches_run_first_where_it_writes_them(tmp_path: Path) -> None:
    """transformers registers an export patch for YOSO's own code (its CUDA kernels switched off): the file is traced
    under transformers' whole patch set, none of onnx-nb's rewrites, and passes the check; BERT has none registered,
    and onnx-nb's route runs alone (its ``len()`` of a tensor read as the tensor's size, in BERT's module)."""
    import transformers

    sizes = {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
             "intermediate_size": 64, "max_position_embeddings": 64}
    torch.manual_seed(0)
    yoso = transformers.YosoForMaskedLM(transformers.YosoConfig(**sizes)).eval()
    result = onnx_nb.export(yoso, out=tmp_path / "y.onnx", progress=False)
    assert result and result.exporter == "dynamo" and not result.fallback_reason, repr(result)
    assert result.patch_set == "transformers", result.patches
    assert result.patches["transformers"] == ["transformers.models.yoso.modeling_yoso.is_kernels_available"]
    assert "transformers' own for this model: modeling_yoso.is_kernels_available" in repr(result)
    bert = transformers.BertForMaskedLM(transformers.BertConfig(**sizes)).eval()
    plain = onnx_nb.export(bert, out=tmp_path / "b.onnx", progress=False)
    assert plain and UPSTREAM not in plain.fallback_reason, repr(plain)
    assert plain.patch_set == "onnx-nb" and plain.patches == {"lengths": ["transformers.models.bert.modeling_bert"]}
    from onnx_nb.steps.export.patches import upstream

    # a patch counts for the code a model runs: the classes whose forward ran (a decoder holding a tower it never
    # runs does not count the tower's), and the modeling module's functions of those
    span = transformers.models.qwen2_vl.modeling_qwen2_vl.VisionAttention
    text = transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLTextModel
    assert upstream.registered_for(None, {span}) == [f"{span.__module__}.VisionAttention.forward"]
    assert upstream.registered_for(None, {text}) == [] and upstream.registered_for(None, {torch.nn.Linear}) == []
    import transformers.integrations.moe  # registers the experts' op, as a model using it does

    from onnx_nb.steps.export.patches import translations

    table = translations.table()  # the experts' dispatch both translate: transformers' translation is given
    for op in (torch.ops.aten._grouped_mm.default, torch.ops.transformers.grouped_mm_fallback.default):
        assert table[op].__module__ == "transformers.exporters.exporter_onnx", table[op]


def test_uncached_decoder_says_so_and_cache_true_is_refused(tmp_path: Path) -> None:
    import transformers

    config = registry_sweep.tiny_config("openai-gpt")
    torch.manual_seed(0)
    model = transformers.OpenAIGPTLMHeadModel(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "g.onnx", progress=False)
    assert result and result.cache_layout is None
    assert any("exported without a cache: OpenAIGPTLMHeadModel returns no cache" in w for w in result.warnings)
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"cache=True: OpenAIGPTLMHeadModel returns no cache.*"
                                                           "cache=False"):
        onnx_nb.export(model, out=tmp_path / "h.onnx", cache=True, progress=False)


def test_encoder_filling_the_cache_in_place_carries_it_through_parity(tmp_path: Path) -> None:
    """XLM-RoBERTa-XL (is_decoder=False) fills the cache generate() hands it without returning one: the file carries
    that cache, and generation parity's PyTorch side keeps the cache it handed over (it lost it, and every decode
    step failed on a mask longer than the keys)."""
    import transformers

    config = registry_sweep.causal_config("xlm-roberta-xl", "XLMRobertaXLForCausalLM", registry_sweep.TINY)
    torch.manual_seed(0)
    model = transformers.XLMRobertaXLForCausalLM(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "x.onnx", progress=False)
    assert result.cache_layout is not None
    report = onnx_nb.check_parity(result, progress=False)
    assert report and report.generation, report


def test_token_appended_by_the_models_generate_is_fed_each_step(tmp_path: Path) -> None:
    """XLM's generate() appends its mask token to the ids at every step and takes the logits there (its
    prepare_inputs_for_generation): the export finds that by calling it, writes the token into the file, and the
    whole-sequence runner feeds it. Untied weights, so the tokens vary; the third token is a near-tie (PyTorch's
    generate runs XLM's own cache: its margin there is 0.002 of 0.6), so the first two and the last five are
    compared."""
    import onnxruntime as ort
    import transformers

    from onnx_nb.runtime.facts import APPENDED

    config = registry_sweep.tiny_config("xlm")
    config.tie_word_embeddings = False
    torch.manual_seed(0)
    model = transformers.XLMWithLMHeadModel(config).eval()
    prompt = [5, 9, 14, 3, 22, 17]
    with torch.no_grad():
        want = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 6, dtype=torch.long),
                              max_new_tokens=8, do_sample=False)[0, 6:].tolist()
    result = onnx_nb.export(model, out=tmp_path / "x.onnx", progress=False)
    meta = ort.InferenceSession(str(result.path)).get_modelmeta().custom_metadata_map
    assert result and meta[APPENDED] == str(config.mask_token_id)
    made = onnx_nb.generate(result, [prompt], max_new_tokens=8).tokens[0]
    assert len(set(want)) > 4 and made[:2] == want[:2] and made[3:] == want[3:], (made, want)


def test_page_counts_only_what_pytorch_runs_and_escapes() -> None:
    rows = [{"type": "a", "class": "AForCausalLM", "pytorch": "ok", "export": "ok", "generate": "same"},
            {"type": "b", "class": "BForCausalLM", "pytorch": "ok", "export": "SampleError: <bad> | x"},
            {"type": "c", "class": "CForCausalLM", "pytorch": "cannot build: ValueError: no"},
            {"type": "d", "class": "DForCausalLM", "pytorch": "ok", "export": "ok", "generate": "differs",
             "routers_spread": ["model.layers.1.mlp.router.gate"]}]
    text = registry_sweep.page(rows, {"date": "2026-11-26", "transformers": "5.24.0", "torch": "2.13.0",
                                      "onnxruntime": "1.32.0"})
    assert "**1 of the 3 causal LMs PyTorch can build and run (33.3%)" in text
    assert "| d | DForCausalLM | ✓ | ✗ |  |  | differs; router starts at zero: 1 given random weights |" in text
    assert "&lt;bad&gt; / x" in text and "<bad>" not in text
    assert "| c | CForCausalLM | – | – | – | – | PyTorch cannot build: ValueError: no |" in text
    # whose patches served the sweeps' rows of the types transformers writes export patches for (its registry)
    assert "### Whose patches" in text and "registers export patches for the code of" in text


def test_sliding_window_decoder_is_right_past_its_window(tmp_path: Path) -> None:
    """A sliding-window model (Mistral, window 4) gives PyTorch's tokens long after the window: the file's cache is
    built of full layers, the window the mask's (a trace of transformers' sliding layer baked its length in)."""
    import transformers

    config = registry_sweep.tiny_config("mistral")
    config.sliding_window = 4
    torch.manual_seed(0)
    model = transformers.MistralForCausalLM(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "m.onnx", progress=False)
    assert result and result.cache_layout is not None, repr(result)
    prompt = [5, 9, 14, 3, 22, 17]
    with torch.no_grad():
        eager = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 6, dtype=torch.long),
                               max_new_tokens=14, min_new_tokens=14, do_sample=False)[0, 6:].tolist()
    assert onnx_nb.generate(result, [prompt], max_new_tokens=14, min_new_tokens=14).tokens == [eager]


def test_histc_translation_counts_as_torch_does(tmp_path: Path) -> None:
    """aten::histc (a router's tokens per expert) through the dynamo exporter: given and data ranges, values outside
    left out, the top edge in the last bin; checked on inputs the export never saw."""
    import onnxruntime as ort

    class Counts(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.histc(x, bins=5, min=0, max=4), torch.histc(x * 1.5, bins=7)

    sample = torch.tensor([0.0, 1, 1, 2, 4, 4, 3, 5, -1, 2.5])
    result = onnx_nb.export(Counts(), (sample,), out=tmp_path / "h.onnx", exporter="dynamo", progress=False)
    assert result, repr(result)
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    for values in (torch.tensor([3.0, 3, 0, 1.2, 9]), torch.arange(16.0) % 7):
        got = session.run(None, {session.get_inputs()[0].name: values.numpy()})
        assert [g.tolist() for g in got] == [t.tolist() for t in Counts()(values)]


def test_isin_translation_finds_each_element_among_the_test_elements(tmp_path: Path) -> None:
    """aten::isin (Grounding DINO's delimiter tokens among the prompt's ids): the exporter decomposed it into
    searchsorted, which has no translation, so the export failed in every exporter. Now one comparison of every
    element with every test element; checked, inverted too and against float test elements, on other ids and other
    (and no) test elements."""
    import onnxruntime as ort

    class Delimiters(torch.nn.Module):
        def forward(self, ids: torch.Tensor, special: torch.Tensor) -> tuple[torch.Tensor, ...]:
            # and in a common type, as torch compares: 1 is not among 1.5's
            return torch.isin(ids, special), torch.isin(ids, special, invert=True), torch.isin(ids, special + 0.5)

    sample = {"ids": torch.randint(0, 10, (2, 7)), "special": torch.tensor([1, 4, 7])}
    result = onnx_nb.export(Delimiters(), sample, out=tmp_path / "d.onnx", exporter="dynamo", progress=False,
                            dynamic={"ids": {0: "batch", 1: "sequence"}, "special": {0: "count"}})
    assert result, repr(result)
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    for special in (torch.tensor([3]), torch.tensor([0, 2, 5, 9, 8]), torch.zeros(0, dtype=torch.long)):
        ids = torch.randint(0, 10, (3, 11))
        got = session.run(None, {"ids": ids.numpy(), "special": special.numpy()})
        assert [g.tolist() for g in got] == [t.tolist() for t in Delimiters()(ids, special)]


def test_running_maximum_and_minimum_translations_give_torchs_values_and_places(tmp_path: Path) -> None:
    """aten::cummax and aten::cummin (Grounding DINO's previous and next delimiter of each token) had no ONNX
    translation; now each place against every place before it: torch's values, and its places for ties (the last
    seen), along either axis, on integer and float inputs the export never saw."""
    import onnxruntime as ort

    class Running(torch.nn.Module):
        def forward(self, ids: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
            most, least, down = torch.cummax(ids, dim=1), torch.cummin(ids.flip(1), dim=1), torch.cummax(scores, 0)
            return (*most, *least, *down)

    sample = {"ids": torch.randint(0, 5, (2, 9)), "scores": torch.randn(6, 3)}
    result = onnx_nb.export(Running(), sample, out=tmp_path / "r.onnx", exporter="dynamo", progress=False,
                            dynamic={"ids": {0: "batch", 1: "sequence"}, "scores": {0: "rows"}})
    assert result, repr(result)
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    for seed in (1, 2):
        torch.manual_seed(seed)
        ids, scores = torch.randint(0, 4, (3, 13)), torch.randn(5, 3)  # few values: ties
        got = session.run(None, {"ids": ids.numpy(), "scores": scores.numpy()})
        assert [g.tolist() for g in got] == [t.tolist() for t in Running()(ids, scores)]


def test_scatter_reduce_mean_averages_what_lands_on_each_place(tmp_path: Path) -> None:
    """aten::scatter_reduce with reduce="mean" (TAPAS' cell averages): torchlib wrote ONNX's reduction="none", the
    last value scattered to a place winning (0.09 off on the first inputs here; TAPAS' logits 0.15); the export
    averages, with and without ``self``'s value, and keeps ``self`` where nothing lands; an index shorter than the
    values reads only the part it covers, as torch does. Checked on indices and values the export never saw."""
    import onnxruntime as ort

    class Means(torch.nn.Module):
        def forward(self, index: torch.Tensor, src: torch.Tensor, base: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (base.scatter_reduce(0, index, src, reduce="mean", include_self=False),
                    base.scatter_reduce(0, index, src, reduce="mean"),
                    base.scatter_reduce(0, index, src, reduce="amax", include_self=False),
                    base.scatter_reduce(0, index[:5], src, reduce="mean", include_self=False))  # src longer

    sample = (torch.tensor([0, 0, 3, 5, 5, 5, 7]), torch.randn(7), torch.randn(8))
    result = onnx_nb.export(Means(), sample, out=tmp_path / "m.onnx", exporter="dynamo", dynamic=False,
                            progress=False)
    assert result, repr(result)
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    for seed in (1, 2):
        torch.manual_seed(seed)
        given = (torch.randint(0, 8, (7,)), torch.randn(7), torch.randn(8))
        got = session.run(None, {i.name: v.numpy() for i, v in zip(session.get_inputs(), given)})
        for g, want in zip(got, Means()(*given)):
            assert np.allclose(g, want.numpy(), atol=1e-6), (g, want)


def test_squeeze_and_split_of_a_symbolic_axis_run_at_other_sizes(tmp_path: Path) -> None:
    """torch squeezes an axis only when its size is 1, so a trace keeps a symbolic axis that ``squeeze(0)`` names;
    torchlib's translation squeezes it anyway, which fails at any other size. The export repairs it by its own shapes.
    (A one-part ``torch.split`` whose sizes torchlib baked, the other repair, is Mistral 3's merged rows: the test of
    its vision file at other image sizes in test_vlm.py fails without it.)"""
    import onnxruntime as ort

    class Rows(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.split((x * 2).squeeze(0), [x.shape[0]])[0] + 1

    result = onnx_nb.export(Rows(), {"x": torch.randn(3, 4)}, out=tmp_path / "r.onnx", exporter="dynamo",
                            dynamic={"x": {0: "rows"}}, progress=False)
    assert result, repr(result)  # its check ran the file at another row count
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    for rows in (5, 1):
        x = torch.randn(rows, 4)
        got = session.run(None, {"x": x.numpy()})[0]
        assert got.shape == (rows, 4) and np.allclose(got, (x * 2 + 1).numpy())


def test_float_arange_with_known_bounds_has_torchs_length(tmp_path: Path) -> None:
    """A float arange whose bounds the export knows (SigLIP-style position buckets, Idefics3's) has torch's
    elements: ONNX's Range counts in float32 and gave 26 for ``arange(1/27, 1.0, 1/27)``, torch 27; an arange over
    an input's length stays a Range."""
    import onnxruntime as ort

    class Buckets(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            boundaries = torch.arange(1 / 27, 1.0, 1 / 27)
            return torch.bucketize(x, boundaries, right=True), torch.arange(0, x.shape[0], 2) * 1.5

    sample = torch.linspace(0, 0.999, 40)
    result = onnx_nb.export(Buckets(), (sample,), out=tmp_path / "b.onnx", exporter="dynamo", progress=False)
    assert result, repr(result)
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    for values in (torch.linspace(0.5, 0.9999, 13), torch.rand(7)):
        got = session.run(None, {session.get_inputs()[0].name: values.numpy()})
        assert [g.tolist() for g in got] == [t.tolist() for t in Buckets()(values)]


def test_float_less_an_integer_mask_has_torchs_type(tmp_path: Path) -> None:
    """``1.0 - mask`` of an integer mask (ProphetNet's cross-attention bias) through the dynamo exporter: float, as
    torch gives it (the exporter's own decomposition left ``sub(1.0, x)``, which its type pass could not match:
    "Failed to decompose the FX graph"); an integer, a symbolic size or 2**31 - 1 less an integer mask stays an
    exact integer."""
    import onnxruntime as ort

    class Bias(torch.nn.Module):
        def forward(self, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (1.0 - mask[:, None, :].repeat(1, 2, 1)) * -1e4, 3 - mask, mask.shape[1] - mask, 2**31 - 1 - mask

    sample = torch.tensor([[1, 1, 0], [1, 0, 0]])
    result = onnx_nb.export(Bias(), (sample,), out=tmp_path / "m.onnx", exporter="dynamo",
                            dynamic={"mask": {0: "batch", 1: "length"}}, progress=False)
    assert result, repr(result)
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    mask = torch.tensor([[1, 0, 1, 1, 0]])
    got = session.run(None, {session.get_inputs()[0].name: mask.numpy()})
    want = Bias()(mask)
    assert got[0].dtype == np.float32 and np.array_equal(got[0], want[0].numpy())
    for g, w in zip(got[1:], want[1:]):  # a number, a symbolic size, a number past float32's integers
        assert g.dtype == np.int64 and np.array_equal(g, w.numpy())


class QueriesAmongTies(torch.nn.Module):
    """Keeps the 300 best-scored of 1,029 anchors and returns their boxes, where many anchors score the same (as
    RT-DETR's anchors outside the image do)."""

    def forward(self, scores: torch.Tensor, boxes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = torch.where(scores.abs() < 0.8, torch.zeros_like(scores), scores)  # ties: every small score is 0
        best = torch.topk(scores, 300, dim=1).indices
        order = torch.argsort(scores, dim=1, descending=True)[:, :300]
        return torch.gather(boxes, 1, best.unsqueeze(-1).expand(-1, -1, 4)), order


def test_selection_among_equal_scores_is_checked_as_onnx_orders_ties(tmp_path: Path) -> None:
    """``topk``/``argsort`` leave the order of equal values unspecified and PyTorch's CPU kernel picks other tied
    anchors than ONNX's TopK (the lower index first): the export's check compared whole boxes and failed a right
    file. Its reference now orders ties as ONNX does (machinery/ties.py), which changes nothing without ties; the
    file passes at the sample's size and another, and the eager model outside the check is untouched."""
    from onnx_nb.steps.export.machinery.ties import OnnxTies

    torch.manual_seed(0)
    scores, boxes = torch.randn(2, 1029), torch.rand(2, 1029, 4)
    model = QueriesAmongTies()
    with torch.no_grad():
        own = model(scores, boxes)
        with OnnxTies():
            onnx_order = model(scores, boxes)
    assert not torch.equal(own[0], onnx_order[0])  # PyTorch's own pick differs among the ties
    with OnnxTies():  # contiguous as topk's own (OmDet-Turbo views its indices: view(-1) refused a narrowed sort)
        assert torch.topk(scores, 300, dim=1).indices.view(-1).shape == (600,)
    distinct = torch.randn(2, 1029) * 10  # no small score: no ties, the same picks either way
    with torch.no_grad():
        plain = model(distinct, boxes)
        with OnnxTies():
            assert all(torch.equal(a, b) for a, b in zip(plain, model(distinct, boxes)))
    result = onnx_nb.export(model, {"scores": scores, "boxes": boxes}, out=tmp_path / "q.onnx",
                            dynamic={"scores": {0: "batch"}, "boxes": {0: "batch"}}, progress=False)
    assert result and result.check.passed, result.check_text()


class BatchByLen(torch.nn.Module):
    """Takes its batch size as ``len()`` of a tensor, as RT-DETR's and D-FINE's decoders do."""

    def __init__(self) -> None:
        super().__init__()
        self.queries = torch.nn.Parameter(torch.randn(4, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = len(x)
        return self.queries.unsqueeze(0).repeat(batch, 1, 1) @ x.flatten(1).unsqueeze(-1)


def test_len_of_a_tensor_keeps_the_batch_dynamic(tmp_path: Path) -> None:
    """``len(x)`` must return an int, so torch.export specialised the batch to the sample's and the dynamo file took
    no other; within the patch the module's ``len`` is the tensor's first size: the file runs at other batches, and
    the module's globals are as before after."""
    import onnxruntime as ort

    from onnx_nb.steps.export.patches.lengths import symbolic_lengths

    model = BatchByLen().eval()
    from onnx_nb.steps.export.patches.lengths import tensor_len

    with symbolic_lengths(model) as names:
        assert __name__ in names and globals()["len"] is tensor_len  # this module's len() is the patch's
        assert len(torch.zeros(5, 2)) == 5 and len([1, 2]) == 2  # the same answers in eager code
    assert "len" not in globals()
    result = onnx_nb.export(model, {"x": torch.randn(2, 2, 4)}, out=tmp_path / "b.onnx", exporter="dynamo",
                            progress=False)
    assert result, result.check_text()
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    x = torch.randn(5, 2, 4)
    with torch.no_grad():
        assert np.allclose(session.run(None, {"x": x.numpy()})[0], model(x).numpy(), atol=1e-5)


def test_attention_within_a_window_with_global_tokens_exports_at_every_length(tmp_path: Path) -> None:
    """Longformer's and LED's encoder attention (a band of the window around each token, global tokens seen by all
    and seeing all) computed over the whole sequence within the patch is the model's, with and without global
    tokens and with padding; the model's padding to the window is none. A Longformer exported from its folder with
    the patch (TorchScript's file fails its check at other lengths) passes its check at other lengths."""
    import transformers

    from onnx_nb.steps.export.patches.sliding import dense_band_attention, dense_bands

    torch.manual_seed(0)
    led = transformers.LEDForConditionalGeneration(transformers.LEDConfig(
        d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, attention_window=8, vocab_size=64)).eval()
    longformer = transformers.LongformerForMaskedLM(transformers.LongformerConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, attention_window=8,
        vocab_size=64, max_position_embeddings=64)).eval()
    ids = torch.randint(3, 64, (2, 21))
    mask = torch.ones(2, 21, dtype=torch.long)
    mask[1, 15:] = 0
    marked = torch.zeros(2, 21, dtype=torch.long)
    marked[0, 0] = marked[1, 3] = marked[1, 7] = 1
    for model, encoder in ((led, led.get_encoder()), (longformer, longformer.longformer)):
        for given in (None, marked):
            with torch.no_grad():
                own = encoder(input_ids=ids, attention_mask=mask, global_attention_mask=given).last_hidden_state
                with dense_bands(model) as names:
                    assert any(n.endswith("_pad_to_window_size") for n in names) and len(names) >= 2, names
                    attention = next(m for n, m in model.named_modules() if n == names[0])
                    assert attention.forward.__func__ is dense_band_attention
                    dense = encoder(input_ids=ids, attention_mask=mask, global_attention_mask=given)
                assert dense.last_hidden_state.shape == own.shape
                assert torch.allclose(dense.last_hidden_state[mask.bool()], own[mask.bool()], atol=1e-5)
            assert "forward" not in vars(attention)
    longformer.save_pretrained(tmp_path / "longformer")
    result = onnx_nb.export(tmp_path / "longformer", out=tmp_path / "l" / "model.onnx", progress=False)
    assert result and result.exporter == "dynamo", result.check_text()


def test_tiny_epsilon_is_kept(tmp_path: Path) -> None:
    """An RMS norm's ``+ 1e-8`` survives the exporter's clean-up (onnxscript's no-op rules matched ``x + 0`` within
    1e-8 and dropped it): a zero row gives 0 as in PyTorch, not NaN."""
    import numpy as np
    import onnxruntime as ort

    class Norm(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-8) * 2.0

    sample = torch.randn(3, 8)
    result = onnx_nb.export(Norm(), (sample,), out=tmp_path / "n.onnx", exporter="dynamo", progress=False)
    assert result, repr(result)
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    rows = torch.cat([torch.zeros(1, 8), torch.randn(2, 8)])
    got = session.run(None, {session.get_inputs()[0].name: rows.numpy()})[0]
    assert not np.isnan(got).any() and np.allclose(got, Norm()(rows).numpy(), atol=1e-5)


def test_complex_rotary_exports(tmp_path: Path) -> None:
    """Llama 4's rotary: ``torch.polar`` then a complex tensor unsqueezed and multiplied (torchlib has no complex
    ``aten::unsqueeze``: onnx-nb registers one), checked at a shape and positions the export never saw."""
    import numpy as np
    import onnxruntime as ort

    class Rotary(torch.nn.Module):
        def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            inv = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float) / 8))
            freqs = positions[..., None].float() * inv
            cis = torch.polar(torch.ones_like(freqs), freqs)
            pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
            return torch.view_as_real(pairs * cis[:, :, None, :]).flatten(3)

    sample = (torch.randn(2, 5, 3, 8), torch.arange(5).expand(2, 5).contiguous())
    result = onnx_nb.export(Rotary(), sample, out=tmp_path / "r.onnx", exporter="dynamo", progress=False)
    assert result, repr(result)
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    x, positions = torch.randn(1, 7, 3, 8), torch.arange(4, 11)[None]
    got = session.run(None, {i.name: v.numpy() for i, v in zip(session.get_inputs(), (x, positions))})[0]
    assert np.allclose(got, Rotary()(x, positions).numpy(), atol=1e-5)


def test_seq2seq_section_counts_and_escapes(tmp_path: Path) -> None:
    import json

    rows = [{"type": "t5", "class": "T5ForConditionalGeneration", "pytorch": "ok", "export": "ok", "generate": "same",
             "int8": "ok", "int4": "parity failed"},
            {"type": "x", "class": "XForConditionalGeneration", "pytorch": "ok", "export": "ExportError: <a> | b"},
            {"type": "y", "class": "YForConditionalGeneration", "pytorch": "cannot build: KeyError: 'z'"}]
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"meta": {"date": "2026-11-27", "transformers": "5.24.0", "torch": "2.13.0",
                                         "onnxruntime": "1.32.0"}, "rows": rows}))
    text = "\n".join(registry_sweep.seq2seq_section(path))
    assert "**1 of the 2 sequence-to-sequence LMs PyTorch can build and run (50.0%)" in text
    assert "| t5 | T5ForConditionalGeneration | ✓ | ✓ | ✓ | ✗ | INT4: parity failed |" in text
    assert "ExportError: &lt;a&gt; / b" in text and "<a>" not in text
    assert "| y | YForConditionalGeneration | – | – | – | – | PyTorch cannot build: KeyError: &#x27;z&#x27; |" in text
    assert registry_sweep.seq2seq_section(tmp_path / "none.json")[0].startswith("Not swept yet")


def test_seq2seq_registry_types_export(tmp_path: Path) -> None:
    """Two sequence-to-sequence types from the registry, as the sweep runs them: PLBart, whose config has no
    decoder_start_token_id (generate() then starts the decoder at its bos token), and NLLB-MoE, whose encoder
    answers with a tuple, whose model reads router_logits off the encoder output it is given, and whose experts
    loop over the experts the batch hit: TorchScript's files fix the sample's experts and fail their check, so the
    export goes on to dynamo, first under transformers' own patch set (it registers one for NLLB-MoE's router), then
    with onnx-nb's experts table's loop (patches/expert_tables.py) where that set fails (torch.export stops at the
    experts' data-dependent routing) or its files fail their check; the row says whose set served and why."""
    plbart = seq2seq_sweep.one("plbart", seq2seq_sweep.registry()["plbart"], tmp_path / "p" / "model", False)
    assert plbart["pytorch"] == "ok" and plbart["export"] == "ok" and plbart["generate"] == "same", plbart
    moe = seq2seq_sweep.one("nllb-moe", seq2seq_sweep.registry()["nllb-moe"], tmp_path / "n" / "model", False)
    assert moe["pytorch"] == "ok" and moe["export"] == "ok" and moe["exporter"] == "dynamo", moe
    assert moe["generate"] == "same", moe
    assert moe["patches"] == "transformers" or (moe["patches"] == "onnx-nb" and moe["transformers_patches"]), moe


def test_one_token_decoder_with_positions_from_its_cache_exports_with_dynamo(tmp_path: Path) -> None:
    """ProphetNet, as the sweep runs it: its decoder takes one token at a time once it has a cache (it asserts so),
    so the decoder's samples give one; its cached position is an ``int()`` of the cache's length, which TorchScript
    bakes (its files fail their check at another past length) and torch.export specialises, unless the position
    table computes it from sizes (patches/positions.py); its cross-attention bias is ``1.0 - mask`` of an integer
    mask, which the exporter's own decomposition cannot type (the ``aten::rsub.Scalar`` translation). Dynamo's files
    pass their check and generate PyTorch's tokens."""
    import transformers

    from onnx_nb.steps.export.patches.positions import cached_positions, traced_positions

    row = seq2seq_sweep.one("prophetnet", seq2seq_sweep.registry()["prophetnet"], tmp_path / "p" / "model", False)
    assert row["pytorch"] == "ok" and row["export"] == "ok" and row["exporter"] == "dynamo", row
    assert row["generate"] == "same", row
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "p" / "model").eval()
    table = model.prophetnet.decoder.position_embeddings
    with traced_positions(model) as names:
        assert "prophetnet.decoder.position_embeddings" in names, names
        assert table.forward.__func__ is cached_positions
    assert "forward" not in vars(table)


def test_experts_tables_loop_over_every_expert_as_the_model_does() -> None:
    """A table of expert modules whose routing is a one-hot mask per slot (Switch Transformers, top-1 with a
    capacity that drops tokens) computes, within the patch, what its own loop computes, and its router's cast of
    its classifier to the dtype it has is the classifier itself; both given back after."""
    import transformers

    from onnx_nb.steps.export.patches.expert_tables import looped_forward, traceable_tables

    config = transformers.SwitchTransformersConfig(d_model=32, d_ff=48, num_layers=2, num_decoder_layers=2,
                                                   num_heads=4, d_kv=8, num_experts=4, expert_capacity=3,
                                                   vocab_size=64, num_sparse_encoder_layers=2,
                                                   num_sparse_decoder_layers=2)  # every layer sparse
    torch.manual_seed(0)
    model = transformers.SwitchTransformersForConditionalGeneration(config).eval()
    mlp = model.encoder.block[1].layer[1].mlp
    states = torch.randn(2, 7, 32)
    with torch.no_grad():
        own = mlp(states)
        routed = mlp.router(states)[0].sum(dim=(0, 1))
        assert int((routed > 0).sum()) >= 2 and int(routed.sum()) < 14, routed  # several experts, some tokens dropped
        classifier = mlp.router.classifier
        with traceable_tables(model) as names:
            assert names == [n for n, m in model.named_modules() if isinstance(m, torch.nn.ModuleDict)
                             and n.endswith("mlp.experts")] and len(names) >= 2, names
            assert mlp.router.classifier.to(torch.float32) is classifier
            assert mlp.experts.forward.__func__ is looped_forward  # the patch runs, not the model's own loop
            assert torch.allclose(mlp(states), own, atol=1e-6)
        assert "forward" not in vars(mlp.experts) and "to" not in vars(classifier)


def test_tiny_config_keeps_each_layer_kind_and_its_own_sizes() -> None:
    """The sweep's shrink keeps what makes a type itself at 2 layers, so the type is counted rather than dropped as
    "PyTorch cannot build": every per-layer list follows the layers kept (Kimi Linear's linear and full attention
    and its dense and sparse MLPs), a layer's own wider heads keep their ratio (Gemma 4's full-attention layers), a
    pattern by period reaches inside the depth (Jamba's attention), a model class built from the text config gets
    it (Llama 4), a state-space layer's heads stay tied to its expanded width (Mamba 2), a hybrid gets an
    attention layer (Bamba, Granite 4), and counts and kinds its default config leaves unset are given."""
    import transformers

    kimi = registry_sweep.tiny_config("kimi_linear")
    assert kimi.layer_types == ["linear_attention", "full_attention"]
    assert kimi.mlp_layer_types == ["dense", "sparse"]
    gemma = registry_sweep.tiny_config("gemma4_text")
    assert gemma.layer_types == ["sliding_attention", "full_attention"]
    assert gemma.to_dict()["per_layer_config"] == {"1": {"head_dim": 2 * registry_sweep.TINY["head_dim"]}}
    jamba = registry_sweep.tiny_config("jamba")
    assert jamba.layers_block_type[-1] == "attention", jamba.layers_block_type
    llama4 = registry_sweep.causal_config("llama4", "Llama4ForCausalLM", registry_sweep.TINY)
    assert isinstance(llama4, transformers.Llama4TextConfig)
    for model_type in ("gemma4_text", "kimi_linear", "llama4", "mamba2", "jamba"):
        class_name = registry_sweep.registry()[model_type]
        config = registry_sweep.causal_config(model_type, class_name, registry_sweep.TINY)
        with torch.device("meta"):
            count = sum(p.numel() for p in getattr(transformers, class_name)(config).parameters())
        assert count < 60_000_000, (model_type, count)
    mamba2 = registry_sweep.tiny_config("mamba2")
    assert mamba2.num_heads * mamba2.head_dim == mamba2.expand * mamba2.hidden_size
    # a hybrid whose default config has no attention layer (transformers' own generate then fails on a cache of
    # state layers only) gets its last layer attending, as its checkpoints have; a pure state-space model does not
    assert registry_sweep.tiny_config("bamba").layers_block_type == ["linear_attention", "full_attention"]
    assert registry_sweep.tiny_config("granitemoehybrid").layer_types == ["linear_attention", "full_attention"]
    assert set(mamba2.layer_types) == {"linear_attention"}
    # expert counts a default config leaves unset (DeepSeek-V2's per token, dots.llm1's all): the tiny size's
    assert registry_sweep.tiny_config("deepseek_v2").num_experts_per_tok == registry_sweep.TINY["num_experts_per_tok"]
    dots = registry_sweep.tiny_config("dots1")
    assert (dots.n_routed_experts, dots.num_experts_per_tok, dots.n_shared_experts) == (4, 2, 1)
    assert registry_sweep.tiny_config("lfm2_moe").layer_types == ["conv", "full_attention"]  # unset by its default
    # Zamba 2: its attention takes the hidden state and the embeddings side by side (twice the width, its heads
    # following), its shared blocks at the hybrid layers kept; X-MOD generates in its first language
    zamba2 = registry_sweep.tiny_config("zamba2")
    assert zamba2.attention_hidden_size == 2 * zamba2.hidden_size == zamba2.attention_head_dim * 4
    assert zamba2.hybrid_layer_ids == [i for i, k in enumerate(zamba2.layers_block_type) if k == "hybrid"] == [1]
    # what a type's validator asks: Dory's input, looped and output stacks summing to the depth (one each), ZAYA's
    # one expert per token
    dory = registry_sweep.tiny_config("dory")
    assert (dory.n_input_layers, dory.n_recurrent_layers, dory.n_output_layers, dory.num_hidden_layers) == (1, 1, 1, 3)
    assert len(dory.layer_types) == 3
    assert registry_sweep.tiny_config("zaya").num_experts_per_tok == 1
    xmod = registry_sweep.tiny_config("xmod")
    assert xmod.default_language == next(iter(xmod.languages))




def test_a_shifted_window_layer_crops_its_padding_at_any_image_size(tmp_path: Path) -> None:
    """A Swin layer crops the padding it added to fill its windows behind a Python branch on the padding: a sample
    whose feature map fills its windows exactly (56 x 56 here: a 14 x 14 map, windows of 7) traced no crop, and the
    file failed at any size that needs padding (Grounding DINO's Swin at 320 x 320: "cannot reshape 84 x 84 into
    6,400"). The crop is traced always now (patches/window_crops.py): the file gives PyTorch's feature maps at 64 x
    64 and 72 x 72."""
    import onnxruntime as ort
    import transformers

    config = transformers.SwinConfig(image_size=56, embed_dim=24, depths=[1, 1], num_heads=[2, 2], window_size=7,
                                     out_features=["stage1", "stage2"])
    torch.manual_seed(0)
    model = transformers.SwinBackbone(config).eval()
    result = onnx_nb.export(model, {"pixel_values": torch.randn(2, 3, 56, 56)}, out=tmp_path / "swin.onnx",
                            dynamic={"pixel_values": {0: "batch", 2: "height", 3: "width"}}, exporter="dynamo",
                            progress=False)
    assert result, repr(result)
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    for side in (64, 72):
        pixels = torch.randn(1, 3, side, side)
        with torch.no_grad():
            want = model(pixels).feature_maps
        for got, expected in zip(session.run(None, {"pixel_values": pixels.numpy()}), want):
            assert np.allclose(got, expected.numpy(), atol=1e-4), side
