"""Hugging Face models of eight architectures, from local folders and as objects."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch
import transformers

import onnx_nb
from helpers import compare, hf_inputs, torch_outputs

EXPECTED = {
    # name: (task, input names, output names)
    "bert": ("text-classification", ["input_ids", "attention_mask", "token_type_ids"], ["logits"]),
    "gpt2": ("text-generation", ["input_ids", "attention_mask", "position_ids"], ["logits"]),  # as generate() feeds
    "llama": ("text-generation", ["input_ids", "attention_mask", "position_ids"], ["logits"]),
    "t5": ("text2text-generation", ["input_ids", "attention_mask", "decoder_input_ids"],
           ["logits", "encoder_last_hidden_state"]),
    "vit": ("image-classification", ["pixel_values"], ["logits"]),
    "whisper": ("automatic-speech-recognition", ["input_features", "decoder_input_ids"],
                ["logits", "encoder_last_hidden_state"]),
    "wav2vec2": ("automatic-speech-recognition", ["input_values"], ["logits"]),
    "clip": ("zero-shot-image-classification", ["input_ids", "pixel_values", "attention_mask"],
             ["logits_per_image", "logits_per_text", "text_embeds", "image_embeds"]),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_tiny_architecture_from_folder(name: str, tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    task, ins, outs = EXPECTED[name]
    # generative models export with their caches by default (tests/test_generation.py); here: whole sequences
    result = onnx_nb.export(str(tiny_dirs[name]), out=tmp_path / "model.onnx", progress=False, cache=False)
    assert result.source.kind == "hf-dir" and result.source.task == task
    assert [i.name for i in result.inputs] == ins
    assert [o.name for o in result.outputs] == outs
    assert result.inputs[0].shape[0] == "batch" and result.outputs[0].shape[0] == "batch"
    if "input_ids" in ins:
        assert result.inputs[0].shape == ["batch", "sequence"]
    assert result.check["passed"], result.check
    if name == "t5":  # T5's attention output viewed at strides only the fused kernel gives: eager attention
        assert result.exporter == "dynamo" and not result.fallback_reason
        assert any("eager attention" in w for w in result.warnings), result.warnings
    arch = transformers.AutoConfig.from_pretrained(tiny_dirs[name]).architectures[0]
    model = getattr(transformers, arch).from_pretrained(tiny_dirs[name]).eval()
    feed = hf_inputs(result.path, model, batch=4, seq=12)
    diffs = compare(result.path, torch_outputs(model, feed), feed)
    assert max(diffs.values()) < 1e-4, diffs


@pytest.mark.parametrize("cache", [True, False])
def test_tied_embedding_is_stored_once(cache: bool, tmp_path: Path) -> None:
    """GPT-2 ties its LM head to the token embedding; the exporter folds the head's transpose into a second copy.
    The export keeps one (the copy becomes a Transpose node), and still computes what PyTorch does."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=2000,
                                                                 n_positions=64)).eval()
    assert model.lm_head.weight is model.transformer.wte.weight
    result = onnx_nb.export(model, out=tmp_path / "tied.onnx", cache=cache, progress=False)
    assert result, repr(result)
    proto = onnx.load(str(result.path))
    arrays = [numpy_helper.to_array(i) for i in proto.graph.initializer]
    embedding = model.transformer.wte.weight.detach().numpy()
    copies = [a for a in arrays if a.shape in (embedding.shape, embedding.T.shape)
              and (np.array_equal(a, embedding) or np.array_equal(a, embedding.T))]
    assert len(copies) == 1, [a.shape for a in copies]
    if result.exporter == "torchscript":  # the trace folds the head's transpose: tied again as a node
        assert any(n.op_type == "Transpose" and n.name.startswith("tied/") for n in proto.graph.node)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())  # counts the shared matrix once
    stored = sum(a.nbytes for a in arrays)
    assert stored <= 1.02 * weights, (stored, weights)  # before: the 256 KB embedding twice
    if cache:  # the quantizers see the head's weight as an initializer again: the LM head is quantized too
        int4 = onnx_nb.quantize(result, method="int4", out=tmp_path / "tied.int4.onnx")
        head = [n for n in onnx.load(str(int4.path)).graph.node if n.op_type == "MatMulNBits"
                and any(at.name == "N" and at.i == 2000 for at in n.attribute)]
        assert head, "the LM head (N = 2000) is a MatMulNBits"


@pytest.mark.lower_bounds
def test_hf_object_with_cache_and_model_output(tmp_path: Path) -> None:
    """A causal LM object with use_cache on, exported with cache=False: no cache inputs or outputs appear."""
    import tiny_models

    model = tiny_models.build("gpt2")
    assert model.config.use_cache
    result = onnx_nb.export(model, out=tmp_path / "g.onnx", exporter="torchscript", cache=False, progress=False)
    assert result.source.kind == "hf-object" and result.source.task == "text-generation"
    assert [o.name for o in result.outputs] == ["logits"]
    assert result.outputs[0].shape == ["batch", "sequence", 100]
    feed = hf_inputs(result.path, model, batch=1, seq=20)
    assert max(compare(result.path, torch_outputs(model, feed), feed).values()) < 1e-4


def test_hf_object_with_user_sample_and_task(tmp_path: Path) -> None:
    import tiny_models

    model = tiny_models.build("bert")
    sample = {"input_ids": torch.randint(0, 100, (3, 10)), "attention_mask": torch.ones(3, 10, dtype=torch.long)}
    result = onnx_nb.export(model, sample, task="text-classification", out=tmp_path / "b.onnx", progress=False)
    assert [i.name for i in result.inputs] == ["input_ids", "attention_mask"]
    assert result.source.sample["input_ids"].shape == (3, 10)


@pytest.mark.lower_bounds
def test_real_minilm(minilm_dir: Path, minilm_export: onnx_nb.ExportResult) -> None:
    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = transformers.AutoModel.from_pretrained(minilm_dir).eval()
    result = minilm_export  # read only (conftest's shared exports)
    assert result.source.task == "feature-extraction"
    assert [o.name for o in result.outputs] == ["last_hidden_state", "pooler_output"]
    assert 22_000_000 < result.parameters < 23_500_000
    # each weight the exporter folded (dynamo calls them val_99) is named after its Linear, and holds its transpose
    import re

    import numpy as np
    from onnx import numpy_helper

    proto = onnx.load(str(result.path))
    weights = {i.name: i for i in proto.graph.initializer}
    big = [n for n, i in weights.items() if len(i.dims) == 2 and re.fullmatch(r"val_\d+", n)]
    assert big == [], big
    folded = numpy_helper.to_array(weights["encoder.layer.0.attention.self.value.weight.T"])
    assert np.array_equal(folded, model.encoder.layer[0].attention.self.value.weight.detach().numpy().T)
    assert sum(n.endswith(".weight.T") for n in weights) == 36  # 6 layers x (q, k, v, out, up, down)
    texts = ["A much longer sentence than any the export saw, to change the sequence length a lot.",
             "short", "three", "four sentences in one batch"]
    feed = dict(tok(texts, padding=True, return_tensors="pt"))
    with torch.no_grad():
        ref = model(**feed)
    mask = feed["attention_mask"].bool().numpy()
    import onnxruntime as ort

    got = ort.InferenceSession(str(result.path)).run(None, {k: v.numpy() for k, v in feed.items()})
    assert abs(got[0] - ref.last_hidden_state.numpy()).max(-1)[mask].max() < 1e-4


def test_naflex_patches_export_and_match_at_other_grids(tmp_path: Path) -> None:
    """SigLIP 2 takes an image as its processor cuts it (NaFlex): flattened patches padded to a count, their mask and
    each image's grid of patches. The default export builds that sample from the config and its file matches
    PyTorch at grids of other aspect ratios and at another patch count, padding masked."""
    import numpy as np

    from onnx_nb.runtime.sessions import session

    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "patch_size": 4, "num_patches": 64}
    config = transformers.Siglip2Config(vision_config=vision, text_config={
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
        "vocab_size": 100, "projection_size": 32})
    torch.manual_seed(0)
    model = transformers.Siglip2ForImageClassification(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "model.onnx", progress=False)
    assert result, result.check_text()
    assert [i.name for i in session(result.path).get_inputs()] == ["pixel_values", "pixel_attention_mask",
                                                                   "spatial_shapes"]
    g = torch.Generator().manual_seed(1)
    for patches, grids in ((64, [[6, 10], [8, 8], [4, 15]]), (100, [[10, 10], [5, 19], [9, 11]])):
        pixels = torch.randn(3, patches, 3 * 4 * 4, generator=g)
        mask = torch.zeros(3, patches, dtype=torch.long)
        for row, (h, w) in enumerate(grids):
            mask[row, :h * w] = 1
        feed = {"pixel_values": pixels, "pixel_attention_mask": mask, "spatial_shapes": torch.tensor(grids)}
        with torch.no_grad():
            want = model(**feed).logits.numpy()
        got = session(result.path).run(None, {k: v.numpy() for k, v in feed.items()})[0]
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def test_a_forecaster_looping_over_its_series_takes_any_batch_and_length(tmp_path: Path) -> None:
    """TimesFM cuts, front-pads and masks each series in a Python loop over the batch: exported as it is, the file
    took the sample's batch only. The default export (the loop's rows handled together within the export) matches
    PyTorch's own loop at other batches and at series shorter and longer than the model's context."""
    import numpy as np

    from onnx_nb.runtime.sessions import session

    config = transformers.TimesFmConfig(patch_length=8, context_length=64, horizon_length=16, num_hidden_layers=1,
                                        hidden_size=32, intermediate_size=32, head_dim=8, num_attention_heads=4)
    torch.manual_seed(0)
    model = transformers.TimesFmModelForPrediction(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "model.onnx", progress=False)
    assert result and result.exporter == "dynamo", result.check_text()
    run = session(result.path)
    names = [o.name for o in run.get_outputs()]
    g = torch.Generator().manual_seed(1)
    for batch, length in ((1, 64), (3, 20), (4, 100)):
        series = torch.randn(batch, length, generator=g)
        with torch.no_grad():
            want = model(past_values=series)
        got = dict(zip(names, run.run(None, {"past_values": series.numpy()})))
        for name in ("mean_predictions", "full_predictions"):
            np.testing.assert_allclose(got[name], getattr(want, name).numpy(), atol=1e-5, rtol=1e-4)


def test_a_keypoint_detector_looping_over_its_images_takes_any_batch_and_size(tmp_path: Path) -> None:
    """SuperPoint finds each image's keypoints in a Python loop over the batch (threshold, border, top-k, descriptors
    sampled one image at a time, padded with a mask): exported as it is, the file took the sample's batch and size
    only. The default export (the images together within the export) gives PyTorch's keypoints, scores,
    descriptors and mask at other batches and sizes, the count of keypoints following the images."""
    import numpy as np

    from onnx_nb.runtime.sessions import session
    from onnx_nb.steps.export.patches.keypoints import batched_keypoints

    config = transformers.SuperPointConfig(encoder_hidden_sizes=[8, 8, 16, 16], decoder_hidden_size=32,
                                           descriptor_decoder_dim=16, initializer_range=0.2)
    torch.manual_seed(0)
    model = transformers.SuperPointForKeypointDetection(config).eval()
    g = torch.Generator().manual_seed(1)
    model.keypoint_decoder.max_keypoints = 12  # the strongest, by score, where more pass: the same as its own loop
    pixels = torch.rand(3, 3, 48, 64, generator=g)
    with torch.no_grad():
        want = model(pixel_values=pixels)
        with batched_keypoints(model) as found:
            got = model(pixel_values=pixels)
    assert found == ["SuperPointForKeypointDetection"]
    for name in ("keypoints", "scores", "descriptors", "mask"):
        np.testing.assert_allclose(got[name].numpy(), want[name].numpy(), atol=1e-6)
    model.keypoint_decoder.max_keypoints = -1
    result = onnx_nb.export(model, out=tmp_path / "model.onnx", progress=False)
    assert result and result.exporter == "dynamo", result.check_text()
    run = session(result.path)
    names = [o.name for o in run.get_outputs()]
    counts = set()
    for batch, height, width in ((1, 64, 80), (3, 48, 96), (2, 96, 64)):
        pixels = torch.rand(batch, 3, height, width, generator=g)
        with torch.no_grad():
            want = model(pixel_values=pixels)
        got = dict(zip(names, run.run(None, {"pixel_values": pixels.numpy()})))
        counts.add(want.keypoints.shape[1])
        for name in ("keypoints", "scores", "descriptors", "mask"):
            np.testing.assert_allclose(got[name], want[name].numpy(), atol=1e-5, rtol=1e-4)
    assert len(counts) == 3  # the keypoint axis follows the images


def test_a_depth_neck_stacking_its_stages_keeps_the_batch_symbolic() -> None:
    """ZoeDepth's reassemble stage stacks the backbone's stages along the batch and splits them by the batch size:
    torch.export fixed the batch at the sample's (a piece count it cannot simplify). With the stage taken stage by
    stage (what every export applies) the depth is the model's own and the batch stays symbolic. (Its whole export,
    four exports with the eager-attention and fixed-size retries, is the sweep's: ``task_sweep.py --task
    depth-estimation``.)"""
    from onnx_nb.steps.export.patches.applying import applied

    config = transformers.ZoeDepthConfig(
        backbone_config=transformers.BeitConfig(num_hidden_layers=4, hidden_size=32, num_attention_heads=2,
                                                intermediate_size=37, image_size=64, out_indices=[1, 2, 3, 4],
                                                use_relative_position_bias=True, reshape_hidden_states=False),
        neck_hidden_sizes=[8, 8, 16, 16], fusion_hidden_size=16, bottleneck_features=16, num_relative_features=8,
        backbone_hidden_size=32)
    torch.manual_seed(0)
    model = transformers.ZoeDepthForDepthEstimation(config).eval()
    pixels = torch.rand(3, 3, 64, 64)
    with torch.no_grad():
        want = model(pixel_values=pixels).predicted_depth
        with applied(model) as replaced:
            got = model(pixel_values=pixels).predicted_depth
            program = torch.export.export(model, (), {"pixel_values": pixels[:2]}, strict=False,
                                          dynamic_shapes={"pixel_values": {0: torch.export.Dim("batch")}})
    assert replaced.get("stages") == ["neck.reassemble_stage"]
    # its config says eager while its BEiT backbone runs sdpa: the eager retry switches every module, then gives
    # each its own back
    from onnx_nb.steps.export.patches.attention import eager_attention, runs_eager

    own = model.backbone.config._attn_implementation
    assert own != "eager" and not runs_eager(model)
    with eager_attention(model) as eager:
        assert eager and runs_eager(model)
    assert model.backbone.config._attn_implementation == own
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(pixel_values=pixels).predicted_depth, want, atol=1e-5, rtol=1e-4)


def test_a_forecaster_keeping_running_statistics_exports_in_seconds_at_any_batch_and_length(tmp_path: Path) -> None:
    """TimesFM 2.5 loops over its series (the batch) and its model over the context's patches (Welford's running
    mean and deviation, one patch at a time). The default export takes the rows together and the statistics from
    cumulative sums: PyTorch's forecasts (flip invariance and the quantile head included) at other batches, at
    series shorter and longer than the context; its statistics are the loop's on a long, nearly flat step (where
    float32 prefix sums cancel)."""
    import numpy as np

    from onnx_nb.runtime.sessions import session

    config = transformers.TimesFm2_5Config(context_length=128, patch_length=16, horizon_length=16,
                                           output_quantile_len=32, hidden_size=32, intermediate_size=32,
                                           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                           head_dim=16)
    torch.manual_seed(0)
    model = transformers.TimesFm2_5ModelForPrediction(config).eval()
    result = onnx_nb.export(model, out=tmp_path / "model.onnx", progress=False)
    assert result and result.exporter == "dynamo", result.check_text()
    run = session(result.path)
    names = [o.name for o in run.get_outputs()]
    g = torch.Generator().manual_seed(1)
    for series in (torch.randn(1, 128, generator=g) * 4, torch.randn(3, 40, generator=g) * 4 + 50.0,
                   torch.randn(2, 300, generator=g) * 4 - 3.0):
        with torch.no_grad():
            want = model(past_values=series)
        got = dict(zip(names, run.run(None, {"past_values": series.numpy()})))
        for name in ("mean_predictions", "full_predictions"):
            np.testing.assert_allclose(got[name], getattr(want, name).numpy(), atol=1e-4, rtol=1e-4)
    # the statistics against the model's own Welford loop, over a long context: a step whose stretches are nearly
    # flat, normalised as the forecaster does (float32 prefix sums gave a deviation of 0 for the first patches)
    from onnx_nb.steps.export.patches.series_rows import running_stats

    step = torch.cat([torch.zeros(1, 8192), torch.ones(1, 8192)], dim=1) + torch.randn(1, 16384, generator=g) * 1e-5
    step = (step - step.mean()) / step.std()
    patches = step.view(1, -1, 32)
    masked = torch.zeros_like(patches, dtype=torch.bool)
    count, mean, deviation = (torch.zeros(1) for _ in range(3))
    means, deviations = [], []
    for k in range(patches.shape[1]):
        count, mean, deviation = model.model._update_running_stats(count, mean, deviation, patches[:, k], masked[:, k])
        means.append(mean)
        deviations.append(deviation)
    mu, sigma = running_stats(patches, masked)
    torch.testing.assert_close(mu, torch.stack(means, dim=1), atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(sigma, torch.stack(deviations, dim=1), atol=1e-9, rtol=1e-3)
