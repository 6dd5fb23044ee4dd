"""Which of the causal LMs transformers registers onnx-nb serves, measured on the registry itself: every model type
in ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` built tiny from its own default config (2 layers, width 64, random
weights), saved as a folder, then: can PyTorch build it and greedy-generate? does one default
``onnx_nb.export(folder)`` succeed, and does ``onnx_nb.generate`` give PyTorch's tokens (a difference judged a
near-tie or a divergence by ``generation_parity``, or for a file without its cache by PyTorch's margin at
the first difference)? do INT8 (``quantize()``) and INT4 (``method="int4"``) pass
their parity? Each model runs in a process of its own with a time limit, so one crash or hang costs one row.

    .venv/bin/python benchmarks/registry_sweep.py [--only llama,gpt2] [--timeout 300] [--no-variants]
        [--json benchmarks/results/causal_lm_sweep.json] [--page docs/supported-architectures.md]

The whole registry takes about an hour on 2 cores; ``--only`` runs some types. Rows already in ``--json`` for
the same transformers version are kept unless ``--again`` (with ``--only``, the named types run again and the others
stay). The page is written from the JSON: the coverage line
(of the types PyTorch can build and generate at tiny size, how many export and give its tokens) and one row per
type with the reason for every gap.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
PROMPT = [[5, 9, 14, 3, 22, 17], [8, 30, 11]]
NEW_TOKENS = 8
# the size every type is shrunk to, by whichever of these names its config has (attribute_map included)
TINY = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "ffn_dim": 128, "d_ff": 128, "n_inner": 128,
        "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "n_shared_experts": 1,
        "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
        "num_layers": 2, "n_layer": 2, "encoder_layers": 2, "decoder_layers": 2, "state_size": 8,
        "expand": 2, "conv_kernel": 4, "time_step_rank": 8, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16, "ssm_state_size": 8, "mamba_n_heads": 4,
        "mamba_d_head": 32, "d_head": 16, "rotary_dim": 8, "index_head_dim": 16, "index_n_heads": 2,
        "first_k_dense_replace": 1, "decoder_sparse_step": 1, "lru_width": 64,
        "hidden_size_per_layer_input": 16, "num_kv_shared_layers": 0, "attention_hidden_size": 64,
        "embedding_dim": 64, "mamba_headdim": 16, "input_embedding_size": 64, "output_embedding_size": 64,
        "ffn_hidden_size": 128,  # Falcon's (derived at the default width: 18,176 beside a tiny width, GPTQ's
        # Hessian of it 2.6 GB)
        "d_latents": 64, "num_latents": 32, "num_self_attends_per_block": 2}  # the last three: Perceiver's latents


# the second size every served type is tried at: other widths, head counts and depth (one size hides a shrink the
# export handles only at it: a cache of linear-attention layers alone, latent sizes, strides)
SECOND = {**TINY, "num_hidden_layers": 3, "num_layers": 3, "n_layer": 3, "hidden_size": 96, "intermediate_size": 160,
          "num_attention_heads": 6, "num_key_value_heads": 3, "ffn_dim": 160, "d_ff": 160, "n_inner": 160,
          "ffn_hidden_size": 160,
          "moe_intermediate_size": 48, "shared_expert_intermediate_size": 48, "kv_lora_rank": 24, "q_lora_rank": 48,
          "qk_rope_head_dim": 16, "qk_nope_head_dim": 8, "v_head_dim": 24, "lru_width": 96,
          "attention_hidden_size": 96, "embedding_dim": 96, "input_embedding_size": 96, "output_embedding_size": 96,
          "linear_num_key_heads": 3, "linear_num_value_heads": 6, "mamba_n_heads": 6}


def registry() -> dict[str, str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return dict(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


# the second try, for a config whose widths are tied in ways one shrink cannot know: depth and experts only
DEPTH = {k: v for k, v in TINY.items() if k in ("num_hidden_layers", "num_layers", "n_layer", "encoder_layers",
                                                "decoder_layers", "num_self_attends_per_block", "num_experts",
                                                "num_local_experts", "n_routed_experts", "num_experts_per_tok",
                                                "first_k_dense_replace", "decoder_sparse_step")}
# the layer kinds of a type whose default config leaves them unset though its model reads them per layer (LFM2-MoE:
# every checkpoint names its convolution and attention layers), one of each at the tiny depth
DEFAULT_KINDS = {"lfm2_moe": ["conv", "full_attention", "conv"]}
# what a type's own config validator demands whatever the size, where the shrink's sizes would break it (ZAYA routes
# each token to one expert)
DEMANDED = {"zaya": {"num_experts_per_tok": 1}}
UNFINISHED = "unfinished"  # a variant's cell while it is being made (see quantized)
MAX_PARAMETERS = 300_000_000  # a depth-only config larger than this is not built (it would not be tiny)


def tiny_config(model_type: str, sizes: dict[str, int] = TINY) -> Any:
    import transformers

    config = transformers.AutoConfig.for_model(model_type)
    text = text_of(config)
    for target in {id(config): config, id(text): text}.values():
        before = getattr(target, "num_hidden_layers", None)
        overrides = per_layer_overrides(target)  # set aside: the shrink reads and sets the global values
        defaults = {a: getattr(target, a) for o in overrides.values() for a in o}
        # multi-head attention stays multi-head (latent attention's kv_b_proj makes a key per query head): only a
        # config with fewer key/value heads than query heads gets fewer at the tiny size too
        heads, kv_heads = getattr(target, "num_attention_heads", None), getattr(target, "num_key_value_heads", None)
        mha = isinstance(heads, int) and isinstance(kv_heads, int) and kv_heads >= heads
        own = dict(sizes)
        if mha and "num_key_value_heads" in own:
            own["num_key_value_heads"] = sizes.get("num_attention_heads", heads)
        widths = [getattr(target, n, None) for n in ("hidden_size", "attention_hidden_size", "num_attention_heads",
                                                     "attention_head_dim")]
        set_ints(target, own)
        wider_attention(target, *widths)
        layers = getattr(target, "num_hidden_layers", None)
        tied_sizes(target, layers)
        kept = kept_layers(target, before, layers)
        if kept is not None:
            assert isinstance(before, int)
            for name in list(vars(target)):
                value = getattr(target, name)
                if (isinstance(value, list) or (isinstance(value, str) and name in KINDS)) and len(value) == before:
                    picked = [value[i] for i in kept]
                    if name in sizes and all(isinstance(v, int) for v in picked):  # Gemma 3n's widths by layer
                        picked = [sizes[name]] * len(picked)
                    setattr(target, name, "".join(picked) if isinstance(value, str) else picked)
        for name in KINDS:  # a repeating pattern shorter than the depth (RecurrentGemma's): one of each kind first
            kinds = getattr(target, name, None)
            if isinstance(kinds, list) and layers and len(kinds) != layers:
                distinct = list(dict.fromkeys(kinds))
                setattr(target, name, (distinct + kinds)[:layers] if len(distinct) < layers else distinct[:layers])
        attending_layer(target, layers)
        if isinstance(getattr(target, "hybrid_layer_ids", None), list) and isinstance(
                kinds := getattr(target, "layers_block_type", None), list):  # Zamba 2's, derived from the kinds
            target.hybrid_layer_ids = [i for i, kind in enumerate(kinds) if kind == "hybrid"]
        for name in ("n_group", "topk_group"):  # expert groups: one group of the few experts left
            if hasattr(target, name):
                setattr(target, name, 1)
        if isinstance(getattr(target, "moe_intermediate_size", None), int):  # a mixture of experts whose default
            # config leaves its expert counts unset (DeepSeek-V2's experts per token, dots.llm1's every count): its
            # router or its experts' weights fail on None; every checkpoint sets them
            for name in ("n_routed_experts", "num_experts_per_tok", "n_shared_experts"):
                if name in vars(target) and getattr(target, name) is None and name in sizes:
                    setattr(target, name, sizes[name])
        stack = ("n_input_layers", "n_recurrent_layers", "n_output_layers")  # Dory's input, looped and output
        if all(isinstance(getattr(target, n, None), int) for n in stack) and isinstance(layers, int):  # layers:
            for name in stack:  # one of each, the depth their sum (its validator asks for it)
                setattr(target, name, 1)
            target.num_hidden_layers = layers = len(stack)
            kinds = getattr(target, "layer_types", None)
            if isinstance(kinds, list) and kinds:
                target.layer_types = (kinds * layers)[:layers]
        for name, value in DEMANDED.get(model_type, {}).items():
            if hasattr(target, name):
                setattr(target, name, value)
        if getattr(target, "layer_types", 0) is None and model_type in DEFAULT_KINDS:
            target.layer_types = DEFAULT_KINDS[model_type][:layers] if isinstance(layers, int) else None
        rope = getattr(target, "qk_rope_head_dim", None)  # latent attention (DeepSeek): head sizes tied to rope's
        if sizes is TINY and isinstance(rope, int):
            for name, value in (("head_dim", rope), ("qk_head_dim", rope + getattr(target, "qk_nope_head_dim", 0))):
                if isinstance(getattr(target, name, None), int):
                    setattr(target, name, value)
        if overrides:  # each kept layer's own sizes, in the same ratio to the shrunk global size as before
            target.per_layer_config = {
                str(new): {a: max(1, round(getattr(target, a) * v / defaults[a])) if isinstance(v, int)
                           and not isinstance(v, bool) and defaults[a] else v for a, v in overrides[old].items()}
                for new, old in enumerate(kept or range(layers or 0)) if old in overrides}
    if getattr(config, "default_language", "") is None and getattr(config, "languages", None):
        # X-MOD's language adapters: without ids per row, its forward reads the default language, which a user
        # sets (set_default_language) before generating
        config.default_language = next(iter(config.languages))
    return config


def wider_attention(target: Any, hidden: Any, attention: Any, heads: Any, head_dim: Any) -> None:
    """An attention block wider than the model (Zamba's and Zamba 2's take the hidden state and the embeddings side
    by side: twice the width) keeps that ratio at the shrunk width, and its head size follows (the shrink had set
    it to the width itself, as RWKV's is)."""
    if not all(isinstance(v, int) and v > 0 for v in (hidden, attention)) or attention % hidden or attention == hidden:
        return
    target.attention_hidden_size = target.hidden_size * (attention // hidden)
    if isinstance(heads, int) and isinstance(head_dim, int) and head_dim * heads == attention:
        target.attention_head_dim = target.attention_hidden_size // target.num_attention_heads


def attending_layer(target: Any, layers: Any) -> None:
    """A hybrid whose default config holds state-space layers only though its model has attention layers to place
    (Bamba's ``attn_layer_indices`` and Granite 4's ``layer_types`` default to none; every checkpoint of theirs
    attends in some layers, and transformers' own generate fails on a cache without an attention layer): its last
    layer attends. Pure state-space models (Mamba's) have no attention layer to place and are left alone."""
    import importlib

    kinds = getattr(target, "layer_types", None)
    if not (isinstance(kinds, list) and isinstance(layers, int) and layers > 1 and len(kinds) == layers
            and set(kinds) == {"linear_attention"}):
        return
    try:
        source = importlib.import_module(type(target).__module__.replace(".configuration_", ".modeling_"))
    except ImportError:
        return
    import inspect

    if "full_attention" not in inspect.getsource(source):
        return
    if "attn_layer_indices" in vars(target):  # Bamba's: its layer kinds are read from the indices
        target.attn_layer_indices = [layers - 1]
    else:
        target.layer_types = [*kinds[:-1], "full_attention"]


def tied_sizes(target: Any, layers: Any) -> None:
    """Sizes a default config leaves to be derived (``head_dim``, ``num_key_value_heads`` None) set as the model
    would derive them, a state-space layer's heads times head size kept at its expanded width (Mamba 2's, Falcon-H1's),
    and a layer pattern by period and offset (Jamba's attention every 8th layer from the 4th) brought inside the
    shrunk depth."""
    hidden, heads = getattr(target, "hidden_size", None), getattr(target, "num_attention_heads", None)
    if isinstance(hidden, int) and isinstance(heads, int):
        for name, value in (("head_dim", hidden // heads), ("num_key_value_heads", heads)):
            if name in vars(target) and getattr(target, name) is None:
                setattr(target, name, value)
    expand = getattr(target, "mamba_expand", getattr(target, "expand", None))
    for count, size in (("num_heads", "head_dim"), ("mamba_n_heads", "mamba_d_head")):
        if all(isinstance(v, int) for v in (hidden, expand, getattr(target, count, None), getattr(target, size, None))):
            setattr(target, count, max(1, expand * hidden // getattr(target, size)))
            if isinstance(getattr(target, "mamba_d_ssm", None), int):
                target.mamba_d_ssm = getattr(target, count) * getattr(target, size)
    if isinstance(layers, int):
        for name, value in list(vars(target).items()):
            if name.endswith("_layer_period") and isinstance(value, int) and value > layers:
                setattr(target, name, layers)
            if name.endswith("_layer_offset") and isinstance(value, int) and value >= layers:
                setattr(target, name, layers - 1)


KINDS = ("layer_types", "layers_block_type", "hybrid_override_pattern", "block_types")


def kept_layers(target: Any, before: Any, layers: Any) -> list[int] | None:
    """Which of a config's ``before`` layers the ``layers`` left stand for: the first layer of each kind its
    per-layer lists name (a hybrid's attention and its state layers, a sliding window's full layer), then the first
    layers, in their order; None when the depth did not change."""
    if not (isinstance(before, int) and isinstance(layers, int)) or layers >= before:
        return None
    lists = [getattr(target, n) for n in KINDS if isinstance(getattr(target, n, None), (list, str))]
    lists += [v for v in vars(target).values() if isinstance(v, list)]
    kinds = next((v for v in lists if len(v) == before and all(isinstance(k, (str, int, float)) for k in v)), None)
    firsts = [kinds.index(k) for k in dict.fromkeys(kinds)] if kinds else []
    return sorted((firsts + [i for i in range(before) if i not in firsts])[:layers])


def per_layer_overrides(target: Any) -> dict[int, dict[str, Any]]:
    """A heterogeneous config's per-layer sizes (Gemma 4's wider full-attention heads: ``per_layer_config``), by
    layer; the config is left without them, so its global sizes read plainly."""
    if not isinstance(getattr(target, "num_hidden_layers", None), int):
        return {}  # (a composite config has no depth of its own: its text config has them)
    overrides = {int(k): dict(v) for k, v in (target.to_dict().get("per_layer_config") or {}).items()}
    if not overrides:
        return {}
    target.per_layer_config = {}
    return overrides


def causal_config(model_type: str, class_name: str, sizes: dict[str, int]) -> Any:
    """:func:`tiny_config`, its other sub-configs (an audio or vision tower beside the text) shrunk by ``sizes``
    too, and the text config alone where ``class_name`` is built from that (Llama 4's and Qwen 3.5's
    ``*ForCausalLM`` under a multimodal model type)."""
    import transformers
    import vlm_sweep  # (it imports this module: imported here, not above)

    vision = model_type in vlm_sweep.registry() and getattr(
        transformers.AutoConfig.for_model(model_type), "vision_config", None) is not None
    # a vision-language model registered as a causal LM (Gemma 3, GOT-OCR2): its vision tower shrunk as the
    # vision-language sweep shrinks it (Gemma 3's pooled tokens kept within its patches)
    config = vlm_sweep.tiny_config(model_type, sizes, vlm_sweep.VISION if sizes is TINY else vlm_sweep.VISION_DEPTH) \
        if vision else tiny_config(model_type, sizes)
    text = text_of(config)
    subs = [sub for sub in vars(config).values() if isinstance(sub, transformers.PretrainedConfig)]
    for sub in subs:
        if sub is not text and not (vision and sub is config.vision_config):
            set_ints(sub, sizes)
    wanted = getattr(getattr(transformers, class_name), "config_class", None)
    if isinstance(wanted, type) and not isinstance(config, wanted):  # (MusicGen's decoder among its three)
        return next((sub for sub in [text, *subs] if isinstance(sub, wanted)), config)
    return config


def text_of(config: Any) -> Any:
    """A config's text config (itself when it is one, or when it has several: MusicGen's encoder and decoder)."""
    try:
        return config.get_text_config() if hasattr(config, "get_text_config") else config
    except ValueError:
        return config


def pooled_image_tokens(config: Any, vision: Any) -> None:
    """Gemma 3 (and ShieldGemma 2 on it) pools its tower's patches to ``mm_tokens_per_image`` tokens (a square): at a
    shrunk image size fewer patches than that would pool with a zero-wide window, so the count becomes a square
    the patches divide into."""
    side = getattr(vision, "image_size", None)
    if isinstance(getattr(config, "mm_tokens_per_image", None), int) and isinstance(side, int):
        patches = side // int(vision.patch_size)
        if patches * patches < config.mm_tokens_per_image:
            config.mm_tokens_per_image = (patches // 2) ** 2 if patches % 2 == 0 else patches * patches


def set_ints(target: Any, sizes: dict[str, int]) -> None:
    """Each of ``sizes`` that ``target`` (a config or a sub-config) has as an int (not a bool) set to its value."""
    for name, value in sizes.items():
        if isinstance(getattr(target, name, None), int) and not isinstance(getattr(target, name), bool):
            try:
                setattr(target, name, value)
            except Exception:  # noqa: BLE001 - a read-only alias: the real name is set too
                pass


def chain_generated(row: dict[str, Any], result: Any, cases: list[Any], run: Any, started: float) -> dict[str, Any]:
    """Each case (its inputs, then PyTorch's tokens last) through ``run(*inputs)`` (``onnx_nb.generate``'s tokens),
    judged into ``row`` against PyTorch's; the row, its time set."""
    from onnx_nb.errors import first_line

    try:
        judged(row, result, [run(*case[:-1]) for case in cases], [case[-1] for case in cases])
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        row["generate"] = f"{type(exc).__name__}: {first_line(exc)}"[:300]
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def chain_main(script: str, doc: str, path: Path, types: Any, one: Any, what: str) -> None:
    """A chain kind's sweep (vision-language models, speech LLMs) from the command line: ``--one TYPE`` runs
    ``one(type, class, folder)`` and prints its row, else every type of ``types()`` in a process of its own into
    ``path``, then how many are served of those PyTorch builds and generates ``what`` (from an image, a clip)."""
    parser = parser_for(doc, 240, variants=False)
    parser.add_argument("--json", default=str(path))
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(one(args.one, types()[args.one], Path(args.folder))))
        return
    rows = run_rows(script, types(), Path(args.json), args.only, args.again, args.timeout, [])
    base = [r for r in rows if counted(r)]
    print(f"served: {sum(served(r) for r in base)} of {len(base)} that PyTorch builds and generates {what} "
          f"({len(rows)} swept)")


def parser_for(doc: str, timeout: int, variants: bool = True) -> argparse.ArgumentParser:
    """The options every sweep takes (``--only``, ``--timeout``, ``--again``, ``--no-variants`` where it has
    variants) and the hidden ones its child process is run with (``--one TYPE --folder F``)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--timeout", type=int, default=timeout)
    parser.add_argument("--again", action="store_true")
    if variants:
        parser.add_argument("--no-variants", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    return parser


def refused(row: dict[str, Any], what: str, size: str, exc: BaseException) -> None:
    """PyTorch could not ``what`` (build, generate, save) the model at ``size``: said in ``row["pytorch"]``, after
    what an earlier size said."""
    from onnx_nb.errors import first_line

    said = f"cannot {what} ({size}): {type(exc).__name__}: {first_line(exc)}"[:300]
    row["pytorch"] = f"{row['pytorch']}; {said}" if "pytorch" in row else said


def spread_zero_routers(model: Any, config: Any) -> list[str]:
    """A router whose weights start at zero (AFMoE's init) scores every expert the same, so which experts a token
    takes is ``torch.topk``'s order among ties, which torch leaves unspecified (ONNX's TopK takes the lowest index,
    torch's CPU kernel here the highest): no exporter can match that, and no trained checkpoint has it. Such a
    router (a linear layer with one output per expert, all zero) gets N(0, 0.02) weights, seeded; the names are
    kept in the row and told on the page."""
    import torch

    text = text_of(config)
    experts = {getattr(text, n, None) for n in ("num_experts", "num_local_experts", "n_routed_experts")} - {None}
    spread = []
    generator = torch.Generator().manual_seed(0)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module.out_features in experts and not module.weight.any():
            with torch.no_grad():
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * 0.02)
            spread.append(name)
    return spread


def built(model_type: str, class_name: str, folder: Path, row: dict[str, Any]) -> tuple[Any, list[list[int]],
                                                                                   list[list[int]]] | None:
    """The type at the first size PyTorch builds and runs (tiny, else its depth alone), saved in ``folder``, with the
    prompts inside its vocabulary and PyTorch's greedy tokens for each; None (the reason in ``row``) when it cannot."""
    import torch
    import transformers

    for size, sizes in (("tiny", TINY), ("depth only", DEPTH)):  # the first that PyTorch builds and runs
        try:
            config = causal_config(model_type, class_name, sizes)
            with torch.device("meta"):
                count = sum(p.numel() for p in getattr(transformers, class_name)(config).parameters())
            if count > MAX_PARAMETERS:
                raise ValueError(f"{count / 1e6:.0f}M parameters at the {size} size")
            torch.manual_seed(0)
            model = getattr(transformers, class_name)(config).eval()
            spread = spread_zero_routers(model, config)
            if spread:
                row["routers_spread"] = spread
        except Exception as exc:  # noqa: BLE001 - a row, not a crash
            refused(row, "build", size, exc)
            continue
        vocab = int(getattr(text_of(config), "vocab_size", 100) or 100)
        prompts = [[t % vocab for t in p] for p in PROMPT]
        try:
            torch_tokens = []
            with torch.no_grad():
                for p in prompts:
                    out = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                         max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1)
                    torch_tokens.append(out[0, len(p):].tolist())
        except Exception as exc:  # noqa: BLE001
            refused(row, "generate", size, exc)
            continue
        try:
            model.save_pretrained(folder)  # (transformers validates the config again here)
        except Exception as exc:  # noqa: BLE001
            refused(row, "save", size, exc)
            continue
        row.update(pytorch="ok", size=size, parameters=sum(p.numel() for p in model.parameters()))
        print("PYTORCH_OK", flush=True)
        return model, prompts, torch_tokens
    return None


def one(model_type: str, class_name: str, folder: Path, variants: bool, second: bool = True) -> dict[str, Any]:
    """Everything about one type (in a child process): the export at the first size PyTorch builds and runs, its
    tokens for each prompt alone and for the prompts as one batch, then (``second``) the type at :data:`SECOND`."""

    import onnx_nb
    from onnx_nb.errors import first_line

    row: dict[str, Any] = {"type": model_type, "class": class_name}
    started = time.perf_counter()
    made = built(model_type, class_name, folder, row)
    if made is None:
        return row
    model, prompts, torch_tokens = made
    result = exported(row, folder, folder.parent / "onnx" / "model.onnx", started)
    if result is None:
        return row
    try:
        made = [onnx_nb.generate(result, [p], max_new_tokens=NEW_TOKENS, num_beams=1).tokens[0] for p in prompts]
        same = all(m == t[:len(m)] and (len(m) == len(t)) for m, t in zip(made, torch_tokens))
        row["generate"] = "same" if same else "differs"
        if not same:
            report = onnx_nb.check_parity(result, progress=False)  # a decoder with its cache: generation parity
            ties = [c for c in report.generation if c.verdict == "near-tie"]
            row["generate"] = "near-tie" if report and ties else "differs"
            row["generate_note"] = next((r.note for r in report.rows if r.status != "pass"), "")[:300]
            if report and not report.generation:  # no cache, no generation parity: each first difference judged
                row["generate"], row["generate_note"] = uncached_ties(model, prompts, made, torch_tokens)
    except Exception as exc:  # noqa: BLE001
        row["generate"] = f"{type(exc).__name__}: {first_line(exc)}"[:300]
    if row.get("generate") in ("same", "near-tie"):
        try:  # the prompts as one list: each must get the tokens it got alone
            batch = onnx_nb.generate(result, prompts, max_new_tokens=NEW_TOKENS, num_beams=1)
            row["batch"] = "same" if batch.tokens == made else "differs"
            row["batching"] = batch.batching
        except Exception as exc:  # noqa: BLE001
            row["batch"] = f"{type(exc).__name__}: {first_line(exc)}"[:300]
    if variants and row.get("generate") in ("same", "near-tie"):
        quantized(row, result, folder.parent / "onnx")
    if second and row.get("generate") in ("same", "near-tie") and row.get("size") == "tiny":
        row["second_size"] = at_second_size(model_type, class_name, folder.parent / "second")
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def at_second_size(model_type: str, class_name: str, folder: Path) -> str:
    """The type again at :data:`SECOND`: ``same`` or ``near-tie`` (judged as the first size is), ``differs``, or where
    it failed; ``pytorch fails`` when PyTorch does not build or generate with it there (not held against it)."""
    import torch
    import transformers

    import onnx_nb
    from onnx_nb.errors import first_line

    try:
        config = causal_config(model_type, class_name, SECOND)
        torch.manual_seed(1)
        model = getattr(transformers, class_name)(config).eval()
        spread_zero_routers(model, config)
        vocab = int(getattr(text_of(config), "vocab_size", 100) or 100)
        prompts = [[t % vocab for t in p] for p in PROMPT]
        with torch.no_grad():
            want = [model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                   max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1)[0, len(p):].tolist()
                    for p in prompts]
        model.save_pretrained(folder / "model")
    except Exception:  # noqa: BLE001 - PyTorch's own limit at this size
        return "pytorch fails"
    other: dict[str, Any] = {}
    result = exported(other, folder / "model", folder / "onnx" / "model.onnx", time.perf_counter())
    if result is None or other.get("export") != "ok":
        return f"export: {other.get('export')}"[:300]
    try:
        made = [onnx_nb.generate(result, [p], max_new_tokens=NEW_TOKENS, num_beams=1).tokens[0] for p in prompts]
        judged(other, result, made, want)
    except Exception as exc:  # noqa: BLE001
        return f"generate: {type(exc).__name__}: {first_line(exc)}"[:300]
    return str(other["generate"]) if other["generate"] in ("same", "near-tie") else \
        f"differs: {other.get('generate_note', '')}"[:300]


def judged(row: dict[str, Any], result: Any, made: list[list[int]], want: list[list[int]]) -> None:
    """``row["generate"]``: same, or (judged by the export's own generation parity) near-tie or differs, with both
    token lists and the parity's first note."""
    import onnx_nb

    same = all(m == w[:len(m)] and len(m) == len(w) for m, w in zip(made, want))
    row["generate"] = "same" if same else "differs"
    if not same:
        row["tokens"] = {"onnx-nb": made, "pytorch": want}
        report = onnx_nb.check_parity(result, progress=False)
        ties = [c for c in report.generation if c.verdict == "near-tie"]
        row["generate"] = "near-tie" if report and ties else "differs"
        row["generate_note"] = next((r.note for r in report.rows if r.status != "pass"), "")[:300]


def swept(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any], int, int] | None:
    """A sweep's saved rows, their meta, how many PyTorch ran and how many onnx-nb served; None before its first
    run."""
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    rows = saved["rows"]
    base = [r for r in rows if counted(r)]
    return rows, saved["meta"], len(base), sum(served(r) for r in base)


def quantized(row: dict[str, Any], result: Any, folder: Path) -> None:
    """INT8 (``quantize()``) and INT4 (``method="int4"``) of ``result`` into ``row``: ok, parity failed, or the
    error."""
    import onnx_nb
    from onnx_nb.errors import first_line
    from onnx_nb.steps.export.adapters.registry import subject_of

    subject = subject_of(result)  # of a vision-language model, its decoder part (judged on the whole chain)
    for name, kwargs in (("int8", {}), ("int4", {"method": "int4"})):
        # the row so far, this variant unfinished: where the sweep's time runs out inside it (GPTQ's calibration of
        # a convolutional tower, CvT's), the row keeps what was judged before (run_rows reads the last ROW line)
        row[name] = UNFINISHED
        print("ROW " + json.dumps(row), flush=True)
        try:
            variant = onnx_nb.quantize(subject, out=folder / f"model.{name}.onnx", **kwargs)
            row[name] = "ok" if variant else "parity failed"
        except Exception as exc:  # noqa: BLE001
            row[name] = f"{type(exc).__name__}: {first_line(exc)}"[:300]


def exported(row: dict[str, Any], folder: Any, out: Path, started: float, sample: Any = None) -> Any:
    """One default ``onnx_nb.export(folder)`` (or of a model object with its ``sample``) into ``row`` (its seconds,
    exporter, outcome); the result, or None when it raised (the row's time then set: it ends there)."""
    import onnx_nb
    from onnx_nb.errors import first_line
    from onnx_nb.steps.export.adapters.registry import resolve

    if sample is None and resolve(folder).several_files:
        out = out.parent  # a kind written as several files (a vision-language model) is given a folder
    try:
        t = time.perf_counter()
        result = onnx_nb.export(folder, sample, out=out, progress=False)
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        row["export"] = f"{type(exc).__name__}: {first_line(exc)}"[:400]
        row["seconds"] = round(time.perf_counter() - started, 1)
        return None
    row["export_s"] = round(time.perf_counter() - t, 1)
    row["exporter"] = getattr(result, "exporter", None)
    row["patches"], theirs = patch_sets_of(result)  # whose rewrites each file was traced under
    if theirs:  # transformers' patch set ran first and its file was not kept
        row["transformers_patches"] = theirs[:300]
    row["export"] = "ok" if result else f"check {getattr(result, 'status', 'failed')}"
    if not result:  # the check's own words: what differed, and where
        said = getattr(result, "check_text", None)  # (files chained: the chain's own summary)
        row["export_note"] = (said() if said else str(getattr(result, "chain", {}).get("summary", "")))[:300]
    return result


def patch_sets_of(result: Any) -> tuple[str, str]:
    """Whose patches each file of ``result`` was traced under (``transformers``, ``onnx-nb``, ``none``, or
    ``torchscript``: a TorchScript file, no patches), as ``"vision: transformers, decoder: onnx-nb"`` for a model of
    several files; and why transformers' set was not kept where it ran first and lost."""
    from onnx_nb.results.parts import PartsExport
    from onnx_nb.steps.export.machinery.torch_route import UPSTREAM

    parts = result.parts if isinstance(result, PartsExport) else {"": result}
    labels, lost = {}, []
    for name, part in parts.items():
        labels[name] = "torchscript" if getattr(part, "exporter", "") == "torchscript" else (
            getattr(part, "patch_set", "") or "none")
        # the narrowed retry renames the first round's attempts ("..., sizes dynamic"): theirs under any name
        said = next((v for k, v in (getattr(part, "fallback_reason", None) or {}).items() if k.startswith(UPSTREAM)),
                    None)
        if said:
            lost.append(f"{name + ': ' if name else ''}{said}")
    if len(set(labels.values())) == 1:
        return next(iter(labels.values())), "; ".join(lost)
    return ", ".join(f"{k}: {v}" for k, v in labels.items()), "; ".join(lost)


def uncached_ties(model: Any, prompts: list[list[int]], made: list[list[int]],
                  torch_tokens: list[list[int]]) -> tuple[str, str]:
    """A file exported without its cache passes its forward parity but gets no generation parity (which runs the
    cache step by step), so each prompt's first difference is judged here from PyTorch's own next-token logits
    (a plain forward of the prompt and the tokens both made before it): a near-tie when PyTorch's margin between its
    pick and ONNX's is within ``NEAR_TIE`` of the logits' scale either way (without the teacher-forced logits error
    the cached check adds to that allowance: stricter). A plain forward that prefers ONNX's pick by more than that
    means PyTorch's ``generate()`` feeds the model something else (XLM and XLNet append a mask token): differs."""
    import torch

    from onnx_nb.results.tolerance import NEAR_TIE

    told, verdict = [], "near-tie"
    for i, (prompt, mine, theirs) in enumerate(zip(prompts, made, torch_tokens)):
        step = next((k for k, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
        if step is None:
            continue
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + theirs[:step]])).logits[0, -1].float()
        gap = float(logits[theirs[step]] - logits[mine[step]])
        tie = abs(gap) <= NEAR_TIE * (float(logits.abs().max()) or 1.0)
        verdict = verdict if tie else "differs"
        told.append(f"prompt {i}: step {step}, PyTorch's margin {gap:.3g} of {float(logits.abs().max()):.3g} "
                    f"({'near-tie' if tie else 'its forward prefers ONNX pick' if gap < 0 else 'diverged'})")
    return verdict, ("no cache, judged here: " + "; ".join(told))[:300]


def served(row: dict[str, Any]) -> bool:
    """Exported and generating PyTorch's tokens, for each prompt alone and in one batch, and at the second size
    where PyTorch runs there (rows swept before those checks: at the first size alone)."""
    return (row.get("export") == "ok" and row.get("generate") in ("same", "near-tie")
            and row.get("batch", "same") == "same"
            and row.get("second_size", "same") in ("same", "near-tie", "pytorch fails"))


def counted(row: dict[str, Any]) -> bool:
    return row.get("pytorch") == "ok"


def speech_llm_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with each speech LLM's row (a type the speech LLM sweep measures, registered here too) the speech
    LLM sweep's: the route ``export()`` takes it on, from clips."""
    speech_llms = swept(ROOT / "benchmarks" / "results" / "speech_llm_sweep.json")
    by_type = {r["type"]: r for r in speech_llms[0]} if speech_llms else {}
    return [{**by_type[r["type"]], "route": "speech LLM"} if r["type"] in by_type else r for r in rows]


def page(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:

    rows = speech_llm_rows(rows)
    base = [r for r in rows if counted(r)]
    good = [r for r in base if served(r)]
    lines = [
        "# Supported architectures",
        "",
        "Measured, not listed by hand: `benchmarks/registry_sweep.py` builds every model type transformers "
        "registers for `AutoModelForCausalLM` at a tiny size from its own default config (2 layers, width 64, random "
        "weights), saves it as a folder and runs one default `onnx_nb.export(folder)`, then `onnx_nb.generate` "
        f"against PyTorch's greedy `generate()` ({NEW_TOKENS} new tokens for each of two prompts of different "
        "lengths, alone and as one batch), the same again at a second size (3 layers, width 96, 6 heads: a type "
        "counts as served when both sizes give PyTorch's tokens, or PyTorch itself fails at the second), then "
        "INT8 (`quantize()`) and INT4 (`quantize(method=\"int4\")`), each with its parity (left empty when the sweep "
        "ran with `--no-variants`). Types PyTorch itself cannot build or generate with at that size are listed but not "
        "counted (the shrink is generic: every per-layer list follows the layers kept, one of each kind of layer "
        "first; a layer's own sizes keep their ratio; sub-configs such as an audio or vision tower shrink too; some "
        "configs still tie widths in ways it does not know, and it retries with only the depth shrunk up to 300M "
        "parameters). A mixture of experts whose router starts at zero (every expert "
        "tied, so the experts a token takes are `torch.topk`'s unspecified order among ties) has its router given "
        "random weights first; its row says so. Each row is from the last run for its type (`--only` re-runs "
        "some). A speech LLM registered here (an audio tower filling a causal LM's audio tokens) has the "
        "[speech LLM sweep's](#speech-llms) row, from clips, counted as there.",
        "",
        f"Swept {meta['date']} on transformers {meta['transformers']}, torch {meta['torch']}, onnxruntime "
        f"{meta['onnxruntime']}: **{len(good)} of the {len(base)} causal LMs PyTorch can build and run "
        f"({100 * len(good) / max(1, len(base)):.1f}%) export with one default call and generate PyTorch's tokens** "
        f"({sum(r.get('generate') == 'near-tie' for r in good)} of them after a near-tie); "
        f"{len(rows)} types registered.",
        "",
        "| type | class | export | generate | INT8 | INT4 | what stopped it |",
        "|---|---|---|---|---|---|---|",
    ]

    for r in sorted(rows, key=lambda r: (not counted(r), not served(r), r["type"])):
        lines.append(_row(r))
    lines += ["", "## Sequence-to-sequence models", "",
              *seq2seq_section(ROOT / "benchmarks" / "results" / "seq2seq_sweep.json"),
              "", "## Speech-to-text models", "",
              *seq2seq_section(ROOT / "benchmarks" / "results" / "speech_sweep.json", speech=True)]
    lines += ["", "## Vision-language models", "", *vlm_section(ROOT / "benchmarks" / "results" / "vlm_sweep.json")]
    lines += ["", "## Speech LLMs", "", *speech_llm_section(ROOT / "benchmarks" / "results" / "speech_llm_sweep.json")]
    import exporter_peer_seq2seq
    import exporter_peer_sweep  # the other sweeps import this module: imported here, not above
    import exporter_peer_vlm
    import patch_sets
    import task_sweep
    import timm_sweep

    seq2seq = swept(ROOT / "benchmarks" / "results" / "seq2seq_sweep.json")
    vlms = swept(ROOT / "benchmarks" / "results" / "vlm_sweep.json")
    lines += ["", "## transformers' own exporter on the same configs", "", *exporter_peer_sweep.section(rows), "",
              *exporter_peer_seq2seq.section(seq2seq[0] if seq2seq else []), "",
              *exporter_peer_vlm.section(vlms[0] if vlms else []), "", "### Whose patches", "",
              *patch_sets.section()]

    import transformers_js_sweep

    lines += ["", "## Runs in transformers.js", "", *transformers_js_sweep.section()]
    lines += ["", "## Encoder tasks", "", *task_sweep.summary(), "", "## timm image models", "",
              *timm_sweep.section()]
    return "\n".join(lines)


def seq2seq_section(path: Path, speech: bool = False) -> list[str]:
    """The sequence-to-sequence LMs' part of the page, from ``benchmarks/seq2seq_sweep.py``'s rows (``speech``:
    the speech-to-text models', from its ``--speech`` run)."""

    run = "benchmarks/seq2seq_sweep.py" + (" --speech" if speech else "")
    found = swept(path)
    if found is None:
        return [f"Not swept yet: run `{run}`.", ""]
    rows, meta, _, _ = found
    rows = speech_llm_rows(rows)
    base, good = sum(counted(r) for r in rows), sum(counted(r) and served(r) for r in rows)
    what = "speech-to-text models" if speech else "sequence-to-sequence LMs"
    lines = [
        (f"`{run}` builds every model type transformers registers for `AutoModelForSpeechSeq2Seq` the same way "
         "(its audio encoder's and text decoder's configs shrunk too), saves it as a folder, runs PyTorch's greedy "
         "`generate()` on the two rows of onnx-nb's own audio sample for the model (a waveform or a spectrogram in "
         "the layout it takes), then one default `onnx_nb.export(folder)` and `onnx_nb.generate` on the same audio, "
         "then INT8 and INT4 with their parity." if speech else
         "`benchmarks/seq2seq_sweep.py` builds every model type transformers registers for `AutoModelForSeq2SeqLM` "
         "the same way (2 encoder and 2 decoder layers, width 64, random weights), saves it as a folder, runs one "
         "default `onnx_nb.export(folder)` (an encoder file and a decoder file with both caches) and "
         f"`onnx_nb.generate` against PyTorch's greedy `generate()` ({NEW_TOKENS} new tokens for each of two "
         "prompts), then INT8 and INT4 with their parity. Sub-configs are shrunk too (T5Gemma's encoder and "
         "decoder, an audio tower)."),
        "",
        "Speech LLMs registered here (an audio tower whose features take the place of audio tokens in a causal "
        "LM's prompt: Voxtral, Granite Speech, Qwen2-Audio, Audio Flamingo 3, ...) are not encoder-decoders: "
        "`export()` takes them on its speech LLM route (audio, embed and decoder files), and their rows here are "
        "the [speech LLM sweep's](#speech-llms) (two clips through the family's feature extractor, PyTorch's "
        "tokens), counted here as there.",
        "",
        f"Swept {meta['date']} on transformers {meta['transformers']}, torch {meta['torch']}, onnxruntime "
        f"{meta['onnxruntime']}: **{good} of the {base} {what} PyTorch can build and "
        f"run ({100 * good / max(1, base):.1f}%) export with one default call and generate PyTorch's "
        f"tokens** ({sum(r.get('generate') == 'near-tie' and served(r) for r in rows)} of them after a near-tie); "
        f"{len(rows)} types registered.",
        "",
        "| type | class | export | generate | INT8 | INT4 | what stopped it |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (not counted(r), not served(r), r["type"])):
        lines.append(_row(r))
    return [*lines, ""]


def _row(r: dict[str, Any]) -> str:
    """One type's line of a table with INT8 and INT4 columns, with the reason for every gap."""
    import html

    if not counted(r):
        why = f"PyTorch {r.get('pytorch', 'did not finish')}"
        return f"| {r['type']} | {r['class']} | – | – | – | – | {html.escape(why).replace('|', '/')} |"
    if r.get("route") == "speech LLM":  # the speech LLM sweep's row: no variants there
        why = "speech LLM route, from clips: " + ("served" if served(r) else (
            r.get("export") if r.get("export") != "ok" else r.get("generate_note") or r.get("generate", "")))
        return (f"| {r['type']} | {r['class']} | {cell(r.get('export'))} | {cell(r.get('generate'))} | | | "
                f"{html.escape(str(why)).replace('|', '/')} |")
    if r.get("export") != "ok":
        why = ": ".join(x for x in (r.get("export", "did not finish"), r.get("export_note")) if x)
    elif r.get("generate") not in ("same", "near-tie"):
        why = r.get("generate_note") or r.get("generate", "")
    elif not served(r):
        why = (f"batched prompts {r['batch']}" if r.get("batch", "same") != "same"
               else f"at the second size: {r.get('second_size')}")
    else:
        why = "; ".join(f"{k.upper()}: {r[k]}" for k in ("int8", "int4") if r.get(k) not in (None, "ok"))
    if r.get("routers_spread"):
        why = "; ".join(x for x in (why, f"router starts at zero: {len(r['routers_spread'])} given random "
                                          "weights") if x)
    return (f"| {r['type']} | {r['class']} | {cell(r.get('export'))} | {cell(r.get('generate'))} | "
            f"{cell(r.get('int8'))} | {cell(r.get('int4'))} | {html.escape(why).replace('|', '/')} |")


def vlm_section(path: Path) -> list[str]:
    """The vision-language models' part of the page, from ``benchmarks/vlm_sweep.py``'s rows."""

    found = swept(path)
    if found is None:
        return ["Not swept yet: run `benchmarks/vlm_sweep.py`.", ""]
    rows, meta, base, good = found
    lines = [
        "`benchmarks/vlm_sweep.py` builds every model type transformers registers for "
        "`AutoModelForImageTextToText` the same way (the text part as above; the vision tower 2 layers, width 32, at "
        "its own image and patch sizes), makes an image and a prompt holding the family's count of image tokens with "
        "onnx-nb's own sample makers, runs PyTorch's greedy `generate()` for two images, then one default "
        "`onnx_nb.export(folder)` (vision, embed and decoder files) and `onnx_nb.generate(result, ids, images=...)`. "
        "A type whose PyTorch model cannot be built or driven from that sample (no image token in its config, a "
        "processor-only input) is listed but not counted. [Vision-language models](guides/vision-language.md) "
        "says how each family is served; `tests/test_vlm.py` checks eighteen of them, beams included. *images*: "
        "which images the vision file takes (`VlmExport.image_sizes`): every grid (a grid family's file takes the "
        "tensors of each image's grid), any image size (one image cropped to its size, Pixtral's "
        "towers; or its tiles packed by its size, LLaVA-NeXT; or any count of patches with their positions, "
        "Gemma 4), one grid or one image size (traced at the sample's; another is refused), or the tower's size "
        "(the file takes that size; Idefics 2's processor gives others, which its file refuses).",
        "",
        f"Swept {meta['date']} on transformers {meta['transformers']}: **{good} of the {base} "
        f"image-text-to-text models that PyTorch builds and runs from onnx-nb's sample (an image and a prompt) "
        f"export with one default call and generate PyTorch's tokens from images** "
        f"({sum(r.get('generate') == 'near-tie' and served(r) for r in rows)} of them after "
        f"a near-tie); {len(rows)} types registered.",
        "",
        "| type | class | export | images | generate | the image changes the tokens | what stopped it |",
        "|---|---|---|---|---|---|---|",
    ]
    return [*lines, *media_rows(rows, "images", "image_changes_tokens"), ""]


def speech_llm_section(path: Path) -> list[str]:
    """The speech LLMs' part of the page, from ``benchmarks/speech_llm_sweep.py``'s rows."""

    found = swept(path)
    if found is None:
        return ["Not swept yet: run `benchmarks/speech_llm_sweep.py`.", ""]
    rows, meta, base, good = found
    lines = [
        "`benchmarks/speech_llm_sweep.py` builds every model type transformers registers whose default config is a "
        "speech LLM (an audio tower filling a causal LM's audio tokens, no vision tower) the same way (the text part "
        "as above; the audio tower 2 layers, width 32), makes two clips of noise (5.1 s and 1.4 s) through the "
        "family's feature extractor and prompts holding each clip's count of audio tokens, runs PyTorch's greedy "
        "`generate()`, then one default `onnx_nb.export(folder)` (audio, embed and decoder files) and "
        "`onnx_nb.generate(result, inputs)` on the same inputs. A type built but not driven from a clip by onnx-nb's "
        "sample maker is counted, its export refused. [Speech LLMs](guides/speech-llm.md) says how each family is "
        "served. *audio file*: its status and exporter.",
        "",
        f"Swept {meta['date']} on transformers {meta['transformers']}: **{good} of the {base} speech LLMs that "
        f"PyTorch builds export with one default call and generate PyTorch's tokens from clips of their own "
        f"lengths**; {len(rows)} types registered.",
        "",
        "| type | class | export | audio file | generate | the clip changes the tokens | what stopped it |",
        "|---|---|---|---|---|---|---|",
    ]
    return [*lines, *media_rows(rows, "audio_file", "audio_changes_tokens"), ""]


def media_rows(rows: list[dict[str, Any]], column: str, changes: str) -> list[str]:
    """A chain's table rows (vision-language models, speech LLMs): ``column`` what its tower's file takes,
    ``changes`` whether its image or clip changes the tokens."""
    import html

    lines = []
    for r in sorted(rows, key=lambda r: (not counted(r), not served(r), r["type"])):
        if not counted(r):
            why = f"PyTorch {r.get('pytorch', 'did not finish')}"
            lines.append(f"| {r['type']} | {r['class']} | – | – | – | – | {html.escape(why).replace('|', '/')} |")
            continue
        why = "" if served(r) else (r.get("export") if r.get("export") != "ok" else
                                     r.get("generate_note") or r.get("generate", ""))
        said = "yes" if r.get(changes) else ("no" if changes in r else "")
        lines.append(f"| {r['type']} | {r['class']} | {cell(r.get('export'))} | {r.get(column, '')} | "
                     f"{cell(r.get('generate'))} | {said} | {html.escape(str(why or '')).replace('|', '/')} |")
    return lines


def cell(value: Any) -> str:
    return "✓" if value in ("ok", "same") else ("near-tie" if value == "near-tie" else ("✗" if value else ""))


def run_rows(script: str, types: dict[str, str], path: Path, only: str, again: bool, timeout: int,
             extra: list[str]) -> list[dict[str, Any]]:
    """Each wanted type (``only``: some, by name; else every type not already in ``path`` for this transformers
    version, unless ``again``) through ``script --one TYPE --folder F`` in a process of its own with a time limit,
    its row written into ``path`` (JSON: meta and rows, replaced whole) as it comes; the rows, by type."""
    import onnxruntime
    import torch
    import transformers

    meta = {"date": datetime.date.today().isoformat(), "transformers": transformers.__version__,
            "torch": torch.__version__.split("+")[0], "onnxruntime": onnxruntime.__version__}
    if "timm" in sys.modules:  # the timm sweep's registry read it: its rows depend on its version too
        meta["timm"] = sys.modules["timm"].__version__
    kept: dict[str, Any] = {}
    if path.exists():
        saved = json.loads(path.read_text())
        # the other types' rows stay when only some are run (again or not): ``again`` alone starts afresh
        if saved.get("meta", {}).get("transformers") == meta["transformers"] and (not again or only):
            kept = {r["type"]: r for r in saved["rows"]}
    wanted = [t for t in only.split(",") if t] or list(types)
    print(f"load average at the start: {os.getloadavg()[0]:.2f}; {len(wanted)} types", flush=True)
    for i, model_type in enumerate(wanted):
        if model_type in kept and not only:
            continue
        with tempfile.TemporaryDirectory(prefix=f"sweep_{model_type}_") as tmp:
            try:
                done = subprocess.run([sys.executable, script, "--one", model_type, "--folder", f"{tmp}/model",
                                       *extra], capture_output=True, text=True, timeout=timeout, cwd=tmp)
                found = [ln for ln in done.stdout.splitlines() if ln.startswith("ROW ")]
                row = json.loads(found[-1][4:]) if found else {  # a crash (not an exception) inside onnx-nb
                    "type": model_type, "class": types[model_type], "pytorch": "ok",
                    "export": f"the process was killed by signal {-done.returncode}"
                              + (" (the machine's memory, most likely)" if done.returncode == -9 else
                                 " (a crash inside native code)" if done.returncode == -11 else "")
                              if done.returncode < 0 else f"the process ended with code "
                              f"{done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:300]}"}
                if not found and "PYTORCH_OK" not in done.stdout:  # it ended before PyTorch had run the model
                    row["pytorch"] = f"the sweep's process ended first: {row.pop('export')}"
            except subprocess.TimeoutExpired as exc:
                out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
                found = [ln for ln in out.splitlines() if ln.startswith("ROW ")]  # judged before its variants
                row = json.loads(found[-1][4:]) if found else {"type": model_type, "class": types[model_type],
                                                               "pytorch": "ok"}
                row.update({k: f"did not finish in {timeout} s" for k, v in row.items() if v == UNFINISHED})
                row.setdefault("export", f"did not finish in {timeout} s")
        kept[model_type] = row
        print(f"[{i + 1}/{len(wanted)}] {model_type}: pytorch {row.get('pytorch', '')[:60]} | export "
              f"{str(row.get('export', '-'))[:90]} | generate {row.get('generate', '-')} | int8 {row.get('int8', '-')}"
              f" | int4 {row.get('int4', '-')}", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = sorted(kept.values(), key=lambda r: r["type"])
        tmp_json = path.with_suffix(".json.tmp")
        tmp_json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        tmp_json.replace(path)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return sorted(kept.values(), key=lambda r: r["type"])


def main() -> None:
    parser = parser_for(__doc__, 300)
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "causal_lm_sweep.json"))
    parser.add_argument("--page", default=str(ROOT / "docs" / "supported-architectures.md"))
    parser.add_argument("--page-only", action="store_true", help="write the page from --json without running")
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(one(args.one, registry()[args.one], Path(args.folder), not args.no_variants)))
        return
    path = Path(args.json)
    if not args.page_only:
        run_rows(__file__, registry(), path, args.only, args.again, args.timeout,
                 ["--no-variants"] if args.no_variants else [])
    saved = json.loads(path.read_text())
    Path(args.page).write_text(page(saved["rows"], saved["meta"]))
    base = [r for r in speech_llm_rows(saved["rows"]) if counted(r)]  # as the page counts them
    print(f"served: {sum(served(r) for r in base)} of {len(base)} that PyTorch builds and generates "
          f"({len(saved['rows'])} swept)")


if __name__ == "__main__":
    main()
