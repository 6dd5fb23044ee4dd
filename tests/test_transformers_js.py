"""onnx_nb.to_transformers_js: the folder transformers.js loads, written from an export and its variants and checked
by transformers.js itself (npm @huggingface/transformers under Node.js, from js/node_modules) against PyTorch."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any

import onnx
import pytest

import onnx_nb
from helpers import perturb
from onnx_nb.runtime import browser, transformers_js

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="transformers.js runs under Node.js")

LOCKED = json.loads((Path(__file__).resolve().parents[1] / "js" / "package.json").read_text())["devDependencies"][
    "@huggingface/transformers"]


@pytest.mark.skipif(bool(browser.unavailable_reason()) and not os.environ.get("CI"),
                    reason=browser.unavailable_reason() or "browser backend available")
def test_minilm_folder_gives_pytorchs_embeddings_in_transformers_js_in_chromium_at_fp32_and_q8(
        minilm_export: Any, tmp_path: Path) -> None:
    """transformers.js's browser build in a headless Chromium page, on the ONNX Runtime Web build onnx-nb ships."""
    int8 = onnx_nb.quantize(minilm_export, method="dynamic", exclude=[], out=tmp_path / "int8.onnx")
    folder = tmp_path / "web" / "minilm"
    bundle = onnx_nb.to_transformers_js([minilm_export, int8], folder, runtime="browser", progress=False)
    assert bundle, repr(bundle)
    assert all(c.where.startswith("HeadlessChrome/") and c.where.endswith(", WASM in headless Chromium")
               for c in bundle.checks), [c.where for c in bundle.checks]
    assert bundle.transformers_js == LOCKED and bundle.task == "feature-extraction"
    names = {p.relative_to(folder).as_posix() for p in bundle.files}
    assert {"config.json", "tokenizer.json", "onnx/model.onnx", "onnx/model_quantized.onnx"} <= names, names
    fp32, q8 = bundle.checks
    assert (fp32.dtype, q8.dtype, fp32.precision, q8.precision) == ("fp32", "q8", "fp32", "int8")
    # the pipeline's mean-pooled, normalized sentence embeddings against PyTorch's
    assert fp32.figures["pooled_cosine"] >= 0.99999 and fp32.figures["last_hidden_state"]["max_abs"] < 1e-4
    assert q8.figures["pooled_cosine"] >= 0.99, q8.figures  # outlier channels in float (0.9848 without)
    assert "transformers.js" in bundle._repr_html_() and "pooled embeddings cos" in repr(bundle)
    json.dumps(bundle.to_dict())

    # nothing overwritten unasked; overwrite=True replaces the folder whole
    with pytest.raises(onnx_nb.OutputExistsError, match="overwrite=True"):
        onnx_nb.to_transformers_js(minilm_export, folder, check=False, progress=False)
    again = onnx_nb.to_transformers_js(minilm_export, folder, overwrite=True, check=False, progress=False)
    assert not (folder / "onnx" / "model_quantized.onnx").exists() and again.unchecked == "check=False"
    assert not again and [p.name for p in tmp_path.joinpath("web").iterdir()] == ["minilm"]  # no staging left

    # a file that is not the model fails transformers.js's check (one weight of layer 2 perturbed)
    bad = tmp_path / "bad.onnx"
    perturb(minilm_export.path, bad, "encoder.layer.2.attention.self.query")
    broken = onnx_nb.to_transformers_js(dataclasses.replace(minilm_export, path=bad, files=[bad]),
                                        tmp_path / "web" / "bad", progress=False)
    assert not broken and broken.checks[0].status == "fail" and broken.checks[0].figures["pooled_cosine"] < 0.999


def _tiny_llama(folder: Path) -> Path:
    """A tiny random Llama with a byte-level BPE tokenizer trained on a short text (transformers.js reads its
    tokenizer.json), saved to ``folder``."""
    import torch
    import transformers

    fast = _bpe_tokenizer()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      eos_token_id=0, pad_token_id=0, bos_token_id=0)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def _bpe_tokenizer() -> Any:
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog " * 20],
                            trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                                pad_token="<|endoftext|>")


def test_a_multi_query_decoder_takes_keys_and_values_fused_as_transformers_js_feeds_them(tmp_path: Path) -> None:
    """GPTBigCode (one key/value head): transformers.js feeds past_key_values.{i}.key_value [batch, sequence,
    2 x head size]; the folder's file takes and returns that and generates PyTorch's tokens."""
    import torch
    import transformers

    fast = _bpe_tokenizer()
    torch.manual_seed(0)
    model = transformers.GPTBigCodeForCausalLM(transformers.GPTBigCodeConfig(
        vocab_size=len(fast), n_embd=32, n_layer=2, n_head=4, n_positions=64, multi_query=True, bos_token_id=0,
        eos_token_id=0)).eval()
    model.save_pretrained(tmp_path / "bigcode")
    fast.save_pretrained(tmp_path / "bigcode")
    result = onnx_nb.export(str(tmp_path / "bigcode"), out=tmp_path / "bigcode.onnx", progress=False)
    bundle = onnx_nb.to_transformers_js(result, tmp_path / "web", texts=["the quick brown", "lazy"], runtime="node",
                                        progress=False)
    assert bundle and bundle.checks[0].figures == {"prompts": 2, "tokens_equal": 2}, repr(bundle)
    graph = onnx.load(str(tmp_path / "web" / "onnx" / "model.onnx")).graph
    fused = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
             for v in [*graph.input, *graph.output] if "key_value" in v.name}
    assert fused["past_key_values.1.key_value"] == ["batch_size", "past_sequence_length", 16]
    assert fused["present.1.key_value"] == ["batch_size", "total_sequence_length", 16]
    assert not [v.name for v in graph.input if v.name.endswith((".key", ".value"))]


@pytest.mark.parametrize("model_type", ["granitemoehybrid", "olmo_hybrid"])
def test_a_state_keeping_decoder_takes_the_whole_prompt_with_its_states_named_as_transformers_js_feeds_them(
        tmp_path: Path, model_type: str) -> None:
    """onnx-nb's file of a model that keeps a state per layer takes one token per step; transformers.js feeds the
    whole prompt first. The folder's file runs the graph once per token inside a Loop and names the states as
    transformers.js 4.3 does for the architecture: Granite 4's Mamba layers past_conv.{i} / past_ssm.{i} (its layer
    kinds written "mamba" / "attention" in config.json), OLMo-Hybrid's linear attention past_recurrent.{i} and its
    convolution state in three parts (past_conv.{i}.query/.key/.value). Its greedy tokens are PyTorch's."""
    import sys

    import torch
    import transformers

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import registry_sweep

    fast = _bpe_tokenizer()
    config = registry_sweep.tiny_config(model_type)
    config.vocab_size, config.eos_token_id, config.pad_token_id, config.bos_token_id = len(fast), 0, 0, 0
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # weights spread enough that the greedy tokens change from step to step
        for name, p in model.named_parameters():
            if name.endswith("proj.weight") and p.dim() == 2:
                p.normal_(0, 0.2)
    model.save_pretrained(tmp_path / "model")
    fast.save_pretrained(tmp_path / "model")
    result = onnx_nb.export(str(tmp_path / "model"), out=tmp_path / "model.onnx", progress=False)
    graph = onnx.load(str(tmp_path / "model.onnx")).graph
    assert [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim][1:] == [1]  # one token per step

    bundle = onnx_nb.to_transformers_js(result, tmp_path / "web", texts=["the quick brown fox jumps", "lazy"],
                                        max_new_tokens=8, runtime="node", progress=False)
    assert bundle and bundle.checks[0].figures == {"prompts": 2, "tokens_equal": 2}, repr(bundle)
    web = onnx.load(str(tmp_path / "web" / "onnx" / "model.onnx")).graph
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in web.input}
    assert dims["input_ids"] == ["batch_size", "sequence_length"] and [n.op_type for n in web.node].count("Loop") == 1
    assert dims["past_key_values.1.key"][0] == "batch_size"
    settings = json.loads((tmp_path / "web" / "config.json").read_text())
    if model_type == "granitemoehybrid":
        assert {"past_conv.0", "past_ssm.0"} <= set(dims) and settings["layer_types"] == ["mamba", "attention"]
    else:
        assert {"past_conv.0.query", "past_conv.0.key", "past_conv.0.value", "past_recurrent.0"} <= set(dims)
        assert "present_conv.0.value" in {o.name for o in web.output}
    assert not [n for n in dims if ".conv." in n and n.startswith("past_key_values")]


def test_an_image_classifier_folder_gives_pytorchs_logits_from_transformers_js_own_processor(tmp_path: Path) -> None:
    """A tiny ViT (image-classification) with its ViTImageProcessor: the folder holds preprocessor_config.json,
    transformers.js's processor prepares the images, PyTorch's model takes the same pixel_values, fp32 and q8 agree
    at their tolerances; at the processor's own size its pixel values are transformers' (a larger image is resized
    by each library its own way: the gap is reported, the model judged on transformers.js's pixels)."""
    import numpy as np
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=37, num_labels=5)
    transformers.ViTForImageClassification(config).eval().save_pretrained(tmp_path / "vit")
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "vit")
    result = onnx_nb.export(str(tmp_path / "vit"), out=tmp_path / "vit.onnx", progress=False)
    int8 = onnx_nb.quantize(result, out=tmp_path / "vit.int8.onnx")
    bundle = onnx_nb.to_transformers_js([result, int8], tmp_path / "web", runtime="node", progress=False)
    assert bundle and bundle.task == "image-classification" and bundle.images == ["32x32 RGB"] * 2, repr(bundle)
    assert (tmp_path / "web" / "preprocessor_config.json").is_file()
    fp32, q8 = bundle.checks
    assert fp32.figures["logits"]["max_abs"] < 1e-5 and q8.figures["logits"]["cosine"] > 0.99
    assert fp32.figures["processor_max_abs"] < 1e-6, fp32.measure

    photo = np.random.default_rng(1).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    resized = onnx_nb.to_transformers_js(result, tmp_path / "web64", images=[photo], runtime="node", progress=False)
    assert resized and resized.images == ["64x48 RGB"] and "processor_max_abs" in resized.checks[0].figures
    with pytest.raises(onnx_nb.InvalidArgumentError, match="uint8"):
        onnx_nb.to_transformers_js(result, tmp_path / "bad", images=[photo.astype(np.float32)], progress=False)
    assert not (tmp_path / "bad").exists()


def _image_to_text(folder: Path, decoder: str) -> Path:
    """A tiny ViT encoder under a TrOCR or GPT-2 text decoder (a VisionEncoderDecoderModel) with a TrOCR processor
    (ViT's image processor and a byte-level BPE tokenizer), saved to ``folder``; the decoder's weights spread so that
    its greedy tokens change from step to step."""
    import torch
    import transformers

    fast = _bpe_tokenizer()
    torch.manual_seed(0)
    vision = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                    intermediate_size=37, image_size=32, patch_size=8)
    text = transformers.TrOCRConfig(vocab_size=len(fast), d_model=32, decoder_layers=2, decoder_attention_heads=2,
                                    decoder_ffn_dim=37, max_position_embeddings=64) if decoder == "trocr" else \
        transformers.GPT2Config(vocab_size=len(fast), n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                add_cross_attention=True, is_decoder=True)
    model = transformers.VisionEncoderDecoderModel(
        transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(vision, text)).eval()
    for config in (model.config, model.generation_config):
        config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = len(fast) - 1, 0, 0
    with torch.no_grad():
        for name, p in model.decoder.named_parameters():
            if p.dim() == 2 and not any(k in name for k in ("embed", "wte", "wpe")):
                p.normal_(0, 0.3)
    model.save_pretrained(folder)
    transformers.TrOCRProcessor(transformers.ViTImageProcessor(size={"height": 32, "width": 32}),
                                fast).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("decoder", ["trocr", "gpt2"])
def test_an_image_to_text_folder_writes_pytorchs_tokens_from_transformers_js_own_pixels(tmp_path: Path,
                                                                                        decoder: str) -> None:
    """A vision encoder-decoder (ViT + TrOCR, ViT + GPT-2) exported for generation (an encoder file taking
    pixel_values, a decoder with its caches), generating PyTorch's tokens from a picture through the export's
    processor; its transformers.js folder (image-to-text) generates PyTorch's greedy tokens from the pixel values
    transformers.js's processor made. TrOCR's decoder takes a cross-attention cache as transformers.js names it
    (.decoder / .encoder), GPT-2's its own cache alone (past_key_values.{i}.key), the cross projections computed
    each step; an INT8 TrOCR folder runs too."""
    import numpy as np
    import torch
    import transformers
    from PIL import Image

    folder = _image_to_text(tmp_path / decoder, decoder)
    result = onnx_nb.export(str(folder), out=tmp_path / "onnx" / "model.onnx", progress=False)
    assert result and result.source.task == "image-to-text" and "encoder" in result.parts, repr(result)
    picture = Image.fromarray(np.random.default_rng(1).integers(0, 256, (40, 50, 3), dtype=np.uint8))
    ours = onnx_nb.generate(result, [picture], max_new_tokens=6, num_beams=1)
    model = transformers.VisionEncoderDecoderModel.from_pretrained(folder).eval()
    pixels = transformers.ViTImageProcessor.from_pretrained(folder)(picture, return_tensors="pt").pixel_values
    with torch.no_grad():
        theirs = model.generate(pixel_values=pixels, max_new_tokens=6, do_sample=False, num_beams=1)[0, 1:].tolist()
    assert ours.tokens[0] == theirs and len(set(theirs)) > 1, (ours.tokens, theirs)
    assert onnx_nb.generate(result, None, images=picture, max_new_tokens=6, num_beams=1).tokens == ours.tokens
    with torch.no_grad():  # beam search runs in transformers' generate() over the files: pictures reach it too
        beams = model.generate(pixel_values=pixels, max_new_tokens=6, do_sample=False, num_beams=2)[0, 1:].tolist()
    assert onnx_nb.generate(result, None, images=[picture], max_new_tokens=6, num_beams=2).tokens[0] == beams
    with pytest.raises(onnx_nb.InvalidArgumentError, match="once"):
        onnx_nb.generate(result, [picture], images=picture, max_new_tokens=2)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="No image file"):
        onnx_nb.generate(result, "not-a-picture.png", max_new_tokens=2)

    items = [result, onnx_nb.quantize(result, out=tmp_path / "int8.onnx")] if decoder == "trocr" else [result]
    bundle = onnx_nb.to_transformers_js(items, tmp_path / "web", runtime="node", max_new_tokens=6, progress=False)
    assert bundle.task == "image-to-text" and bundle.images == ["32x32 RGB"] * 2, repr(bundle)
    # fp32 gives PyTorch's tokens for both images; INT8 runs (random weights leave near-ties it may tip: >= 1)
    assert bundle.checks[0].passed and bundle.checks[0].figures["tokens_equal"] == 2, repr(bundle)
    assert all(c.figures.get("tokens_equal", 0) >= 1 for c in bundle.checks[1:]), repr(bundle)
    assert bundle.checks[0].figures["processor_max_abs"] < 1e-6
    merged = onnx.load(str(tmp_path / "web" / "onnx" / "decoder_model_merged.onnx")).graph
    names = {i.name for i in merged.input}
    assert {"input_ids", "encoder_hidden_states"} <= names
    if decoder == "trocr":
        assert {"past_key_values.1.decoder.key", "past_key_values.1.encoder.value"} <= names
    else:
        assert "past_key_values.1.key" in names and not [n for n in names if ".encoder." in n or ".decoder." in n]
    with pytest.raises(onnx_nb.InvalidArgumentError, match="images"):
        onnx_nb.to_transformers_js(result, tmp_path / "bad", texts=["a caption"], progress=False)


def test_a_question_answering_folder_gives_pytorchs_span_logits_for_question_and_context_pairs(
        tmp_path: Path) -> None:
    """A tiny BERT question-answering head: transformers.js tokenizes [question, context] pairs as one text and its
    pair (the same ids as transformers' tokenizer), and its start and end logits are PyTorch's on them."""
    import torch
    import transformers

    fast = _bpe_tokenizer()
    torch.manual_seed(0)
    transformers.BertForQuestionAnswering(transformers.BertConfig(
        vocab_size=len(fast), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=64)).eval().save_pretrained(tmp_path / "qa")
    fast.save_pretrained(tmp_path / "qa")
    result = onnx_nb.export(str(tmp_path / "qa"), out=tmp_path / "qa.onnx", progress=False)
    pairs = [["the quick fox", "the lazy dog jumps over the quick brown fox"], ["lazy", "brown dog"]]
    bundle = onnx_nb.to_transformers_js(result, tmp_path / "web", texts=pairs, runtime="node", progress=False)
    assert bundle and bundle.task == "question-answering" and bundle.texts == pairs, repr(bundle)
    figures = bundle.checks[0].figures
    assert figures["start_logits"]["max_abs"] < 1e-4 and figures["end_logits"]["max_abs"] < 1e-4, figures
    # texts that are not pairs, and inputs the task does not run on, are refused before anything is written
    with pytest.raises(onnx_nb.InvalidArgumentError, match="pairs"):
        onnx_nb.to_transformers_js(result, tmp_path / "plain", texts=["the quick fox"], progress=False)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="checked on texts, not images"):
        onnx_nb.to_transformers_js(result, tmp_path / "image", images=[], progress=False)
    assert not (tmp_path / "plain").exists() and not (tmp_path / "image").exists()


def test_a_speech_encoder_decoder_folder_transcribes_with_pytorchs_tokens_in_transformers_js(tmp_path: Path) -> None:
    """A tiny Whisper with its processor (feature extractor and tokenizer): encoder_model.onnx takes input_features,
    the merged decoder computes the cross-attention cache from the encoder states it is now given; transformers.js's
    feature extractor makes each clip's log-mel features, its model generates greedy tokens from them, PyTorch's
    generate() on the same features gives the same tokens, and the two feature extractors' gap is reported."""
    import numpy as np
    import torch
    import transformers

    fast = _bpe_tokenizer()
    words = transformers.WhisperTokenizerFast(tokenizer_object=fast.backend_tokenizer, eos_token="<|endoftext|>",
                                              pad_token="<|endoftext|>")
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(
        vocab_size=len(fast), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_target_positions=64,
        decoder_start_token_id=len(fast) - 1, eos_token_id=0, pad_token_id=0, bos_token_id=0,
        begin_suppress_tokens=None, suppress_tokens=None)).eval()
    with torch.no_grad():  # weights spread enough that the greedy tokens change from step to step
        for name, p in model.named_parameters():
            if name.endswith("proj.weight") and p.dim() == 2:
                p.normal_(0, 0.3)
    model.save_pretrained(tmp_path / "whisper")
    transformers.WhisperProcessor(transformers.WhisperFeatureExtractor(), words).save_pretrained(tmp_path / "whisper")
    result = onnx_nb.export(str(tmp_path / "whisper"), out=tmp_path / "whisper" / "onnx" / "model.onnx",
                            progress=False)
    bundle = onnx_nb.to_transformers_js(result, tmp_path / "web", runtime="node", max_new_tokens=6, progress=False)
    assert bundle and bundle.task == "automatic-speech-recognition", repr(bundle)
    assert bundle.checks[0].figures["tokens_equal"] == 2 and bundle.checks[0].figures["features_max_abs"] < 1e-3
    assert bundle.checks[0].status == "pass" and "greedy tokens equal for 2 of 2 clips" in bundle.checks[0].measure
    assert bundle.audio == ["1.00 s at 16000 Hz", "0.50 s at 16000 Hz"]
    encoder = onnx.load(str(tmp_path / "web" / "onnx" / "encoder_model.onnx")).graph
    assert [i.name for i in encoder.input] == ["input_features"]
    merged = onnx.load(str(tmp_path / "web" / "onnx" / "decoder_model_merged.onnx")).graph
    assert "encoder_hidden_states" in {i.name for i in merged.input}
    with pytest.raises(onnx_nb.InvalidArgumentError, match="images= is for an image-to-text model"):
        onnx_nb.generate(result, None, images=np.zeros((8, 8, 3), np.uint8), max_new_tokens=2)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="1-D clips"):
        onnx_nb.to_transformers_js(result, tmp_path / "bad", audio=[np.zeros((2, 5))], progress=False)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="finite"):
        onnx_nb.to_transformers_js(result, tmp_path / "bad", audio=np.array([0.1, np.nan]), progress=False)
    assert not (tmp_path / "bad").exists()


def test_an_encoder_decoder_folder_generates_pytorchs_tokens_in_transformers_js(tmp_path: Path) -> None:
    """A tiny T5 (text2text-generation): encoder_model.onnx (last_hidden_state out) and decoder_model_merged.onnx,
    whose cross-attention cache is computed from encoder_hidden_states on the first step (transformers.js feeds it
    empty) and passed through after; fp32 and INT8 generate PyTorch's greedy tokens under Node.js."""
    import torch
    import transformers

    fast = _bpe_tokenizer()
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=len(fast), d_model=32, d_ff=37, d_kv=16, num_layers=2, num_heads=2, decoder_start_token_id=0,
        eos_token_id=0, pad_token_id=0)).eval()
    model.save_pretrained(tmp_path / "t5")
    fast.save_pretrained(tmp_path / "t5")
    result = onnx_nb.export(str(tmp_path / "t5"), out=tmp_path / "t5.onnx", progress=False)
    int8 = onnx_nb.quantize(result, out=tmp_path / "t5.int8.onnx")
    bundle = onnx_nb.to_transformers_js([result, int8], tmp_path / "web", texts=["the quick brown", "lazy dog"],
                                        runtime="node", progress=False)
    assert bundle and [c.figures for c in bundle.checks] == [{"prompts": 2, "tokens_equal": 2}] * 2, repr(bundle)
    assert bundle.task == "text2text-generation" and (tmp_path / "web" / "generation_config.json").is_file()
    files = {p.relative_to(tmp_path / "web").as_posix() for p in bundle.files}
    assert {"onnx/encoder_model.onnx", "onnx/decoder_model_merged.onnx", "onnx/encoder_model_quantized.onnx",
            "onnx/decoder_model_merged_quantized.onnx"} <= files, files
    encoder = onnx.load(str(tmp_path / "web" / "onnx" / "encoder_model.onnx")).graph
    assert [o.name for o in encoder.output] == ["last_hidden_state"]
    merged = onnx.load(str(tmp_path / "web" / "onnx" / "decoder_model_merged.onnx")).graph
    assert {"input_ids", "encoder_hidden_states", "past_key_values.1.encoder.key"} <= {i.name for i in merged.input}
    assert "present.1.encoder.value" in {o.name for o in merged.output} and \
        sum(n.op_type == "If" for n in merged.node) == 1


def test_decoder_folder_generates_pytorchs_tokens_in_transformers_js(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    result = onnx_nb.export(str(_tiny_llama(tmp_path / "llama")), out=tmp_path / "llama.onnx", progress=False)
    folder = tmp_path / "web" / "llama"
    texts = ["the quick", "lazy dog jumps over"]
    # under Node.js, and in headless Chromium on WebGPU (SwiftShader's software adapter here: named in the row)
    bundle = onnx_nb.to_transformers_js(result, folder, texts=texts, max_new_tokens=10,
                                        runtime=["node", "browser-webgpu"], progress=False)
    assert bundle.checks[0].where.startswith("Node.js v") and bundle.checks[1].where.startswith("HeadlessChrome/")
    assert "WebGPU (adapter" in bundle.checks[1].where and bundle.checks[0].run_ms
    if bundle.checks[1].untimed:  # a CPU emulation of a GPU (SwiftShader, here): checked, not timed, and said so
        assert bundle.checks[1].run_ms is None and bundle.checks[1].cells()[-1] == "not timed"
        assert any("runs not timed on a software adapter" in n for n in bundle.notes), bundle.notes
        assert "swiftshader" in bundle.checks[1].where.lower()  # the adapter named in the row
    else:
        assert bundle.checks[1].run_ms
    assert bundle, repr(bundle)
    assert bundle.task == "text-generation"
    assert all(row.figures == {"prompts": 2, "tokens_equal": 2} for row in bundle.checks), repr(bundle)
    # transformers.js makes the first step's empty cache from the graph: its batch axis must be "batch_size"
    graph = onnx.load(str(folder / "onnx" / "model.onnx")).graph
    cache = next(i for i in graph.input if i.name == "past_key_values.0.key")
    assert [d.dim_param or d.dim_value for d in cache.type.tensor_type.shape.dim] == ["batch_size", 2,
                                                                                     "past_sequence", 8]
    assert json.loads((folder / "tokenizer_config.json").read_text())["padding_side"] == "left"
    assert (folder / "generation_config.json").is_file()

    # the Studio's transformers.js tab: after the export it runs (not part of "Run all")
    studio = onnx_nb.Studio(str(tmp_path / "llama"), threaded=False)
    made = studio.run("web")
    assert made and list(studio.plan.values) == ["export"] and "greedy tokens equal" in studio.panel.html["web"]
    assert (Path(studio.plan.settings.out) / "transformers-js" / "onnx" / "model.onnx").is_file()

    # the command line's export writes and checks the same folder with --web
    from onnx_nb.frontends import cli

    assert cli.main(["export", str(tmp_path / "llama"), "--out", str(tmp_path / "cli" / "model.onnx"),
                     "--web", str(tmp_path / "cli-web")]) == 0
    assert "greedy tokens equal for 2 of 2 prompts" in capsys.readouterr().out
    assert (tmp_path / "cli-web" / "onnx" / "model.onnx").is_file()


def test_what_cannot_be_written_or_checked_is_refused_naming_why(minilm_export: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(onnx_nb.InvalidArgumentError, match="one file per precision"):
        onnx_nb.to_transformers_js([minilm_export, minilm_export], tmp_path / "two", progress=False)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="takes an export"):
        onnx_nb.to_transformers_js("model.onnx", tmp_path / "path", progress=False)
    import torch

    plain = onnx_nb.export(torch.nn.Linear(3, 2), torch.randn(1, 3), out=tmp_path / "linear.onnx", progress=False)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="not a Hugging Face transformers model"):
        onnx_nb.to_transformers_js(plain, tmp_path / "linear", progress=False)
    assert not (tmp_path / "linear").exists()

    # an architecture transformers.js does not register for the task: refused before anything is written, naming it
    # and the version that was asked (a tiny BioGPT, a causal LM transformers.js 4.3 does not know)
    import transformers

    torch.manual_seed(0)
    biogpt = transformers.BioGptForCausalLM(transformers.BioGptConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37)).eval()
    unknown = onnx_nb.export(biogpt, out=tmp_path / "biogpt.onnx", progress=False)
    with pytest.raises(onnx_nb.InvalidArgumentError, match=rf"transformers.js {LOCKED} has no text-generation model "
                                                           "for biogpt"):
        onnx_nb.to_transformers_js(unknown, tmp_path / "biogpt", progress=False)
    assert not (tmp_path / "biogpt").exists()

    monkeypatch.setenv(transformers_js.MODULES_VARIABLE, str(tmp_path / "nowhere"))
    with pytest.raises(onnx_nb.TransformersJsError, match=r"under Node.js: transformers.js is not in .*nowhere"):
        onnx_nb.to_transformers_js(minilm_export, tmp_path / "strict", check=True, runtime="node", progress=False)
    unchecked = onnx_nb.to_transformers_js(minilm_export, tmp_path / "auto", runtime="node", progress=False)
    assert not unchecked and not unchecked.checks and "nowhere" in unchecked.unchecked
    assert "not run" in repr(unchecked) and (tmp_path / "auto" / "onnx" / "model.onnx").is_file()
