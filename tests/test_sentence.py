"""sentence-transformers models export with their pooling and normalisation inside the graph: the file's
``sentence_embedding`` is what ``SentenceTransformer.encode()`` returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
import transformers

import onnx_nb

TEXTS = ["A man is eating food.", "A man is riding a white horse on an enclosed ground.", "Hi",
         "The quick brown fox jumps over the lazy dog near the river bank, late on a quiet afternoon."]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """A small BERT with mean pooling and normalisation (random weights), as an object and as a folder."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models

    folder = tmp_path_factory.mktemp("sentence")
    tokenizer = transformers.AutoTokenizer.from_pretrained(onnx_nb.default_model_path())
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                     vocab_size=tokenizer.vocab_size, max_position_embeddings=128)
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(folder / "bert")
    tokenizer.save_pretrained(folder / "bert")
    st = SentenceTransformer(modules=[models.Transformer(str(folder / "bert")), models.Pooling(32, "mean"),
                                      models.Normalize()], device="cpu")
    st.save(str(folder / "st"))
    return st, folder / "st"


def onnx_embeddings(path: Path, tokenizer: Any, texts: list[str]) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    encoded = tokenizer(texts, padding=True, return_tensors="np")
    feed = {i.name: encoded[i.name].astype(np.int64) for i in session.get_inputs()}
    return session.run(["sentence_embedding"], feed)[0]


def test_sentence_transformer_object(tiny: tuple[Any, Path], tmp_path: Path) -> None:
    st, _ = tiny
    result = onnx_nb.export(st, out=tmp_path / "st.onnx", progress=False)
    assert result, repr(result)
    assert result.source.task == "sentence-embedding" and result.source.kind == "sentence-transformers"
    assert [o.name for o in result.outputs] == ["token_embeddings", "sentence_embedding"]
    got = onnx_embeddings(result.path, st.tokenizer, TEXTS)
    want = st.encode(TEXTS, convert_to_numpy=True)
    assert np.abs(got - want).max() < 1e-5, np.abs(got - want).max()
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)  # Normalize is inside the graph
    report = onnx_nb.check_parity(result, progress=False)
    assert report and {r.output for r in report.rows} >= {"sentence_embedding", "token_embeddings"}
    int8 = onnx_nb.quantize(result, out=tmp_path / "st.int8.onnx")
    assert int8, repr(int8.parity)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="sentence-embedding"):
        onnx_nb.export(st, task="text-classification", out=tmp_path / "x.onnx", progress=False)


def test_sentence_transformers_folder(tiny: tuple[Any, Path], tmp_path: Path) -> None:
    st, folder = tiny
    result = onnx_nb.export(folder, task="sentence-embedding", out=tmp_path / "f.onnx", progress=False)
    assert result and result.source.location == str(folder.resolve())
    got = onnx_embeddings(result.path, st.tokenizer, TEXTS)
    assert np.abs(got - st.encode(TEXTS, convert_to_numpy=True)).max() < 1e-5


def test_minilm_sentence_embeddings_match_encode(tmp_path: Path) -> None:
    """The real all-MiniLM-L6-v2 (its own folder lists Transformer, Pooling, Normalize): the file's embeddings are
    encode()'s on real sentences; optimized then INT8 (ORT's quantizer once failed on the pooling behind the fused
    ops: "Unable to find data type"), cosine with encode() is 0.99 on average, "Hi" the lowest. quantize() takes
    the attention route whose INT8 file is faster on this CPU (the eager re-export, ORT's QAttention, where the CPU
    has VNNI: "Hi" keeps 0.980 there). A CPU whose u8s8 products saturate (AVX2 without VNNI) takes uint8 or 7-bit
    weights instead of full-range u8s8: 0.9899 on average on a first-generation EPYC, "Hi" 0.978."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(onnx_nb.default_model_path()), device="cpu")
    result = onnx_nb.export(st, out=tmp_path / "minilm.onnx", progress=False)
    want = st.encode(TEXTS, convert_to_numpy=True)
    got = onnx_embeddings(result.path, st.tokenizer, TEXTS)
    assert got.shape == (4, 384) and np.abs(got - want).max() < 1e-5
    int8 = onnx_nb.quantize(onnx_nb.optimize(result, validate=False), out=tmp_path / "minilm.int8.onnx")
    cosine = (onnx_embeddings(int8.path, st.tokenizer, TEXTS) * want).sum(axis=1)  # both unit length
    full_range = int8.recipe["int8_scheme"] == "u8s8"
    assert cosine.mean() >= (0.99 if full_range else 0.985) and cosine.min() >= 0.975, (cosine, int8.recipe)
