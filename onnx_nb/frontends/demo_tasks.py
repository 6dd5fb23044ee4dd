"""Real tasks with no download, for the evaluation tutorial, its benchmark and its tests: data that ships with Python
and scikit-learn, and small models trained on it here in seconds.

- :func:`docs_retrieval`: Python's own documentation topics (``pydoc_data.topics``) as (query, document) pairs: a
  topic's first sentence finds the rest of its body among every topic's;
- :func:`docs_text`: the same topics as plain text, cut into a training part and a held-out part;
- :func:`digits` and :func:`digits_cnn`: scikit-learn's bundled 8x8 digits and a small CNN trained on them;
- :func:`docs_lm`: a small Llama-shaped causal LM and its byte-pair tokenizer trained on :func:`docs_text`, saved as a
  Hugging Face folder."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np


def _topics() -> list[tuple[str, str]]:
    from pydoc_data.topics import topics

    return sorted(topics.items())


def docs_retrieval(max_chars: int = 600, min_chars: int = 200) -> list[tuple[str, str]]:
    """(first sentence, the rest of the paragraph) per paragraph of prose in Python's documentation topics (at
    least ``min_chars`` long, cut at ``max_chars``; one said twice counted once): each query's own paragraph is to
    be found among all of them."""
    pairs: dict[str, str] = {}
    for _name, text in _topics():
        for para in text.split("\n\n"):
            if para.startswith(" ") or len(para) < min_chars:  # code, grammar and tables are indented
                continue
            found = re.match(r"(.{20,}?[.:])\s+(.{40,})", " ".join(para.split()))
            if found and found.group(1) not in pairs and found.group(2)[:max_chars] not in pairs.values():
                pairs[found.group(1)] = found.group(2)[:max_chars]
    return list(pairs.items())


def docs_text(held_out: float = 0.15) -> tuple[str, str]:
    """(training text, held-out text): every topic in order, the last ``held_out`` share of topics held out."""
    texts = [t for _n, t in _topics()]
    cut = int(len(texts) * (1 - held_out))
    return "\n\n".join(texts[:cut]), "\n\n".join(texts[cut:])


def digits(test_share: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels): scikit-learn's 1,797 digits as [N, 1, 8, 8] floats
    in [0, 1], split by a seeded shuffle."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(len(x) * (1 - test_share))
    return x[order[:cut]], data.target[order[:cut]], x[order[cut:]], data.target[order[cut:]]


def digits_cnn(epochs: int = 12, seed: int = 0) -> Any:
    """A two-convolution CNN trained on :func:`digits`' training part (about 98% on its test part), in eval mode."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    x, y, _tx, _ty = digits()
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 16, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(xs), generator=gen).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xs[idx]), ys[idx]).backward()
            opt.step()
    return model.eval()


def docs_lm(folder: str | os.PathLike[str], steps: int = 300, seed: int = 0) -> Path:
    """A 2-layer Llama-shaped causal LM (hidden size 64, a 512-token byte-pair vocabulary) trained for ``steps``
    steps of 8 windows of 128 tokens on :func:`docs_text`'s training part, saved with its tokenizer to ``folder``
    (a Hugging Face folder ``export()`` and ``AutoTokenizer`` read). About half a minute on two cores."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    train, _held = docs_text()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([train], trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                                pad_token="<|endoftext|>")
    ids = torch.tensor(fast(train)["input_ids"])
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=len(fast), hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                      eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                                      bos_token_id=fast.eos_token_id, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - 128, (8,), generator=gen)
        batch = torch.stack([ids[s:s + 128] for s in starts])
        opt.zero_grad()
        model(input_ids=batch, labels=batch).loss.backward()
        opt.step()
    out = Path(folder)
    model.eval().save_pretrained(out)
    fast.save_pretrained(out)
    return out
