"""Vision-language models (image-text-to-text) as one adapter of the source layer: tiny random models of nine families
exported as vision, embed and decoder files, the chain checked against the model's forward, and onnx_nb.generate with
images giving PyTorch's greedy tokens, which change when the image does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import onnx_nb
from tests.tiny_vlms import (
    VLMS,
    build_vlm,
    gemma4_with_processor,
    instructblip_with_processor,
    llava_with_processor,
    onevision_with_processor,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
NEW = 8
# families whose road another test takes (the sweep's page still counts each): Aya Vision's is Cohere2-Vision's (a
# SigLIP tower, pixels shuffled by downsample_factor, a SwiGLU projector, a Cohere 2 decoder), Idefics 3's is SmolVLM's
# (SmolVLM's classes are Idefics 3's), VipLLaVA's is LLaVA's (the layers its projector reads are chosen inside
# get_image_features), InstructBLIP's own test exports it from its folder and checks what this test checks
OTHER_ROAD = {"aya_vision": "cohere2_vision", "idefics3": "smolvlm", "vipllava": "llava",
              "instructblip": "test_instructblip_takes_its_instruction_beside_the_image_as_its_processor_gives_it"}
TOKEN_TYPES = {"gemma3": "image", "paligemma": "prefix"}
# read by two tests
REUSED = {"llava", "llava_next", "llava_onevision", "mistral3", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "smolvlm"}


def _inputs(model: Any, ids: Any, pixels: dict[str, Any], token: int) -> dict[str, Any]:
    """What the family's processor gives: ids, mask, pixels, and token types where the family takes them (Gemma
    3's processor: 1 at an image's tokens; PaliGemma's: 0 over the whole prompt)."""
    import torch

    kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), **pixels}
    family = model.config.model_type
    if family in TOKEN_TYPES:
        kwargs["token_type_ids"] = torch.zeros_like(ids) if TOKEN_TYPES[family] == "prefix" else (ids == token).long()
    if family.startswith("qwen"):  # Qwen-VL's processor marks the image tokens for the positions
        kwargs["mm_token_type_ids"] = (ids == token).int()
    return kwargs


def _torch_tokens(model: Any, ids: Any, pixels: dict[str, Any], token: int) -> list[list[int]]:
    import torch

    with torch.no_grad():
        out = model.generate(**_inputs(model, ids, pixels, token), max_new_tokens=NEW, do_sample=False)
    eos = model.generation_config.eos_token_id
    rows = out[:, ids.shape[1]:].tolist()
    return [row[:row.index(eos) + 1] if eos in row else row for row in rows]  # a finished row's padding cut


def _prompt(model: Any, token: int, images: int, seed: int) -> tuple[Any, dict[str, Any]]:
    from onnx_nb.kinds.vlm.parts import features_of, pixel_sample
    from onnx_nb.kinds.vlm.prompts import prompt_sample

    pixels = pixel_sample(model, images, seed=seed)
    rows = features_of(model, pixels).shape[0]
    return prompt_sample(token, rows, images, int(model.get_input_embeddings().num_embeddings), seed=seed), pixels


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Any, Any]]:
    """A family's tiny model and its default export, made once for the module: the family's own test and the tests
    of what that family does apart (Qwen's grids, LLaVA-NeXT's tiles, Pixtral's sizes, SmolVLM's tiles, LLaVA's
    steps) read the same files (each export took 15 to 35 s). The family tests run first (file order), before any
    other test writes a variant beside the parts."""
    made: dict[str, tuple[Any, Any]] = {}

    def get(family: str) -> tuple[Any, Any]:
        if family in made:
            return made[family]
        model = build_vlm(family)
        pair = model, onnx_nb.export(model, out=tmp_path_factory.mktemp("vlm") / family, progress=False)
        if family in REUSED:  # the others go with their test
            made[family] = pair
        return pair

    return get


@pytest.mark.parametrize("family", sorted(set(VLMS) - set(OTHER_ROAD)))
def test_a_family_exports_as_three_files_and_generates_pytorchs_tokens(family: str,
                                                                       exported: Callable[[str], Any]) -> None:
    model, result = exported(family)
    assert isinstance(result, onnx_nb.VlmExport)
    # the three files in the export's folder (other tests later write variants beside them: not counted here)
    assert sorted(Path(p.path).name for p in result.parts.values()) == ["decoder.onnx", "embed.onnx", "vision.onnx"]
    assert all(Path(p.path).parent == result.folder and Path(p.path).exists() for p in result.parts.values())
    assert result.status in ("verified", "unverified"), result
    assert result.chain["passed"], result.chain
    assert result.source.adapter == "vlm" and result.source.cache_layout.embeds == 64
    if family in ("qwen2_vl", "qwen2_5_vl"):  # transformers writes a patch for the tower's span attention: its set
        # traces the tower, onnx-nb's repairs of that patch named beside it; the decoder never runs the tower
        from onnx_nb.steps.export.patches import upstream

        vision, decoder = result.parts["vision"], result.parts["decoder"]
        assert vision.patch_set == "transformers" and vision.patches[upstream.SET], vision.patches
        assert any(p.startswith("span attention repairs") for p in vision.patches[upstream.ADDED]), vision.patches
        assert decoder.patch_set != "transformers", decoder.patches
    made = []
    for seed in (5, 6):  # two images: the tokens follow the image
        ids, pixels = _prompt(model, result.image_token, 1, seed)
        want = _torch_tokens(model, ids, pixels, result.image_token)
        got = onnx_nb.generate(result, ids.tolist(), images={k: v.numpy() for k, v in pixels.items()},
                               max_new_tokens=NEW)
        assert got.tokens == want, (family, seed)
        made.append(got.tokens[0])
    assert made[0] != made[1], f"{family}: the image does not change the tokens"
    # transformers' own generate() over the files: two prompts with an image each, greedy and 2 beams
    import torch

    wrapped = onnx_nb.to_transformers(result)
    assert type(wrapped).__name__ == type(model).__name__
    ids, pixels = _prompt(model, result.image_token, 2, seed=7)
    for beams in (1, 2):
        with torch.no_grad():
            want_ids = model.generate(**_inputs(model, ids, pixels, result.image_token), max_new_tokens=NEW,
                                      do_sample=False, num_beams=beams)
            got_ids = wrapped.generate(**_inputs(model, ids, pixels, result.image_token), max_new_tokens=NEW,
                                       do_sample=False, num_beams=beams)
        assert got_ids.tolist() == want_ids.tolist(), (family, beams)


def test_a_family_left_out_names_a_road_that_is_tested() -> None:
    for family, road in OTHER_ROAD.items():
        assert family in VLMS and (road in set(VLMS) - set(OTHER_ROAD) or callable(globals().get(road))), family


@pytest.fixture(scope="module")
def llava(exported: Callable[[str], tuple[Any, Any]]) -> tuple[Any, Any]:
    return exported("llava")


def test_check_parity_of_the_whole_export_judges_its_decoder_part_on_the_chain(llava: tuple[Any, Any]) -> None:
    """check_parity(vlm) is the chain's generation parity (as check_parity(vlm.parts["decoder"])), not an error about
    the export's folder."""
    _, result = llava
    report = onnx_nb.check_parity(result, progress=False)
    assert report, report.failures
    assert report.generation and any("an image" in r.shape for r in report.rows)


def test_an_encoder_decoder_vision_language_model_is_refused_before_loading(tmp_path: Path) -> None:
    """Florence-2's shape (image and prompt through an encoder, a decoder attending to it) is named and refused from
    its folder's config alone (no weights there: nothing is loaded), not an AttributeError from the seq2seq route."""
    import json

    folder = tmp_path / "florence"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "florence2", "is_encoder_decoder": True,
                                                    "image_token_id": 51289, "vision_config": {"depth": 2}}))
    with pytest.raises(onnx_nb.ExportError, match="florence2 is an encoder-decoder vision-language model"):
        onnx_nb.export(folder, out=tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_a_chain_that_differs_from_the_model_fails_the_export(tmp_path: Path) -> None:
    import transformers

    class ShiftedWithPictures(transformers.LlavaForConditionalGeneration):
        """A forward that does what its parts cannot show: its logits move whenever pixels come in."""

        def forward(self, input_ids: Any = None, pixel_values: Any = None, inputs_embeds: Any = None,
                    cache: Any = None, **kwargs: Any) -> Any:
            out = super().forward(input_ids=input_ids, pixel_values=pixel_values, inputs_embeds=inputs_embeds,
                                  cache=cache, **kwargs)
            if pixel_values is not None:
                out.logits = out.logits + 0.5
            return out

    model = build_vlm("llava")
    shifted = ShiftedWithPictures(model.config).eval()
    shifted.load_state_dict(model.state_dict())
    result = onnx_nb.export(shifted, out=tmp_path / "shifted", progress=False)
    assert not result.chain["passed"] and result.status == "failed" and not result
    assert "chained against PyTorch" in repr(result) and "FAILED" in repr(result)


def test_a_batch_of_prompts_with_an_image_each_and_the_processors_whole_output(llava: tuple[Any, Any]) -> None:
    model, result = llava
    ids, pixels = _prompt(model, result.image_token, 2, seed=9)
    want = _torch_tokens(model, ids, pixels, result.image_token)
    # the images inside the inputs, as processor(text=..., images=..., return_tensors="np") gives them
    inputs = {"input_ids": ids.numpy(), "attention_mask": np.ones_like(ids.numpy()),
              **{k: v.numpy() for k, v in pixels.items()}}
    got = onnx_nb.generate(result, inputs, max_new_tokens=NEW)
    assert got.tokens == want
    # a prompt without images is text: the image token embedded as the model embeds it without pixels
    text = onnx_nb.generate(result, [[5, 6, 7]], max_new_tokens=3, eos_token_id=-1)
    assert len(text.tokens[0]) == 3


def test_a_folder_is_recognised_and_exported_as_its_parts(llava: tuple[Any, Any], tmp_path: Path) -> None:
    from onnx_nb.steps.export.adapters.registry import resolve
    from onnx_nb.steps.export.args import ExportArgs

    model, _ = llava
    model.save_pretrained(tmp_path / "llava")
    assert resolve(str(tmp_path / "llava"), ExportArgs()).key == "vlm"
    assert resolve(model, ExportArgs()).key == "vlm"
    result = onnx_nb.export(str(tmp_path / "llava"), out=tmp_path / "out", progress=False)
    assert isinstance(result, onnx_nb.VlmExport) and result.chain["passed"]
    assert result.source.location == str((tmp_path / "llava").resolve())


def test_bad_images_and_prompts_are_refused_naming_what_to_pass(llava: tuple[Any, Any], tmp_path: Path) -> None:
    model, result = llava
    ids, pixels = _prompt(model, result.image_token, 1, seed=3)
    images = {k: v.numpy() for k, v in pixels.items()}
    short = ids.tolist()[0]
    short.remove(result.image_token)  # one image token too few
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"15 image tokens .* 16 feature rows"):
        onnx_nb.generate(result, [short], images=images, max_new_tokens=2)
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"vision encoder takes \[images, 3, 32, 32\]"):
        onnx_nb.generate(result, ids.tolist(), images=np.zeros((1, 3, 64, 64), np.float32), max_new_tokens=2)
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"vision encoder takes \[images, 3, 32, 32\]"):
        onnx_nb.generate(result, ids.tolist(), images=np.zeros((1, 1, 32, 32), np.float32), max_new_tokens=2)
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"needs the model's processor"):
        onnx_nb.generate(result, ids.tolist(), images=["a picture"], max_new_tokens=2)
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"not for a vision-language model"):
        onnx_nb.export(model, out=tmp_path / "x", sample={"pixel_values": pixels["pixel_values"]})
    # the kernel stays usable: the same export generates after the refusals
    assert onnx_nb.generate(result, ids.tolist(), images=images, max_new_tokens=2, eos_token_id=-1).tokens


def test_a_folder_with_its_processor_takes_text_and_pictures(tmp_path: Path) -> None:
    """The way a real checkpoint comes: a folder with its processor. Text and pictures go through it (each
    <image> expanded to the tower's 16 tokens); generate(), to_transformers(...).generate and transformers'
    image-text-to-text pipeline over the files give PyTorch's text."""
    import torch
    import transformers
    from PIL import Image

    model, processor = llava_with_processor(tmp_path / "llava")
    picture = Image.fromarray((np.random.default_rng(0).random((40, 48, 3)) * 255).astype("uint8"))
    prompt = "<image> what is this?"
    inputs = processor(text=[prompt], images=[picture], return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=NEW, do_sample=False)
    want = processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)

    vlm = onnx_nb.export(str(tmp_path / "llava"), out=tmp_path / "out", progress=False)
    assert type(vlm.preprocessor).__name__ == "LlavaProcessor" and vlm
    made = onnx_nb.generate(vlm, prompt, images=[picture], max_new_tokens=NEW)
    assert made.text == want
    # the notebook shows the picture beside its answer: the one given, shrunk (48x40 fits the 96-pixel thumbnail)
    import base64
    import io

    shown = made._repr_html_()
    assert shown.count("<img ") == 1 and shown.index("<img ") < shown.index(want[0][:8] or "<td>")
    uri = made.images[0]
    assert Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).size == (48, 40)
    given = dict(processor(text=[prompt], images=[picture], return_tensors="np"))
    from_pixels = onnx_nb.generate(vlm, given, max_new_tokens=NEW)
    assert from_pixels.text == want and len(from_pixels.images) == 1  # the pixels themselves, scaled to show
    pipe = transformers.pipeline("image-text-to-text", model=onnx_nb.to_transformers(vlm), processor=processor)
    said = pipe(images=picture, text=prompt, generate_kwargs={"max_new_tokens": NEW, "do_sample": False})
    assert said[0]["generated_text"] == f"{prompt} {want[0]}"


def test_llava_onevision_generates_from_what_its_processor_gives(tmp_path: Path) -> None:
    """LLaVA-OneVision from its processor's output, as it comes: an image alone tiled by its size, one whose tiles
    the model resizes past its vision_aspect_ratio (its rows bilinearly interpolated: the file takes each token's rows
    and weights), two prompts of other lengths padded in one batch, two images in one prompt (one tile each), and
    text with pictures through the folder's processor; onnx_nb.generate and transformers' beams over the files give
    PyTorch's tokens."""
    import torch
    from PIL import Image

    from onnx_nb.kinds.vlm.tiled import pack_index

    model, processor = onevision_with_processor(tmp_path / "ov")
    rng = np.random.default_rng(0)
    pics = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in ((30, 60), (50, 40))]
    _, _, weight = pack_index(model, (50, 40))
    assert bool((weight[:, 1:] > 0).any()), "the 50x40 image's 2 x 2 tiles are resized: rows mixed"
    result = onnx_nb.export(str(tmp_path / "ov"), out=tmp_path / "onnx", progress=False)
    assert result.image_sizes == "any image size" and result, result.chain
    cases = ((["a photo <image> of"], [pics[1]]), (["one <image> x", "another <image> of yy zz"], [pics[1], pics[0]]),
             (["two <image> and <image> here"], [[pics[0], pics[1]]]))
    for texts, images in cases:
        inputs = processor(text=texts, images=images, return_tensors="pt", padding=True, truncation=True)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=NEW, do_sample=False)
        want = out[:, inputs["input_ids"].shape[1]:].tolist()
        got = onnx_nb.generate(result, {k: v.numpy() for k, v in inputs.items()}, max_new_tokens=NEW)
        assert got.tokens == want, (texts, got.tokens, want)
    assert inputs["batch_num_images"].tolist() == [2] and inputs["pixel_values"].shape[1] == 1  # one tile each
    with torch.no_grad():
        beams = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, num_beams=2)
        again = onnx_nb.to_transformers(result).generate(**inputs, max_new_tokens=NEW, do_sample=False, num_beams=2)
    assert again.tolist() == beams.tolist()
    made = onnx_nb.generate(result, "a photo <image> of", images=[pics[1]], max_new_tokens=NEW)
    assert made.tokens[0] == onnx_nb.generate(
        result, dict(processor(text=["a photo <image> of"], images=[pics[1]], return_tensors="np")),
        max_new_tokens=NEW).tokens[0]


def test_instructblip_takes_its_instruction_beside_the_image_as_its_processor_gives_it(tmp_path: Path) -> None:
    """InstructBLIP's Q-Former reads the prompt's instruction (qformer_input_ids, in its own tokenizer) beside the
    image: its vision file takes both, the instruction of any length. From the processor's output: one prompt, and two
    prompts of other lengths in one batch (left-padded after the image tokens the processor puts first, the
    instructions padded too), greedy and two beams through to_transformers, and text with a picture: PyTorch's
    tokens."""
    import torch
    from PIL import Image

    model, processor = instructblip_with_processor(tmp_path / "ib")
    rng = np.random.default_rng(0)
    pics = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in ((30, 60), (50, 40))]
    result = onnx_nb.export(str(tmp_path / "ib"), out=tmp_path / "onnx", progress=False)
    assert result and {i.name for i in result.parts["vision"].inputs} >= {"pixel_values", "qformer_input_ids"}
    for texts, images in ((["what is in the picture?"], [pics[0]]),
                          (["what?", "describe the picture in a few words"], pics)):
        inputs = processor(text=texts, images=images, return_tensors="pt", padding=True, truncation=True)
        with torch.no_grad():
            want = model.generate(**inputs, max_new_tokens=NEW, do_sample=False)
            beams = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, num_beams=2)
            again = onnx_nb.to_transformers(result).generate(**inputs, max_new_tokens=NEW, do_sample=False,
                                                             num_beams=2)
        got = onnx_nb.generate(result, {k: v.numpy() for k, v in inputs.items()}, max_new_tokens=NEW)
        assert got.tokens == want[:, inputs["input_ids"].shape[1]:].tolist() and again.tolist() == beams.tolist()
    assert not bool(inputs["qformer_attention_mask"].all()), "the shorter instruction is padded"
    made = onnx_nb.generate(result, "what is in the picture?", images=[pics[0]], max_new_tokens=NEW)
    first = processor(text=["what is in the picture?"], images=[pics[0]], return_tensors="np")
    assert made.tokens == onnx_nb.generate(result, dict(first), max_new_tokens=NEW).tokens


def test_gemma4_takes_patches_of_any_count_and_per_layer_inputs_as_its_processor_gives_them(tmp_path: Path) -> None:
    """Gemma 4's processor hands the tower each picture as a row of patches with their positions (resized by its
    aspect, padded to the batch's count) and the decoder reads per-layer inputs beside the embeddings: its vision
    file takes any count of patches (a processor set to another count of soft tokens needs no new file), the embed
    file gives the per-layer inputs (an image's tokens read as padding) and marks the image tokens, which attend each
    other both ways in the decoder's sliding layers (mm_token_type_ids). Two pictures of other sizes in one batch of
    prompts of other lengths, each alone, the processor at 140 soft tokens, and two beams through to_transformers:
    PyTorch's tokens, which change with the images and with the image blocks."""
    import torch
    from PIL import Image

    model, processor = gemma4_with_processor(tmp_path / "g4")
    rng = np.random.default_rng(0)
    pics = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in ((200, 300), (400, 150))]
    result = onnx_nb.export(str(tmp_path / "g4"), out=tmp_path / "onnx", progress=False)
    assert result.image_sizes == "any image size" and result, result.chain
    assert {"per_layer_inputs", "mm_token_type_ids"} <= {i.name for i in result.parts["decoder"].inputs}
    texts = ["a photo <|image|> of", "look <|image|> here it is now"]
    cases = ((texts, [[pics[0]], [pics[1]]], 70), (texts[:1], [[pics[1]]], 70), (texts[1:], [[pics[0]]], 140))
    for prompts, images, tokens in cases:
        inputs = processor(text=prompts, images=images, return_tensors="pt", padding=True, max_soft_tokens=tokens)
        inputs.pop("num_soft_tokens_per_image", None)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=NEW, do_sample=False)
        got = onnx_nb.generate(result, {k: v.numpy() for k, v in inputs.items()}, max_new_tokens=NEW)
        assert got.tokens == out[:, inputs["input_ids"].shape[1]:].tolist(), (prompts, tokens)
        if len(prompts) == 2:  # the image blocks and the images change the tokens
            causal = model.generate(**{k: v for k, v in inputs.items() if k != "mm_token_type_ids"},
                                    max_new_tokens=NEW, do_sample=False)
            swapped = processor(text=prompts, images=images[::-1], return_tensors="pt", padding=True,
                                max_soft_tokens=tokens)
            swapped.pop("num_soft_tokens_per_image", None)
            assert causal.tolist() != out.tolist() != model.generate(**swapped, max_new_tokens=NEW,
                                                                     do_sample=False).tolist()
    assert inputs["pixel_values"].shape[1] == 9 * 140, "the last case's patches: another count than the first's"
    from onnx_nb.runtime.sessions import session

    embed, ids = session(result.parts["embed"].path), inputs["input_ids"]
    image = ids == model.config.image_token_id
    rows = np.zeros((int(image.sum()), embed.get_inputs()[1].shape[-1]), np.float32)
    made = dict(zip([o.name for o in embed.get_outputs()], embed.run(None, {"input_ids": ids.numpy(),
                                                                           "image_features": rows})))
    with torch.no_grad():  # the model's own lookup, an image's tokens read as padding
        want = model.model.language_model.get_per_layer_inputs(torch.where(image, 0, ids), None)
    np.testing.assert_allclose(made["per_layer_inputs"], want.numpy(), atol=1e-5)
    assert (made["mm_token_type_ids"] == image.numpy()).all()
    with torch.no_grad():
        beams = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, num_beams=2)
        again = onnx_nb.to_transformers(result).generate(**inputs, max_new_tokens=NEW, do_sample=False, num_beams=2)
    assert again.tolist() == beams.tolist()


def test_a_quantized_decoder_part_is_judged_on_the_chain_and_generates_from_images(llava: tuple[Any, Any]) -> None:
    """INT8 of the decoder part: its parity is generation parity through the vision and embed files (prompts with
    their images against PyTorch's generate() with pixels), and the variant generates from images in the chain."""
    model, result = llava
    int8 = onnx_nb.quantize(result.parts["decoder"], method="dynamic")
    assert int8.parity.generation and "the embed file and this decoder file" in " ".join(
        int8.parity.notes)
    assert {r.output for r in int8.parity.rows} == {"logits", "tokens"}
    assert int8.parity, int8.parity.failures
    ids, pixels = _prompt(model, result.image_token, 1, seed=4)
    images = {k: v.numpy() for k, v in pixels.items()}
    made = onnx_nb.generate(int8, ids.tolist(), images=images, max_new_tokens=NEW)
    assert len(made.tokens[0]) >= 1 and made.prefill_ms > 0
    assert onnx_nb.to_transformers(int8).onnx_path == int8.path


def test_a_quantized_vision_part_is_judged_on_the_chain_and_generates(llava: tuple[Any, Any]) -> None:
    """INT8 of the vision part (the tower and projector): judged by generation through the chain with it in the
    vision file's place, and the variant generates from images with the export's embed and decoder files."""
    model, result = llava
    int8 = onnx_nb.quantize(result.parts["vision"], method="dynamic")
    assert int8.parity.generation and "and this vision file" in " ".join(int8.parity.notes), int8.parity.notes
    assert {r.output for r in int8.parity.rows} == {"logits", "tokens"}
    ids, pixels = _prompt(model, result.image_token, 1, seed=4)
    made = onnx_nb.generate(int8, ids.tolist(), images={k: v.numpy() for k, v in pixels.items()},
                            max_new_tokens=NEW)
    assert made.tokens[0] and made.prefill_ms > 0
    # optimize() of the decoder part keeps its inputs (embeddings from the embed file; the decoder route would
    # re-export the whole model as a text decoder) and passes on the chain
    fast = onnx_nb.optimize(result.parts["decoder"], overwrite=True)
    assert fast.parity, fast.parity.failures
    assert "and this decoder file" in " ".join(fast.parity.notes)


def test_the_latency_table_times_the_chain_first_token_with_an_image_and_decode(llava: tuple[Any, Any]) -> None:
    """benchmark() of the export (and of a variant of its decoder part) times what generate() runs: the prefill
    row is the image through the vision file plus the prompt, the decode row one token, each beside PyTorch's."""
    _, result = llava
    int8 = onnx_nb.quantize(result.parts["decoder"], method="dynamic", overwrite=True)  # the fixture's, maybe made
    table = onnx_nb.benchmark([result, int8], providers=["cpu"], warmup=1, runs=3, min_seconds=0, progress=False,
                              shapes=[{"prompt": 8}, {"past": 8}])
    rows = {(r.variant, r.shape): r for r in table.rows}
    shapes = {"prefill: an image + 8 text tokens", "decode 1 token after 8"}
    assert {s for _, s in rows} == shapes, rows.keys()
    for name in ("PyTorch eager", "llava", int8.name):
        for shape in shapes:
            assert rows[(name, shape)].status == "ok" and rows[(name, shape)].p50_ms > 0, (name, shape)
    held = sum(Path(result.parts[part].path).stat().st_size for part in ("vision", "embed", "decoder")) / 2**20
    for shape in shapes:  # the chain's sessions hold its three files' weights, whatever the process grew by
        assert rows[("llava", shape)].peak_mb >= 0.9 * held, (shape, rows[("llava", shape)].peak_mb, held)
    assert any("time to first token with an image" in n for n in table.notes)


def _patches(model: Any, grids: list[list[int]], seed: int) -> dict[str, Any]:
    """Random flat patches for images of ``grids`` (Qwen-VL's processor output: rows of patches, the grids)."""
    import torch

    width = int(np.prod([model.config.vision_config.temporal_patch_size, model.config.vision_config.patch_size,
                         model.config.vision_config.patch_size, 3]))
    g = torch.Generator().manual_seed(seed)
    return {"pixel_values": torch.randn(sum(int(np.prod(x)) for x in grids), width, generator=g),
            "image_grid_thw": torch.tensor(grids)}


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_qwen_takes_any_grid_and_numbers_positions_as_get_rope_index(family: str,
                                                                    exported: Callable[[str], Any]) -> None:
    """One vision file for every grid (the tower's grid tensors as inputs, computed per image), checked at another
    grid at export; a prompt with two images of other grids than the sample's, one left-padded row, gives the
    three position sections the model's own get_rope_index gives, and PyTorch's tokens."""
    import onnxruntime as ort
    import torch

    from onnx_nb.kinds.vlm.chain import token_feed, with_positions
    from onnx_nb.kinds.vlm.parts import features_of, per_image

    model, result = exported(family)
    vision = result.parts["vision"]
    assert vision.status == "verified" and vision.exporter == "dynamo", vision.warnings
    sample_grid = result.parts["vision"].check["shapes"]["pixel_values"][0]
    token = result.image_token
    grids = [[1, 4, 6], [1, 6, 10]]  # neither the sample's grid nor the export check's
    assert all(int(np.prod(g)) != sample_grid for g in grids)
    pixels = _patches(model, grids, seed=4)
    merge = model.config.vision_config.spatial_merge_size
    rows = [int(np.prod(g)) // merge ** 2 for g in grids]
    text = [5, 6, 7]
    ids = torch.tensor([[0, 0, *text[:2], *[token] * rows[0], text[2], *[token] * rows[1], 8, 9],
                        [*text, *[token] * rows[0], 10, *[token] * rows[1], 11, 12, 13]])
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # the first row's first two tokens are padding
    both = {"pixel_values": torch.cat([pixels["pixel_values"]] * 2), "image_grid_thw": torch.tensor(grids * 2)}
    files = {p: ort.InferenceSession(str(result.folder / f"{p}.onnx"), providers=["CPUExecutionProvider"])
             for p in ("vision", "embed")}
    numpy_pixels = {k: v.numpy() for k, v in both.items()}
    images = per_image(files["vision"], numpy_pixels, model)
    assert np.abs(np.concatenate(images) - features_of(model, both).numpy()).max() < 1e-4
    positions = np.maximum(np.cumsum(mask.numpy(), 1) - 1, 0)
    packed = with_positions(files["embed"], images, numpy_pixels, model, token)  # as the runners hold them
    got = token_feed(files["embed"], ids.numpy(), packed, positions)["position_ids"]
    assert [i.name for i in files["embed"].get_inputs()][-1] == "image_positions"  # whole numbers, int64
    want, _ = model.model.get_rope_index(ids, mm_token_type_ids=(ids == token).int(),
                                         image_grid_thw=both["image_grid_thw"], attention_mask=mask)
    real = mask.numpy().astype(bool)
    assert got.shape == (3, *ids.shape) and (got[:, real] == want.numpy()[:, real]).all()
    one = ids[1:]
    with torch.no_grad():
        want_tokens = model.generate(input_ids=one, attention_mask=torch.ones_like(one), **pixels,
                                     mm_token_type_ids=(one == token).int(), max_new_tokens=NEW,
                                     do_sample=False)[:, one.shape[1]:].tolist()
    got_tokens = onnx_nb.generate(result, one.tolist(), images={k: v.numpy() for k, v in pixels.items()},
                                  max_new_tokens=NEW).tokens
    assert got_tokens == want_tokens
    if family == "qwen2_vl":  # a variant of the vision part keeps its grid inputs, judged on the chain
        half = onnx_nb.quantize(vision, method="fp16")
        assert half.parity and "and this vision file" in " ".join(half.parity.notes), half.parity.notes
        assert onnx_nb.generate(half, one.tolist(), images={k: v.numpy() for k, v in pixels.items()},
                                max_new_tokens=2).tokens[0]


def _two_images_give_pytorchs_tokens(model: Any, result: Any, pixels: dict[str, Any], rows: list[int]) -> Any:
    """One prompt holding two images (``rows`` tokens each) of the processor's padded batch ``pixels``: the tokens
    of onnx_nb.generate and of transformers' generate() over the files are PyTorch's. Returns the prompt."""
    import torch

    token = result.image_token
    ids = torch.tensor([[5, 6] + [token] * rows[0] + [7] + [token] * rows[1] + [8, 9]])
    want = _torch_tokens(model, ids, pixels, token)
    got = onnx_nb.generate(result, ids.tolist(), images={k: v.numpy() for k, v in pixels.items()}, max_new_tokens=NEW)
    assert got.tokens == want
    with torch.no_grad():
        again = onnx_nb.to_transformers(result).generate(**_inputs(model, ids, pixels, token), max_new_tokens=NEW,
                                                         do_sample=False)
    assert again[:, ids.shape[1]:].tolist()[0][:len(want[0])] == want[0]
    return ids


@pytest.mark.parametrize("family", ["llava_next", "llava_onevision"])
def test_llava_next_takes_any_image_size_its_tiles_packed_by_the_models_own_rule(
        exported: Callable[[str], Any], family: str) -> None:
    """LLaVA-NeXT tiles each image by its image_sizes row and packs the tiles' rows (arranged, unpadded, a newline
    after each row): its vision file takes one image's tiles, any count, and the packing as an index the runner
    computes per size from the model's own pack_image_features. Two images of other sizes (2 and 3 tiles, padded
    to 3 as the processor pads them) in one prompt give PyTorch's tokens. LLaVA-OneVision (SigLIP's tiles, no class
    row) the same, and with its processor's image counts (two images in one prompt: one tile each)."""
    import torch

    from onnx_nb.kinds.vlm.parts import features_of
    from onnx_nb.kinds.vlm.tiled import tiles_of

    model, result = exported(family)
    assert result.image_sizes == "any image size" and result.chain["passed"], (result.image_sizes, result.chain)
    side = int(model.config.vision_config.image_size)
    sizes = [[side, 2 * side], [side - 12, side - 2]]
    assert [tiles_of(model, s) for s in sizes] == [3, 2]
    g = torch.Generator().manual_seed(4)
    values = torch.randn(2, 3, 3, side, side, generator=g)
    values[1, 2] = 0  # the second image's third tile is the batch's padding
    pixels = {"pixel_values": values, "image_sizes": torch.tensor(sizes)}
    rows = [features_of(model, {"pixel_values": values[k:k + 1, :tiles_of(model, sizes[k])],
                                "image_sizes": pixels["image_sizes"][k:k + 1]}).shape[0] for k in range(2)]
    ids = _two_images_give_pytorchs_tokens(model, result, pixels, rows)
    narrow = {"pixel_values": values[:, :2].numpy(), "image_sizes": np.array(sizes)}  # too few tiles for the first
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"makes 3 tiles and its pixel_values holds 2"):
        onnx_nb.generate(result, ids.tolist(), images=narrow, max_new_tokens=2)
    if family == "llava_onevision":  # the processor's two images in one prompt: one tile each, not tiled
        alone = {"pixel_values": values[:, :1], "image_sizes": pixels["image_sizes"],
                 "batch_num_images": torch.tensor([2])}
        with torch.no_grad():
            rows = [len(f) for f in model.get_image_features(**alone, return_dict=True).pooler_output]
        assert rows[0] == rows[1] == (side // 8) ** 2 + 1  # a tile's rows and the newline
        _two_images_give_pytorchs_tokens(model, result, alone, rows)


def test_a_vision_file_traced_at_one_size_refuses_another_naming_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the file for every size is not taken (here: LLaVA-NeXT with its tiled module turned away), the vision
    file is traced at the sample's image size, recorded in its metadata; a picture of another size is refused."""
    from onnx_nb.kinds.vlm import tiled as vlm_tiled
    from onnx_nb.kinds.vlm.parts import pixel_sample

    monkeypatch.setattr(vlm_tiled, "tiled_part", lambda *_: None)
    model = build_vlm("llava_next")
    result = onnx_nb.export(model, out=tmp_path / "n", progress=False)
    assert result.image_sizes == "one image size" and result.chain["passed"], result.chain
    pixels = {k: v.numpy() for k, v in pixel_sample(model).items()}
    h, w = (int(x) for x in pixels["image_sizes"][0])
    with pytest.raises(onnx_nb.InvalidArgumentError, match=rf"exported for images of {h}x{w} pixels"):
        onnx_nb.generate(result, [[1, 2, 3]], images={**pixels, "image_sizes": np.array([[h, 2 * w]])},
                         max_new_tokens=2)


def test_pixtral_takes_any_image_size_each_cropped_from_the_processors_batch(exported: Callable[[str], Any]) -> None:
    """Mistral 3's tower (Pixtral) crops each image of a padded batch to its image_sizes row: its vision file takes
    one image of any size, its size read from its shape, checked at another size at export; two images of other
    sizes than the sample's in one prompt, padded together as the processor pads them, give PyTorch's tokens."""
    import torch

    from onnx_nb.kinds.vlm.parts import features_of

    model, result = exported("mistral3")
    assert result.image_sizes == "any image size" and result.chain["passed"], (result.image_sizes, result.chain)
    assert result.parts["vision"].exporter == "dynamo" and not result.parts["vision"].warnings
    step = int(model.config.vision_config.patch_size) * int(model.config.spatial_merge_size)
    sizes = [[2 * step, 5 * step], [4 * step, 3 * step]]
    g = torch.Generator().manual_seed(4)
    values = torch.zeros(2, 3, 4 * step, 5 * step)  # the processor's batch: each image padded to the largest
    for k, (h, w) in enumerate(sizes):
        values[k, :, :h, :w] = torch.randn(3, h, w, generator=g)
    pixels = {"pixel_values": values, "image_sizes": torch.tensor(sizes)}
    rows = [features_of(model, {"pixel_values": values[k:k + 1], "image_sizes": pixels["image_sizes"][k:k + 1]})
            .shape[0] for k in range(2)]
    assert rows == [10, 12]  # (h / step) * (w / step) each
    ids = _two_images_give_pytorchs_tokens(model, result, pixels, rows)
    bad = {"pixel_values": values.numpy(), "image_sizes": np.array([[5 * step, 5 * step], sizes[1]])}
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"image_sizes row 0 is .* must fit inside"):
        onnx_nb.generate(result, ids.tolist(), images=bad, max_new_tokens=2)


def test_a_results_text_and_pictures_are_escaped_once() -> None:
    """Text a model made is escaped once in the result's HTML (not twice: "&amp;lt;"), and only PNG data URIs are
    shown as pictures."""
    made = onnx_nb.GenerationResult([[1]], [[2]], ['<b>"a" & b</b>'], 1.0, images=['javascript:alert(1)'])
    shown = made._repr_html_()
    assert "&lt;b&gt;&quot;a&quot; &amp; b&lt;/b&gt;" in shown and "&amp;lt;" not in shown
    assert "<img" not in shown and "javascript" not in shown


def test_the_pipeline_runs_every_step_on_a_vision_language_model(tmp_path: Path) -> None:
    """pipeline(vlm): the export as its three files in out=, parity, optimize and INT8 of the decoder part judged on
    the chain, the latency table of the chain beside PyTorch's; the HTML report writes."""
    report = onnx_nb.pipeline(build_vlm("llava"), out=tmp_path / "p", progress=False, min_seconds=0.1)
    assert [r.status for r in report.steps] == ["ok"] * 5, report
    assert (tmp_path / "p" / "decoder.onnx").exists() and (tmp_path / "p" / "vision.onnx").exists()
    quantized = report["quantize"]
    assert quantized.parity.generation and "and this decoder file" in " ".join(quantized.parity.notes)
    shapes = {r.shape for r in report["latency"].rows}
    assert any(s.startswith("prefill: an image") for s in shapes), shapes
    report.save_html(tmp_path / "report.html")
    assert "LlavaForConditionalGeneration" in (tmp_path / "report.html").read_text()


# EXAONE 4.5 takes flat patches with a grid and numbers its text plainly (no three position sections); HY-V4-VL's
# decoder keeps a sparse-attention indexer beside its latent key/value cache, which the chain check feeds empty;
# GLM-OCR's tower normalises the query and key heads of its fused qkv projection, which transformers' export patch
# for span attention leaves out (onnx-nb puts them back: its vision file takes every grid); HyperCLOVAX-Vision-2's
# tower is its vision_model and a projector follows it, both in its every-grid file; DeepSeek-VL's features come from
# its inner model's get_image_features (the outer class has none); Qwen3.5's decoder keeps linear-attention states
# (convolution and recurrent) beside its full-attention keys and values: its decoder part takes one embedding per
# step, the prompt's (images merged once) fed token by token, in the chain check and in generate(); Cosmos 3 Edge's
# tower loops over its spans as Qwen2-VL's does but transformers' export patches do not list its attention class
# (onnx-nb reshapes it the same way: the loop's lengths are data even at one grid); Kimi-K2.5's tower merges by
# merge_kernel_size and takes each patch as [channels, patch, patch]; VideoLLaMA 3's takes flat rows with
# image_merge_sizes beside its grid, which only its inner model's get_image_features names
SWEPT = ["exaone4_5", "hy_v4_vl", "glm_ocr", "hyperclovax_vision_v2", "deepseek_vl", "qwen3_5", "cosmos3_edge",
         "kimi_k25", "video_llama_3"]
EVERY_GRID = {"exaone4_5", "glm_ocr", "hyperclovax_vision_v2", "qwen3_5"}


@pytest.mark.parametrize("model_type", SWEPT)
def test_registry_type_exports_and_generates_as_the_sweep_runs_it(model_type: str, tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import vlm_sweep

    row = vlm_sweep.one(model_type, vlm_sweep.registry()[model_type], tmp_path / "model")
    assert row["pytorch"] == "ok" and row["size"] == "tiny", row
    assert row["export"] == "ok" and row["generate"] == "same", row
    assert (row["images"] == "every grid") == (model_type in EVERY_GRID), row


def test_a_family_numbering_image_rows_from_a_fixed_origin_is_refused(tmp_path: Path) -> None:
    """HunYuan-VL's get_rope_index numbers an image's rows from 0 wherever the image starts (and counts the images):
    the embed file's table of offsets past the image's start cannot follow it, so the export says so."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import vlm_sweep

    row = vlm_sweep.one("hunyuan_vl", vlm_sweep.registry()["hunyuan_vl"], tmp_path / "model")
    assert row["pytorch"] == "ok", row
    assert row["export"].startswith("ExportError") and "fixed origin" in row["export"], row


def test_a_tower_block_named_twice_gives_one_deepstack_layer() -> None:
    """Qwen3-VL's tower gives one deepstack feature per block it names, a block named twice once; the decoder part
    adds as many as the tower gives."""
    import torch
    import transformers

    from onnx_nb.kinds.vlm.parts import deepstack_layers

    config = build_vlm("qwen3_vl").config
    config.vision_config.deepstack_visual_indexes = [1, 1, 0, 7]  # 7: past the tower's depth of 2
    with torch.device("meta"):
        model = transformers.Qwen3VLForConditionalGeneration(config)
    assert deepstack_layers(model) == 2


def test_tiles_as_the_processor_gives_them(exported: Callable[[str], Any]) -> None:
    """SmolVLM's processor (Idefics3's alike) splits each picture into tiles and gives ``[batch, images, 3, H, W]``
    with a pixel mask beside, a row with fewer tiles padded with all-zero images: generate() and transformers'
    generate() over the files (greedy, 2 beams) take it as PyTorch does."""
    import torch

    model, result = exported("smolvlm")
    g = torch.Generator().manual_seed(1)
    pixels = torch.randn(2, 5, 3, 32, 32, generator=g)
    pixels[1, 3:] = 0  # the second prompt's picture has three tiles
    pixel_mask = torch.ones(2, 5, 32, 32, dtype=torch.bool)
    pixel_mask[1, 3:] = False
    token, rows = result.image_token, 4  # 4 rows per tile: 16 patches, merged 2x2
    first = [5, 6] + [token] * (rows * 5) + [7, 8, 9]
    second = [5, 11] + [token] * (rows * 3) + [7, 8, 9]
    ids = torch.tensor([first, [0] * (len(first) - len(second)) + second])
    mask = (torch.arange(ids.shape[1]) >= len(first) - len(second)).long()[None].repeat(2, 1)
    mask[0] = 1
    given = {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels, "pixel_attention_mask": pixel_mask}
    with torch.no_grad():
        want = model.generate(**given, max_new_tokens=NEW, do_sample=False)
    made = onnx_nb.generate(result, {k: v.numpy() for k, v in given.items()}, max_new_tokens=NEW, eos_token_id=-1)
    assert made.tokens == want[:, ids.shape[1]:].tolist()
    wrapped = onnx_nb.to_transformers(result)
    with torch.no_grad():
        assert wrapped.generate(**given, max_new_tokens=NEW, do_sample=False, num_beams=2).tolist() == \
            model.generate(**given, max_new_tokens=NEW, do_sample=False, num_beams=2).tolist()


def test_a_naflex_tower_takes_its_processors_padded_patches(tmp_path: Path) -> None:
    """LFM2-VL's SigLIP 2 tower takes flat patches with each image's rows and columns (``spatial_shapes``) and a patch
    mask: built tiny as the sweep builds it, its default export traces the tower at one grid (``spatial_shapes`` a
    constant of the file, as Qwen-VL's one-grid files keep theirs: ``image_sizes`` says "one grid"); its image
    processor's output, padded to more patches than the image has, gives PyTorch's tokens for two pictures (the
    padding cut off before the file), and another grid is refused naming it."""
    import sys

    import torch
    import transformers
    from PIL import Image
    from transformers.models.lfm2_vl.image_processing_lfm2_vl import Lfm2VlImageProcessor

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import registry_sweep
    import vlm_sweep

    torch.manual_seed(0)
    transformers.Lfm2VlForConditionalGeneration(vlm_sweep.tiny_config(
        "lfm2_vl", registry_sweep.TINY, vlm_sweep.VISION)).save_pretrained(tmp_path / "model")
    model = transformers.AutoModelForImageTextToText.from_pretrained(tmp_path / "model").eval()
    result = onnx_nb.export(str(tmp_path / "model"), out=tmp_path / "onnx", progress=False)
    assert result and result.image_sizes == "one grid", result.chain
    processor = Lfm2VlImageProcessor(do_image_splitting=False, min_image_tokens=64, max_image_tokens=100,
                                     encoder_patch_size=16, downsample_factor=2)
    for seed in (0, 1):
        picture = Image.fromarray(np.random.default_rng(seed).integers(0, 255, (256, 256, 3), dtype=np.uint8))
        pixels = processor(images=[picture], return_tensors="pt")
        assert pixels["pixel_values"].shape[1] > int(pixels["pixel_attention_mask"].sum()), "padded patches"
        rows = int((pixels["spatial_shapes"][0] // model.config.downsample_factor).prod())
        ids = torch.tensor([[11, 25, 36] + [model.config.image_token_id] * rows + [47, 3]])
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), **pixels}
        with torch.no_grad():
            want = model.generate(**inputs, max_new_tokens=NEW, do_sample=False)[:, ids.shape[1]:].tolist()
        feed = {k: v.numpy() for k, v in inputs.items()}
        got = onnx_nb.generate(result, feed, max_new_tokens=NEW).tokens
        assert got == want, (seed, got, want)
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"spatial_shapes .*16x16 patches"):
        onnx_nb.generate(result, {**feed, "spatial_shapes": np.array([[32, 8]])}, max_new_tokens=NEW)
