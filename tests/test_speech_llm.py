"""Speech LLMs as one kind (kinds/speech_llm): a tiny random Audio Flamingo 3 (a Whisper-like audio tower whose rows,
masked by each clip's length, fill a Qwen2 decoder's audio tokens) exported as audio, embed and decoder files, the
chain checked against the model's forward, then fed what its processor gives for clips of other lengths than the
export's: onnx_nb.generate (two clips as one batch), to_transformers' generate() with beams, generation parity, an
INT4 decoder judged on the chain, and a prompt whose audio tokens do not match its audio refused. A Qwen2-Audio, whose
forward computes its audio rows itself (no get_audio_features), the same way; a Granite Speech, whose conformer attends
within blocks of frames, as the speech LLM sweep runs it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import onnx_nb

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
TEXT = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 512}
AUDIO = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_mel_bins": 128}
TOKEN = 260
NEW = 8


@pytest.fixture(scope="module")
def flamingo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.AudioFlamingo3Config(text_config=TEXT, audio_config=AUDIO, audio_token_id=TOKEN)
    model = transformers.AudioFlamingo3ForConditionalGeneration(config).eval()
    out = tmp_path_factory.mktemp("speech") / "flamingo"
    return model, onnx_nb.export(model, out=out, progress=False)


def _batch(model: Any, result: Any, clips: tuple[float, ...]) -> None:
    """Clips of ``clips`` seconds as one batch of prompts of different lengths: each prompt's tokens as PyTorch gives
    them for it alone, and the clips change them."""
    from onnx_nb.steps.generate.runners import left_pad

    cases = [_clip(model, seconds, seed) for seed, seconds in enumerate(clips, 5)]
    want = [_torch(model, ids, audio) for ids, audio in cases]
    assert want[0] != want[1]  # the audio changes the tokens
    ids, mask = left_pad([c[0][0].tolist() for c in cases], 0)
    inputs = {"input_ids": ids, "attention_mask": mask,
              **{k: np.concatenate([c[1][k].numpy() for c in cases]) for k in cases[0][1]}}
    got = onnx_nb.generate(result, inputs, max_new_tokens=NEW)
    assert [list(t)[:NEW] for t in got.tokens] == want


def _clip(model: Any, seconds: float, seed: int) -> tuple[Any, dict[str, Any]]:
    """A prompt with the clip's count of audio tokens, and the clip as Whisper's feature extractor gives it."""
    from onnx_nb.kinds.speech_llm.parts import audio_sample, features_of
    from onnx_nb.kinds.vlm.prompts import prompt_sample

    audio = audio_sample(model, 1, seed=seed, seconds=seconds)
    return prompt_sample(TOKEN, features_of(model, audio).shape[0], 1, 300, seed=seed), audio


def _torch(model: Any, ids: Any, audio: dict[str, Any], **how: Any) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **audio, max_new_tokens=NEW,
                             do_sample=False, **how)
    return out[0, ids.shape[1]:].tolist()


def test_three_files_checked_as_a_chain(flamingo: tuple[Any, Any]) -> None:
    _, result = flamingo
    assert isinstance(result, onnx_nb.SpeechLlmExport) and result.status == "verified"
    assert sorted(p.name for p in result.folder.glob("*.onnx")) == ["audio.onnx", "decoder.onnx", "embed.onnx"]
    assert result.chain["passed"] and "audio clip" in result.chain["summary"]
    audio = result.parts["audio"]
    assert [i.name for i in audio.inputs] == ["input_features", "input_features_mask"]
    assert audio.inputs[0].shape[0] == "clips"  # checked with two clips of other lengths than the sample's
    assert "chained against PyTorch" in repr(result)


def test_clips_of_other_lengths_give_pytorchs_tokens(flamingo: tuple[Any, Any]) -> None:
    """Two clips (3.1 s and 1.4 s: neither the export's sample nor its check) in one batch."""
    _batch(*flamingo, (3.1, 1.4))


def test_a_family_computing_its_audio_rows_in_forward(tmp_path_factory: pytest.TempPathFactory) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen2AudioConfig(text_config=TEXT, audio_config=AUDIO, audio_token_id=TOKEN)
    model = transformers.Qwen2AudioForConditionalGeneration(config).eval()
    result = onnx_nb.export(model, out=tmp_path_factory.mktemp("speech") / "qwen2_audio", progress=False)
    assert result.status == "verified" and [i.name for i in result.parts["audio"].inputs] == [
        "input_features", "feature_attention_mask"]
    _batch(model, result, (2.6, 0.9))


def test_transformers_generate_with_beams_and_parity(flamingo: tuple[Any, Any]) -> None:
    import torch

    model, result = flamingo
    ids, audio = _clip(model, 2.7, 7)
    hf = onnx_nb.to_transformers(result)
    for how in ({}, {"num_beams": 3}):
        with torch.no_grad():
            out = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **audio, max_new_tokens=NEW,
                              do_sample=False, **how)
        assert out[0, ids.shape[1]:].tolist() == _torch(model, ids, audio, **how), how
    report = onnx_nb.check_parity(result)
    assert report.passed and "audio" in str(report.to_dict())


def test_an_int4_decoder_is_judged_on_the_chain(flamingo: tuple[Any, Any]) -> None:
    _, result = flamingo
    variant = onnx_nb.quantize(result.parts["decoder"], method="int4")
    assert variant.path.parent == result.folder and variant.parity is not None
    assert "audio" in str(variant.parity.to_dict())  # generation parity ran through the audio and embed files


def test_audio_tokens_that_do_not_match_the_audio_are_refused(flamingo: tuple[Any, Any]) -> None:
    model, result = flamingo
    ids, audio = _clip(model, 1.4, 6)
    short = np.delete(ids.numpy(), int(np.flatnonzero(ids.numpy()[0] == TOKEN)[0]), axis=1)
    with pytest.raises(onnx_nb.errors.InvalidArgumentError, match="audio tokens"):
        onnx_nb.generate(result, {"input_ids": short, **{k: v.numpy() for k, v in audio.items()}},
                         max_new_tokens=2)


def test_attention_within_blocks_of_frames_takes_clips_of_any_length(tmp_path: Any) -> None:
    """Granite Speech, as the speech LLM sweep runs it: its conformer attends within blocks of ``context_size`` frames
    (the last padded and masked in place behind a branch on the length) and its projector pools windows of frames
    into queries; their branch-free forms (patches/blocks.py) give dynamo one audio file for every clip length, and
    two clips of lengths other than the export's give PyTorch's tokens."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import speech_llm_sweep

    row = speech_llm_sweep.one("granite_speech", "GraniteSpeechForConditionalGeneration", tmp_path / "model")
    assert row["export"] == "ok" and row["audio_file"] == "verified (dynamo)", row
    assert row["generate"] == "same" and row["audio_changes_tokens"], row


def test_windows_of_a_packed_audio_sequence_take_clips_of_any_length(tmp_path: Any) -> None:
    """Qwen3-ASR, as the speech LLM sweep runs it: its audio encoder packs the clips' frames into one sequence and
    attends within windows whose bounds it computes in Python (``.item()``, a loop over the clips) and splits at; the
    bounds as tensors and one masked attention (patches/audio_windows.py) give dynamo an audio file that takes clips
    of other lengths (its file failed at them: "Cannot split using values in 'split' attribute"), generating
    PyTorch's tokens. Eagerly, the patched encoder is the model's for one clip, two, and a clip of two windows."""
    import sys
    from pathlib import Path

    import torch
    import transformers

    from onnx_nb.kinds.speech_llm.parts import audio_sample
    from onnx_nb.steps.export.patches.audio_windows import traceable_windows, windowed_attention

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import speech_llm_sweep

    row = speech_llm_sweep.one("qwen3_asr", "Qwen3ASRForConditionalGeneration", tmp_path / "model")
    assert row["export"] == "ok" and row["audio_file"] == "verified (dynamo)", row
    assert row["generate"] == "same" and row["audio_changes_tokens"], row
    model = transformers.Qwen3ASRForConditionalGeneration.from_pretrained(tmp_path / "model").eval()
    tower = model.model.audio_tower
    clips = [audio_sample(model, 1, seed=i, seconds=s) for i, s in enumerate((9.0, 1.4))]
    both = {k: torch.cat([c[k] for c in clips]) for k in clips[0]}  # the processor pads every clip to 30 s
    for given in (clips[0], clips[1], both):
        with torch.no_grad():
            own = tower(**given).last_hidden_state
            with traceable_windows(model) as names:
                attention = tower.layers[0].self_attn
                assert "model.audio_tower.layers.0.self_attn" in names
                assert attention.forward.__func__ is windowed_attention
                patched = tower(**given).last_hidden_state
        assert patched.shape == own.shape and torch.allclose(patched, own, atol=1e-5)
    assert "forward" not in vars(attention)
    source = sys.modules[type(tower).__module__]  # the model's own bounds: the 9 s clip spans several windows
    mask, chunk = clips[0]["input_features_mask"], 2 * tower.n_window
    bounds = source.get_audio_cu_seqlens(mask.view(1, -1, chunk).sum(-1).reshape(-1), mask.sum(-1),
                                         tower.n_window_infer, tower.n_window)
    assert len(bounds) > 2, bounds


def test_blocks_of_frames_branch_free_as_the_model_computes_them() -> None:
    """The branch-free block attention and window projector (patches/blocks.py) against Granite Speech's own forwards,
    eagerly: one block with padding, one exact block, several blocks with padding, two clips at once."""
    import sys
    from pathlib import Path

    import torch
    import transformers

    from onnx_nb.steps.export.patches.blocks import block_attention, traceable_blocks, window_projector

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import registry_sweep
    import speech_llm_sweep

    config = speech_llm_sweep.tiny_config("granite_speech", registry_sweep.TINY)
    torch.manual_seed(0)
    model = transformers.GraniteSpeechForConditionalGeneration(config).eval()
    size = config.encoder_config.context_size
    for frames in (size - 53, size, 2 * size + 31):
        features = torch.randn(2, frames, config.encoder_config.input_dim)
        with torch.no_grad():
            own = model.model.get_audio_features(features).pooler_output
            with traceable_blocks(model) as names:
                assert len(names) == config.encoder_config.num_layers + 1, names
                assert model.model.encoder.layers[0].attn.forward.__func__ is block_attention
                assert model.model.projector.forward.__func__ is window_projector
                assert torch.allclose(model.model.get_audio_features(features).pooler_output, own, atol=1e-5)
    assert "forward" not in vars(model.model.projector)


def test_windows_of_one_long_audio_keep_their_place_in_it(tmp_path: Any) -> None:
    """MusicFlamingo: a processor cuts a long audio into 30-second windows (one clip per row) and the model rotates
    each row by its window's time, which it reads from the prompt's run of audio tokens. The audio file takes each
    clip's window (windows.py) and the runner counts it from the prompt as the model does: one prompt whose audio is
    two windows generates PyTorch's tokens, through generate() and to_transformers(); eagerly, the features with the
    windows given are the model's own, and a second window's rows are not a first one's."""
    import torch
    import transformers

    from onnx_nb.kinds.speech_llm.parts import AudioFeatures, audio_sample, features_of
    from onnx_nb.kinds.vlm.prompts import prompt_sample

    torch.manual_seed(0)
    config = transformers.MusicFlamingoConfig(text_config=TEXT, audio_token_id=TOKEN,
                                              audio_config={**AUDIO, "model_type": "musicflamingo_encoder"})
    model = transformers.MusicFlamingoForConditionalGeneration(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "music", progress=False)
    assert result.status == "verified" and [i.name for i in result.parts["audio"].inputs] == [
        "input_features", "input_features_mask", "window_index"]
    audio = audio_sample(model, seed=4, seconds=(30.0, 6.5))  # a 36.5 s audio: a full window, then 6.5 s
    rows = features_of(model, audio).shape[0]
    ids = prompt_sample(TOKEN, rows, 1, 300, seed=4)  # one run of audio tokens: one audio
    with torch.no_grad():
        own = model.get_audio_features(**audio, input_ids=ids).pooler_output
        given = AudioFeatures(model)(**audio, window_index=torch.tensor([0, 1]))["audio_features"]
        first = AudioFeatures(model)(**audio, window_index=torch.tensor([0, 0]))["audio_features"]
    assert torch.allclose(given, own, atol=1e-6) and not torch.allclose(first, own, atol=1e-3)
    # the runner's count, in ONNX Runtime: one audio of two windows, then the same clips as two audios
    import onnxruntime as ort

    from onnx_nb.kinds.speech_llm.parts import per_clip

    session = ort.InferenceSession(str(result.parts["audio"].path), providers=["CPUExecutionProvider"])
    clips = {k: v.numpy() for k, v in audio.items()}
    each = [features_of(model, {k: v[i:i + 1] for k, v in audio.items()}).shape[0] for i in range(2)]
    two = torch.tensor([[5] + [TOKEN] * each[0] + [6, 7] + [TOKEN] * each[1] + [8]])
    for prompt in (ids, two):
        with torch.no_grad():
            theirs = model.get_audio_features(**audio, input_ids=prompt).pooler_output.numpy()
        assert np.abs(per_clip(session, clips, prompt.numpy(), TOKEN) - theirs).max() < 1e-5
    want = _torch(model, ids, audio)
    got = onnx_nb.generate(result, {"input_ids": ids.numpy(), **{k: v.numpy() for k, v in audio.items()}},
                           max_new_tokens=NEW)
    assert list(got.tokens[0])[:NEW] == want
    with torch.no_grad():
        out = onnx_nb.to_transformers(result).generate(input_ids=ids, attention_mask=torch.ones_like(ids), **audio,
                                                       max_new_tokens=NEW, do_sample=False)
    assert out[0, ids.shape[1]:].tolist() == want
