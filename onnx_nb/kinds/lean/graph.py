"""``export(folder, precision=...)``: a decoder checkpoint written straight into ONNX Runtime's fused decoder graph,
layer by layer, each weight read from the safetensors files and converted as it is read.

The generic route traces the whole PyTorch model, saves an fp32 graph, re-exports it, rewrites its attention and
then quantizes: the model, the graph and the quantizer's copy sit in memory together (about 4x the weights at its
peak). This route never builds the model: for the families ONNX Runtime's ``GroupQueryAttention`` covers (Llama,
Mistral, Qwen2, Qwen3, Phi-3, Gemma, Granite) it writes the graph onnxruntime-genai's model builder writes, and the
same file :func:`~onnx_nb.steps.variants.gqa.rewrite` makes (same inputs and outputs, so ``generate()``, generation
parity, onnxruntime-genai's loop and ``benchmark()`` take it as they take that one):

- ``Gather`` embedding; per layer ``SimplifiedLayerNormalization`` / ``SkipSimplifiedLayerNormalization`` (the
  residual sum comes out of the norm), one packed Q/K/V projection, ``GroupQueryAttention`` with the rotary
  embedding inside (cos/sin tables from the model's own rotary module, so its scaling rule holds), the output
  projection, a gated MLP; the final norm and the LM head (a tied head reads the embedding's tensor);
- each projection's weight in the asked precision as it is read: ``int4`` and ``int8`` are ONNX Runtime's
  ``MatMulNBits`` (blocks of 32, INT8 compute on CPU: accuracy level 4, as the builder writes for CPU; INT4 blocks
  asymmetric round-to-nearest and the LM head at INT8 unless ``algorithm=`` / ``lm_head_bits=`` / ``block_size=`` say
  otherwise: :mod:`~onnx_nb.kinds.lean.weights`), ``fp32`` a plain ``MatMul``; ``fp16`` computes in half
  precision (for GPU providers) with float32 logits;
- weights go straight into the external-data file as they are converted (aligned, one file), so the process holds
  one layer's tensors at a time; the checkpoint is read with ``pread``, never mapped
  (:mod:`~onnx_nb.kinds.lean.safetensors_file`).

Only imported by functions that already need torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ...errors import InvalidArgumentError, ModelLoadError
from ...runtime.onnxedit import pad_to_page, point_external
from ...steps.export.caches.gqa_io import COS, PRESENT_AXIS, SEQLENS, SIN, TOTAL, mask_nodes
from ...steps.export.precision import ACCURACY_LEVEL, Blocks
from .families import PRECISIONS, Family, family_of, rotary_of
from .safetensors_file import Checkpoint
from .weights import by_quantizer, refuse_odd_blocks, rtn

INLINE_BYTES = 1024  # smaller tensors stay in the graph
OPSET = 21
GQA_OP = "GroupQueryAttention"


class Weights:
    """The external-data file being written: each tensor appended (page-aligned) as it is made."""

    def __init__(self, path: Path) -> None:
        self.path, self.location = path, path.name
        self.f: BinaryIO = open(path, "wb")
        self.offset = 0
        self.initializers: list[Any] = []
        self.bytes = 0

    def add(self, name: str, array: np.ndarray) -> str:
        from onnx import numpy_helper

        array = np.ascontiguousarray(array)
        if array.nbytes < INLINE_BYTES:
            self.bytes += array.nbytes
            self.initializers.append(numpy_helper.from_array(array, name))
            return name
        return self.add_stacked(name, [array], stacked=False)

    def add_stacked(self, name: str, parts: Any, stacked: bool = True) -> str:
        """One tensor made of ``parts`` (same shape and dtype) stacked on a new first axis (``stacked=False``: one
        part, its own shape), written part by part: an expert stack never sits in memory whole."""
        from onnx import TensorProto, helper

        self.offset = pad_to_page(self.f, self.offset)
        start, count, first = self.offset, 0, None
        for part in parts:
            part = np.ascontiguousarray(part)
            first = part if first is None else first
            self.f.write(memoryview(part).cast("B"))  # type: ignore[arg-type]
            self.offset += part.nbytes
            self.bytes += part.nbytes
            count += 1
        assert first is not None
        t = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(first.dtype),
                        dims=[count, *first.shape] if stacked else list(first.shape))
        point_external(t, self.location, start, self.offset - start)
        self.initializers.append(t)
        return name

    def close(self) -> None:
        self.f.close()


class Writer:
    """Nodes and weights of the graph being written."""

    def __init__(self, fam: Family, ckpt: Checkpoint, weights: Weights, precision: str,
                 blocks: Blocks | None = None) -> None:
        self.fam, self.ckpt, self.w, self.precision = fam, ckpt, weights, precision
        self.blocks = blocks
        self.nodes: list[Any] = []
        self.float = np.float16 if precision == "fp16" else np.float32

    def node(self, op: str, inputs: list[str], name: str, outputs: int | list[str] = 1, domain: str = "",
             **attrs: Any) -> Any:
        from onnx import helper

        outs = [f"{name}/out{i}" for i in range(outputs)] if isinstance(outputs, int) else outputs
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, domain=domain, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def const(self, name: str, value: float) -> str:
        return self.w.add(name, np.array(value, self.float))

    def read(self, name: str) -> np.ndarray:
        return self.ckpt.read(name)

    def linear(self, x: str, name: str, w_nk: np.ndarray, bias: np.ndarray | None = None,
               keep_float: bool = False, bits: int | None = None) -> str:
        """``x @ w.T (+ bias)`` with ``w`` as the checkpoint stores it (``[out, in]``), in the file's precision
        (``keep_float``: in the float type whatever the precision: a router, whose picks rounding would move;
        ``bits``: other bits than the file's, the LM head's), its blocks by the route's algorithm (8 bits:
        round-to-nearest)."""
        n, k = w_nk.shape
        if self.blocks is not None and not keep_float:
            bits = bits or self.blocks.bits
            algorithm = self.blocks.algorithm if bits == self.blocks.bits else "rtn"
            block = self.blocks.block
            arrays = rtn(w_nk, bits, block, symmetric=algorithm == "rtn") if algorithm.startswith("rtn") else \
                by_quantizer(w_nk, bits, algorithm, block)
            names = [self.w.add(f"{name}.{part}", a) for part, a in zip(("qweight", "scales", "zero_points"), arrays)]
            y = self.node("MatMulNBits", [x, *names], name, domain="com.microsoft",
                          K=k, N=n, bits=bits, block_size=block, accuracy_level=ACCURACY_LEVEL)
        else:
            y = self.node("MatMul", [x, self.w.add(f"{name}.weight", w_nk.T.astype(self.float))], name)
        if bias is not None:
            y = self.node("Add", [y, self.w.add(f"{name}.bias", bias.astype(self.float))], f"{name}/bias")
        return str(y)

    def norm_weight(self, name: str) -> str:
        return self.w.add(name, (self.read(name) + self.fam.norm_offset).astype(self.float))

    def norm(self, x: str, weight: str, name: str) -> str:
        return str(self.node("SimplifiedLayerNormalization", [x, self.norm_weight(weight)], name, axis=-1,
                         epsilon=self.fam.eps, stash_type=1))

    def skip_norm(self, x: str, skip: str, weight: str, name: str) -> tuple[str, str]:
        """(normalized, x + skip): the residual sum comes out of the norm."""
        outs = [f"{name}/out0", "", "", f"{name}/sum"]
        self.node("SkipSimplifiedLayerNormalization", [x, skip, self.norm_weight(weight)], name, outputs=outs,
                  domain="com.microsoft", epsilon=self.fam.eps)
        return outs[0], outs[3]

    def scaled(self, x: str, scale: float, name: str) -> str:
        return x if scale == 1.0 else self.node("Mul", [x, self.const(f"{name}.scale", scale)], name)

    def optional(self, name: str) -> np.ndarray | None:
        return self.read(name) if name in self.ckpt else None

    def attention(self, i: int, x: str) -> str:
        fam, p = self.fam, f"model.layers.{i}.self_attn."
        q_n, kv_n = fam.heads * fam.head_size, fam.kv_heads * fam.head_size
        if fam.packed:
            qkv_w, qkv_b = self.read(p + "qkv_proj.weight"), self.optional(p + "qkv_proj.bias")
        else:
            parts = [self.read(p + f"{t}_proj.weight") for t in "qkv"]
            qkv_w = np.concatenate(parts, axis=0)
            del parts
            biases = [self.optional(p + f"{t}_proj.bias") for t in "qkv"]
            qkv_b = None if all(b is None for b in biases) else np.concatenate(
                [b if b is not None else np.zeros(n, np.float32) for b, n in zip(biases, (q_n, kv_n, kv_n))])
        if qkv_w.shape[0] != q_n + 2 * kv_n:
            raise ModelLoadError(f"layer {i}'s Q/K/V weights have {qkv_w.shape[0]} rows; the config says "
                                 f"{q_n} + 2 x {kv_n}.")
        qkv = self.linear(x, f"/model/layers.{i}/attn/qkv_proj", qkv_w, qkv_b)
        del qkv_w
        inputs = [qkv, "", ""]
        if p + "q_norm.weight" in self.ckpt:  # Qwen3: RMSNorm over each head of Q and K before the rotary
            q, k, v = self.node("Split", [qkv, self.w.add(f"/model/layers.{i}/attn/split", np.array(
                [q_n, kv_n, kv_n], np.int64))], f"/model/layers.{i}/attn/split", outputs=3, axis=-1)
            heads = []
            for t, y in (("q", q), ("k", k)):
                base = f"/model/layers.{i}/attn/{t}_norm"
                if self.ckpt.shape(p + f"{t}_norm.weight")[0] != fam.head_size:  # OLMoE: over the whole projection
                    heads.append(self.norm(y, p + f"{t}_norm.weight", base))
                    continue
                shaped = self.node("Reshape", [y, self.w.add(f"{base}/heads", np.array(
                    [0, 0, -1, fam.head_size], np.int64))], f"{base}/heads")
                normed = self.norm(shaped, p + f"{t}_norm.weight", base)
                heads.append(self.node("Reshape", [normed, self.w.add(f"{base}/flat", np.array(
                    [0, 0, -1], np.int64))], f"{base}/flat"))
            inputs = [heads[0], heads[1], v]
        attrs: dict[str, Any] = {"num_heads": fam.heads, "kv_num_heads": fam.kv_heads, "do_rotary": 1,
                                 "rotary_interleaved": 0}
        if fam.attention_scale is not None:
            attrs["scale"] = fam.attention_scale
        if fam.windows[i] > 0:
            attrs["local_window_size"] = fam.windows[i]
        out = self.node(GQA_OP, [*inputs, f"past_key_values.{i}.key", f"past_key_values.{i}.value", SEQLENS,
                                 TOTAL, COS, SIN], f"/model/layers.{i}/attn/GroupQueryAttention",
                        outputs=[f"/model/layers.{i}/attn/out", f"present.{i}.key", f"present.{i}.value"],
                        domain="com.microsoft", **attrs)[0]
        o = self.linear(out, f"/model/layers.{i}/attn/o_proj", self.read(p + "o_proj.weight"),
                        self.optional(p + "o_proj.bias"))
        return self.scaled(o, self.fam.residual_scale, f"/model/layers.{i}/attn/residual_scale")

    def expert_stack(self, name: str, groups: list[tuple[str, ...]]) -> list[str]:
        """Every expert's weight (a group's tensors interleaved row by row) stacked ``[experts, out, in]`` and written
        expert by expert: float, or 4/8-bit blocks with their scales (QMoE's raw layout)."""
        def weights() -> Any:
            for group in groups:
                rows = [self.read(n) for n in group]
                yield rows[0] if len(rows) == 1 else np.stack(rows, axis=1).reshape(-1, rows[0].shape[1])

        if self.blocks is None:
            return [self.w.add_stacked(f"{name}.weight", (w.astype(self.float) for w in weights()))]
        bits, block = self.blocks.bits, self.blocks.block
        scales: list[np.ndarray] = []

        def quantized() -> Any:
            for w in weights():
                packed, scale = rtn(w, bits, block)
                scales.append(scale)
                yield packed.reshape(packed.shape[0], -1)

        weight = self.w.add_stacked(f"{name}.qweight", quantized())
        return [weight, self.w.add(f"{name}.scales", np.stack(scales))]

    def experts(self, i: int, x: str) -> str:
        """A sparse layer: the router (kept in float), ONNX Runtime's ``MoE`` (float) or ``QMoE`` (INT4/INT8 blocks)
        over every expert's gate/up/down weights stacked ``[experts, out, in]``; Qwen2-MoE's shared expert beside."""
        fam, base = self.fam, f"/model/layers.{i}/moe"
        mixtral = fam.model_type == "mixtral"
        p = f"model.layers.{i}.{'block_sparse_moe' if mixtral else 'mlp'}."
        parts = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
        logits = self.linear(x, f"{base}/router", self.read(p + "gate.weight"), keep_float=True)
        probs = self.node("Reshape", [logits, self.w.add(f"{base}/rows", np.array([-1, fam.experts], np.int64))],
                          f"{base}/rows")
        inputs: dict[str, list[str]] = {}
        gate_up: list[tuple[str, ...]] = [(p + f"experts.{e}.{parts[0]}.weight", p + f"experts.{e}.{parts[1]}.weight")
                                          for e in range(fam.experts)]
        down: list[tuple[str, ...]] = [(p + f"experts.{e}.{parts[2]}.weight",) for e in range(fam.experts)]
        # fc1: gate and up rows interleaved (g0, u0, g1, u1, ...), the fused SwiGLU layout CPU kernels read
        inputs = {"fc1": self.expert_stack(f"{base}/fc1", gate_up), "fc2": self.expert_stack(f"{base}/fc2", down)}
        attrs: dict[str, Any] = {"k": fam.top_k, "activation_type": "swiglu", "swiglu_fusion": 1,
                                 "activation_alpha": 1.0, "activation_beta": 0.0,
                                 "normalize_routing_weights": int(fam.renormalize), "use_sparse_mixer": 0}
        if self.blocks is not None:
            out = self.node("QMoE", [x, probs, *inputs["fc1"], "", *inputs["fc2"], ""], f"{base}/QMoE",
                            domain="com.microsoft", expert_weight_bits=self.blocks.bits,
                            block_size=self.blocks.block, weights_prepacked=0, accuracy_level=ACCURACY_LEVEL, **attrs)
        else:
            out = self.node("MoE", [x, probs, *inputs["fc1"], "", *inputs["fc2"], ""], f"{base}/MoE",
                            domain="com.microsoft", **attrs)
        if p + "shared_expert.gate_proj.weight" in self.ckpt:  # Qwen2-MoE: + sigmoid(gate(x)) * shared expert(x)
            shared = self.mlp(i, x, prefix=p + "shared_expert.", base=f"{base}/shared_expert", scaled=False)
            gate = self.linear(x, f"{base}/shared_gate", self.read(p + "shared_expert_gate.weight"), keep_float=True)
            weighted = self.node("Mul", [shared, self.node("Sigmoid", [gate], f"{base}/shared_sigmoid")],
                                 f"{base}/shared_weighted")
            out = self.node("Add", [out, weighted], f"{base}/with_shared")
        return self.scaled(out, fam.residual_scale, f"{base}/residual_scale")

    def mlp(self, i: int, x: str, prefix: str | None = None, base: str | None = None, scaled: bool = True) -> str:
        if prefix is None and self.fam.sparse[i]:
            return self.experts(i, x)
        p, base = prefix or f"model.layers.{i}.mlp.", base or f"/model/layers.{i}/mlp"
        if self.fam.packed:
            both = self.read(p + "gate_up_proj.weight")
            half = both.shape[0] // 2
            gate_w, up_w = both[:half], both[half:]
        else:
            gate_w, up_w = self.read(p + "gate_proj.weight"), self.read(p + "up_proj.weight")
        gate = self.linear(x, f"{base}/gate_proj", gate_w, self.optional(p + "gate_proj.bias"))
        up = self.linear(x, f"{base}/up_proj", up_w, self.optional(p + "up_proj.bias"))
        del gate_w, up_w
        if self.fam.activation == "silu":
            act = self.node("Mul", [gate, self.node("Sigmoid", [gate], f"{base}/sigmoid")], f"{base}/silu")
        else:
            act = self.node("FastGelu", [gate], f"{base}/gelu", domain="com.microsoft")
        down = self.linear(self.node("Mul", [act, up], f"{base}/gated"), f"{base}/down_proj",
                           self.read(p + "down_proj.weight"), self.optional(p + "down_proj.bias"))
        return self.scaled(down, self.fam.residual_scale, f"{base}/residual_scale") if scaled else down


def build(ckpt: Checkpoint, config: Any, staged: Path, precision: str, step: Any = None,
          blocks: Blocks | None = None) -> dict[str, Any]:
    """Write the decoder file ``staged`` (+ ``staged.data``) from the checkpoint; ``step(text)`` is called per layer;
    ``blocks``: how an int4 / int8 file's weights are rounded (default: :meth:`Blocks.of` the precision's).
    Returns what was written (layers, weights' bytes in the file, cache dtype)."""
    import onnx
    from onnx import TensorProto, helper

    if precision not in PRECISIONS:
        raise InvalidArgumentError(f"precision={precision!r}: use one of {', '.join(PRECISIONS)}.")
    fam = family_of(config)
    cos, sin = rotary_of(config)
    if 2 * cos.shape[1] > fam.head_size:
        raise InvalidArgumentError("the rotary tables are wider than a head")
    blocks = blocks or Blocks.of(precision, None, None)
    if blocks is not None and blocks.bits == 4:  # every projection's input width (the experts' stay RTN: QMoE)
        widths = {n: ckpt.shape(n)[-1] for n in ckpt.names if n.endswith("proj.weight") and ".experts." not in n}
        refuse_odd_blocks(blocks.algorithm, {**widths, **({"the LM head": fam.hidden} if blocks.head_bits == 4
                                                          else {})}, blocks.block)
    weights = Weights(staged.with_name(staged.name + ".data"))
    try:
        w = Writer(fam, ckpt, weights, precision, blocks)
        front, inits = mask_nodes()
        w.nodes.extend(front)
        weights.initializers.extend(inits)
        weights.add(COS, cos.astype(w.float))
        weights.add(SIN, sin.astype(w.float))
        embed_name = "model.embed_tokens.weight"
        embed = ckpt.read(embed_name)
        vocab = embed.shape[0]
        h = w.node("Gather", [weights.add(embed_name, embed.astype(w.float)), "input_ids"], "/model/embed_tokens")
        del embed
        h = w.scaled(h, fam.embed_scale, "/model/embed_scale")
        residual, branch = h, ""
        for i in range(fam.layers):
            if step is not None:
                step(f"layer {i + 1}/{fam.layers}")
            ln1 = f"model.layers.{i}.input_layernorm.weight"
            if i == 0:
                x = w.norm(h, ln1, f"/model/layers.{i}/input_layernorm")
            else:
                x, residual = w.skip_norm(branch, residual, ln1, f"/model/layers.{i}/input_layernorm")
            attn = w.attention(i, x)
            x, residual = w.skip_norm(attn, residual, f"model.layers.{i}.post_attention_layernorm.weight",
                                      f"/model/layers.{i}/post_attention_layernorm")
            branch = w.mlp(i, x)
        x, _ = w.skip_norm(branch, residual, "model.norm.weight", "/model/norm")
        head = ckpt.read("lm_head.weight" if "lm_head.weight" in ckpt else embed_name)  # tied: the embedding
        logits = w.linear(x, "/lm_head", head, bits=w.blocks.head_bits if w.blocks else None)
        del head
        logits = w.scaled(logits, fam.logits_scale, "/lm_head/scale")
        if precision == "fp16":
            logits = w.node("Cast", [logits], "/lm_head/to_float", to=TensorProto.FLOAT)
        w.node("Identity", [logits], "/logits", outputs=["logits"])
    finally:
        weights.close()
    cache_type = TensorProto.FLOAT16 if precision == "fp16" else TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total_sequence"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", vocab])]
    for i in range(fam.layers):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(
                f"past_key_values.{i}.{kv}", cache_type, ["batch", fam.kv_heads, "past_sequence", fam.head_size]))
            outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{kv}", cache_type, ["batch", fam.kv_heads, PRESENT_AXIS, fam.head_size]))
    graph = helper.make_graph(w.nodes, "decoder", inputs, outputs, weights.initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              producer_name="onnx-nb lean decoder route")
    proto.ir_version = 10
    onnx.save(proto, str(staged))
    return {"layers": fam.layers, "kv_heads": fam.kv_heads, "head_size": fam.head_size,
            "cache_dtype": "float16" if precision == "fp16" else "float32", "file_weights": weights.bytes,
            "vocab": vocab}
