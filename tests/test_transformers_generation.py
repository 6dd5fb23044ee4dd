"""Generation that speaks transformers: ``onnx_nb.to_transformers`` (transformers' own ``generate()`` and
``pipeline()`` on the exported files), the model's generation config and beam search in ``onnx_nb.generate``,
task inference from transformers' auto mappings, and beam search in generation parity. Ten tiny families, each
with the generation config its real checkpoints carry (tests/tiny_models.py ``GENERATIVE``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import onnx_nb
import tiny_models
from onnx_nb.errors import InvalidArgumentError

FAMILIES = ["marian", "mbart", "m2m_100", "pegasus", "t5", "bart", "whisper", "gpt2", "llama", "qwen2"]


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, onnx_nb.ExportResult]:
    folder = tmp_path_factory.mktemp("generative")
    return {name: onnx_nb.export(tiny_models.build_generative(name), out=folder / name / "m.onnx", progress=False)
            for name in FAMILIES}


def _inputs(model: object) -> tuple[dict[str, torch.Tensor], list[list[int]] | dict[str, np.ndarray]]:
    """A batch of two inputs of different lengths, as transformers takes it and as onnx_nb.generate takes it."""
    config = model.config  # type: ignore[attr-defined]
    if config.model_type == "whisper":
        features = np.random.default_rng(0).standard_normal((2, config.num_mel_bins, 60)).astype(np.float32)
        return {"input_features": torch.from_numpy(features)}, {"input_features": features}
    rows = [[5, 6, 7, 8, 9], [10, 11, 12, 13]]
    if config.is_encoder_decoder:  # right-padded for the encoder
        ids, mask = [[5, 6, 7, 8, 9], [10, 11, 12, 13, 0]], [[1] * 5, [1, 1, 1, 1, 0]]
    else:  # left-padded for a decoder
        ids, mask = [[5, 6, 7, 8, 9], [0, 10, 11, 12, 13]], [[1] * 5, [0, 1, 1, 1, 1]]
    return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}, rows


def _new_tokens(sequences: torch.Tensor, model: object, width: int, eos: set[int]) -> list[list[int]]:
    """transformers' sequences as onnx_nb.generate gives them: the new tokens, cut after the first EOS."""
    config = model.config  # type: ignore[attr-defined]
    skip = 0 if config.model_type == "whisper" else 1 if config.is_encoder_decoder else width
    out = []
    for row in sequences.tolist():
        new = row[skip:]
        ends = [i for i, t in enumerate(new) if t in eos]
        out.append(new[:ends[0] + 1] if ends else new)
    return out


@pytest.mark.lower_bounds
@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_and_beams_equal_pytorch_with_the_models_own_config(exports: dict[str, onnx_nb.ExportResult],
                                                                     name: str) -> None:
    """transformers' generate() on the files (to_transformers) and onnx_nb.generate give PyTorch's generate()
    tokens, greedy and with 4 beams, under each model's own generation config (forced BOS/EOS, bad words,
    no-repeat n-grams, repetition penalty, minimum lengths, suppressed tokens, length penalty, early stopping)."""
    result = exports[name]
    model = result.source.model
    wrapped = onnx_nb.to_transformers(result)
    assert isinstance(wrapped, transformers.PreTrainedModel) and isinstance(wrapped, transformers.GenerationMixin)
    assert wrapped.generation_config.to_dict() == model.generation_config.to_dict()
    assert "ONNX Runtime" in repr(wrapped) and wrapped.config is not model.config
    torch_inputs, ours = _inputs(model)
    eos = {model.generation_config.eos_token_id}
    width = int(torch_inputs["input_ids"].shape[1]) if "input_ids" in torch_inputs else 0
    lengths = []
    for beams in (1, 4):
        with torch.no_grad():
            want = model.generate(**torch_inputs, max_new_tokens=10, num_beams=beams)
            got = wrapped.generate(**torch_inputs, max_new_tokens=10, num_beams=beams)
        assert got.shape == want.shape and torch.equal(got, want), (beams, want, got)
        mine = onnx_nb.generate(result, ours, max_new_tokens=10, num_beams=beams)
        assert mine.tokens == _new_tokens(want, model, width, eos), (beams, mine.tokens, want)
        assert mine.prefill_ms > 0 and len(mine.decode_ms) >= max(len(t) for t in mine.tokens) - 1
        lengths += [len(t) for t in mine.tokens]
    assert max(lengths) > 1, "a model that stops at once checks nothing"


@pytest.mark.parametrize("name", ["marian", "whisper", "llama"])
def test_io_binding_keeps_the_cache_as_ortvalues(exports: dict[str, onnx_nb.ExportResult], name: str) -> None:
    """With I/O binding (the default on GPU providers; asked for here on the CPU) the caches stay ONNX Runtime's
    OrtValues between steps, reordered per beam, and the 4-beam tokens are still PyTorch's."""
    import onnxruntime as ort

    result = exports[name]
    model, wrapped = result.source.model, onnx_nb.to_transformers(result, io_binding=True)
    torch_inputs, _ = _inputs(model)
    with torch.no_grad():
        want = model.generate(**torch_inputs, max_new_tokens=6, num_beams=4)
        got = wrapped.generate(**torch_inputs, max_new_tokens=6, num_beams=4)
        out = wrapped(**torch_inputs, decoder_input_ids=torch.tensor([[1], [1]])) if model.config.is_encoder_decoder \
            else wrapped(**torch_inputs)
    assert torch.equal(got, want), (want, got)
    pasts = [v for k, v in out.cache.state.items() if k.startswith("past_key_values.")]
    assert pasts and all(isinstance(v, ort.OrtValue) for v in pasts)


def test_num_return_sequences_streamers_and_stopping(exports: dict[str, onnx_nb.ExportResult]) -> None:
    """Beam search returning several beams, a streamer and stopping criteria: transformers' own, on the files;
    the cache is reordered per beam (a wrong reorder would change the tokens)."""
    result = exports["llama"]
    model, wrapped = result.source.model, onnx_nb.to_transformers(result)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    settings = {"max_new_tokens": 8, "num_beams": 3, "num_return_sequences": 3, "no_repeat_ngram_size": 0,
                "length_penalty": 0.5, "repetition_penalty": 1.5}
    with torch.no_grad():
        want, got = model.generate(ids, **settings), wrapped.generate(ids, **settings)
    assert torch.equal(got, want) and got.shape[0] == 3
    mine = onnx_nb.generate(result, [[5, 6, 7, 8, 9]], **settings)
    assert len(mine.tokens) == 3 and mine.tokens[0] == [t for t in want[0, 5:].tolist()][:len(mine.tokens[0])]

    seen: list[list[int]] = []
    threads: list[int] = []  # torch's threads inside generate() (one: the cores are ONNX Runtime's) and after it

    class Collect(transformers.generation.BaseStreamer):
        def put(self, value: torch.Tensor) -> None:
            seen.append(value.flatten().tolist())
            threads.append(torch.get_num_threads())

        def end(self) -> None:
            seen.append([])

    stop = transformers.StoppingCriteriaList([transformers.MaxLengthCriteria(max_length=8)])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.no_grad():
            out = wrapped.generate(ids, max_new_tokens=20, num_beams=1, streamer=Collect(), stopping_criteria=stop)
        assert set(threads) == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert out.shape[1] == 8 and seen[0] == [5, 6, 7, 8, 9] and len(seen) == 1 + 3 + 1


def test_settings_the_loop_lacks_run_in_transformers(exports: dict[str, onnx_nb.ExportResult]) -> None:
    """A generation-config setting onnx-nb's own loop does not run (here ``sequence_bias``) sends the call through
    transformers' generate() over the files, without the user asking: PyTorch's tokens under that setting."""
    result = exports["gpt2"]
    with pytest.raises(InvalidArgumentError, match="unknown setting"):
        onnx_nb.generate(result, [[5, 6]], num_beam=4)
    with pytest.raises(InvalidArgumentError, match="settles them at the end"):
        onnx_nb.generate(result, [[5, 6]], num_beams=2, stream=print)
    model = tiny_models.build_generative("gpt2")
    prompt = torch.tensor([[5, 6]])
    with torch.no_grad():
        plain = model.generate(prompt, max_new_tokens=4, do_sample=False)[0, 2:].tolist()
        model.generation_config.sequence_bias = {(plain[0],): -100.0}
        biased = model.generate(prompt, max_new_tokens=4, do_sample=False)[0, 2:].tolist()
    assert biased[0] != plain[0]
    configured = onnx_nb.export(model, out=Path(result.path).parent / "biased.onnx", progress=False)
    got = onnx_nb.generate(configured, [[5, 6]], max_new_tokens=4)
    assert got.tokens == [biased[:len(got.tokens[0])]] and plain[0] not in got.tokens[0][:1]
    with pytest.raises(InvalidArgumentError, match=r"sequence_bias=.*runs in transformers' generate\(\)"):
        onnx_nb.generate(configured, [[5, 6]], max_new_tokens=2, stream=print)
    with pytest.raises(InvalidArgumentError, match="config="):
        onnx_nb.to_transformers(result.path)  # a bare file: its config must be named
    bare = onnx_nb.to_transformers(result.path, config=result.source.model.config)
    assert bare.generate(torch.tensor([[5, 6]]), max_new_tokens=3).shape == (1, 5)


def test_task_inference_reads_transformers_mappings(tmp_path: Path) -> None:
    """A MarianMTModel saved with save_pretrained (no *ForConditionalGeneration in its name) exports as a
    sequence-to-sequence model with its caches, and generate() runs it."""
    from onnx_nb.kinds.hf.tasks import generative_task, infer_task

    assert generative_task("MarianMTModel") == "text2text-generation"
    assert generative_task("WhisperForConditionalGeneration") == "automatic-speech-recognition"
    assert generative_task("Qwen3MoeForCausalLM") == "text-generation"
    assert generative_task("BertForSequenceClassification") is None
    model = tiny_models.build_generative("marian")
    model.save_pretrained(tmp_path / "marian")
    assert infer_task(model.config) == "text2text-generation"
    result = onnx_nb.export(tmp_path / "marian", out=tmp_path / "m.onnx", progress=False)
    assert result and (tmp_path / "m.encoder.onnx").exists(), repr(result)
    assert result.source.task == "text2text-generation"
    with torch.no_grad():
        want = model.generate(torch.tensor([[5, 6, 7, 2]]), max_new_tokens=6)
    got = onnx_nb.generate(result, [[5, 6, 7, 2]], max_new_tokens=6)  # 4 beams: the folder's generation config
    assert got.tokens == [want[0, 1:].tolist()[:len(got.tokens[0])]] and len(got.tokens[0]) >= 1


def test_beam_parity_tells_near_ties_from_divergences(exports: dict[str, onnx_nb.ExportResult]) -> None:
    report = onnx_nb.check_parity(exports["bart"], progress=False)
    beams = [c for c in report.generation if c.kind.startswith("beam")]
    assert len(beams) == 12 and all(c.verdict in ("identical", "near-tie") for c in beams), repr(report)
    assert "4 kept beams" in report.notes[-1] or any("kept" in n for n in report.notes)


def test_text_generation_pipeline(minilm_dir: Path, tmp_path: Path) -> None:
    """transformers' text-generation pipeline on the ONNX file gives PyTorch's outputs (a real tokenizer)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    tokenizer.model_input_names = ["input_ids", "attention_mask"]  # GPT-2 would add token type embeddings
    model = tiny_models.build_generative("gpt2", vocab_size=len(tokenizer), eos_token_id=102, pad_token_id=0)
    model.generation_config.eos_token_id = 102
    result = onnx_nb.export(model, out=tmp_path / "g.onnx", progress=False)
    texts = ["the cat sat on the mat", "hello"]
    runs = []
    for candidate in (model, onnx_nb.to_transformers(result)):
        pipe = transformers.pipeline("text-generation", model=candidate, tokenizer=tokenizer)
        torch.manual_seed(0)  # the pipeline samples by default (temperature 0.7): the same draws for both
        runs.append((pipe(texts, max_new_tokens=6, do_sample=False, num_beams=2), pipe(texts, max_new_tokens=6)))
    (want, want_sampled), (got, got_sampled) = runs
    assert got_sampled == want_sampled
    assert got == want and got[0][0]["generated_text"].startswith("the cat sat")
    with pytest.raises(InvalidArgumentError, match="takes no token_type_ids"):
        onnx_nb.to_transformers(result)(input_ids=torch.tensor([[5, 6]]), token_type_ids=torch.tensor([[0, 0]]))


def test_speech_recognition_pipeline_with_chunking(tmp_path: Path) -> None:
    """transformers' automatic-speech-recognition pipeline on Whisper's two files, short audio and long audio in
    chunks (Whisper's own generate(): its prompt tokens, suppressed tokens), equal to PyTorch's."""
    vocab = {chr(ord("a") + i % 26) * (1 + i // 26): i for i in range(90)}
    tokenizer = transformers.WhisperTokenizer(vocab=vocab, merges=[], unk_token="a", pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": [
        "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]})
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|notimestamps|>"]) == [90, 94]
    features = transformers.WhisperFeatureExtractor(feature_size=16, chunk_length=1)  # 1-second windows
    model = tiny_models.build_generative("whisper", max_source_positions=50, eos_token_id=90, pad_token_id=90,
                                         bos_token_id=90, decoder_start_token_id=91)
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=91, eos_token_id=90, pad_token_id=90, no_timestamps_token_id=94,
        suppress_tokens=[5, 7], max_length=40)
    result = onnx_nb.export(model, out=tmp_path / "w.onnx", progress=False)
    audio = np.random.default_rng(0).standard_normal(16000 * 3).astype(np.float32) * 0.1
    outputs = []
    for candidate in (model, onnx_nb.to_transformers(result)):
        pipe = transformers.pipeline("automatic-speech-recognition", model=candidate, tokenizer=tokenizer,
                                     feature_extractor=features)
        short = pipe({"raw": audio[:8000], "sampling_rate": 16000}, generate_kwargs={"max_new_tokens": 6})
        long = pipe({"raw": audio, "sampling_rate": 16000}, chunk_length_s=1, batch_size=2,
                    generate_kwargs={"max_new_tokens": 6}, ignore_warning=True)
        outputs.append((short, long))
    assert outputs[1] == outputs[0], outputs
    assert len(outputs[1][1]["text"]) > len(outputs[1][0]["text"]) > 0  # three chunks say more than half of one
