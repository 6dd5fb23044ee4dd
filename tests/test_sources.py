"""The source layer (onnx_nb/steps/export/adapters/): one registry recognises a model, one adapter per kind answers for
it. Read from the source like tests/test_layers.py: no module outside the registry's folder and runtime/facts.py (the
one place a bare file's inputs are read for meaning) decides again what kind of model it holds; no module over 400
lines; export() fits a screen. Then the table itself, and what the shape fixed: arguments checked before any model is
looked at, cache=True on a plain module refused, check_parity(yolo_network, file) built as its export was, a
torchvision detector's own list-of-images sample taken."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import onnx_nb

PACKAGE = Path(__file__).resolve().parent.parent / "onnx_nb"
# the kinds' packages, their protocol and registry, and the one reader of a bare file's meaning
ALLOWED = ("kinds/", "steps/export/adapters/", "runtime/facts.py")
# what deciding "what kind of model is this" looks like in code (a numpy dtype's kind is not one)
KIND_DECISIONS = [
    r"(?<!dtype)\.kind\s*(==|!=)\s*[\"']",
    r"(?<!dtype)\.kind\s+(not\s+)?in\s*[\(\[\{]\s*[\"']",
    r"(?<!dtype)\.kind\s+(not\s+)?in\s+[A-Z_]{3,}",
    r"(?<!def )\b(kind_of|is_causal_lm|is_seq2seq|_is_seq2seq_file|keras_on_torch|is_gqa_file|is_unet|is_sam|"
    r"is_hf_sam|is_ultralytics|is_torchvision_detector|is_diffusion_pipeline|is_sentence_transformer|"
    r"is_hf_model|is_vlm)\(",
    r"startswith\(\s*[\"']past_key_values\.",
    r"[\"']\.encoder\.[\"']\s+in\b",
    r"cache_layout\s+is\s+(not\s+)?None",
    r"isinstance\([^)]*\b(DiffusionExport|SamExport|PartsExport)\b",
    r"(hasattr|getattr)\([^)]*[\"']parts[\"']",  # "written as several files" sniffed from a result's attributes
    r"cache_layout[\"']\s*,\s*None\)\s+is\s+(not\s+)?None",
    # how a model generates, read from its record or its file's facts and branched on (steps take
    # adapters.registry.generation_of's answer from a table instead)
    r"\.generation\s*(==|!=|is\b|in\b)",
    r"\bgeneration_of\([^)]*\)\s*(==|!=|in\b)",
    # a model's type or class name compared (an adapter or a capability answers instead)
    r"\bmodel_type\s*(==|!=|(not\s+)?in\b)",
    r"__name__\.(endswith|startswith)\(",
]


def kind_decisions() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(ALLOWED):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if any(re.search(p, code) for p in KIND_DECISIONS):
                found.append(f"{rel}:{n}: {line.strip()}")
    return found


def test_no_kind_decision_outside_the_source_layer() -> None:
    assert kind_decisions() == []
    # the guard sees what it guards: each pattern matches the code it is written for
    samples = ['if source.kind == "module":', "x = kind_of(model)", 'any(n.startswith("past_key_values.") for n in a)',
               "if export.cache_layout is not None:", "isinstance(result, DiffusionExport)",
               'if ".encoder." in name:', "elif source.kind in NATIVE:", 'hasattr(export, "parts")',
               'getattr(source, "cache_layout", None) is not None', "is_vlm(model)",
               'getattr(export, "parts", None)', 'elif file_facts(path).generation == "seq2seq":',
               "if export.source.generation is not None:", 'generation_of(result) == "decoder"',
               'cls = A if config.model_type == "whisper" else B', 'type(model).__name__.endswith(("ForCausalLM",))',
               "if model_type in _AUDIO_TYPES:"]
    assert all(any(re.search(p, s) for p in KIND_DECISIONS) for s in samples)
    assert not any(re.search(p, 'value.dtype.kind == "f"') for p in KIND_DECISIONS)


def test_one_rule_for_the_other_shape_and_one_table_of_sample_sizes() -> None:
    import numpy as np
    import torch

    from onnx_nb.kinds.foreign.converting import grown
    from onnx_nb.kinds.hf.samples import BATCH, SEQUENCE
    from onnx_nb.results.export import ModelSource
    from onnx_nb.runtime.shapes import SAMPLE_SIZES, other_size, other_sizes
    from onnx_nb.steps.export.caches.decoder import SAMPLE_PAST, SAMPLE_SEQUENCE
    from onnx_nb.steps.export.machinery.inputs import Sample, growth
    from onnx_nb.steps.variants.variants import too_big_advice

    sizes = {"batch": 2, "sequence": 7, "height": 32, "width": 24}
    # the batch one more; other axes by 2, 4, 5 (or a third); image sides by their power-of-two step
    assert other_sizes(sizes) == {"batch": 3, "sequence": 9, "height": 64, "width": 32}
    assert other_size(7) == 10 and other_size(224) == 320  # an axis of unknown kind keeps what it divides by
    assert [other_sizes({"batch": b})["batch"] for b in (1, 2, 7, 8, 256)] == [2, 3, 8, 7, 7]  # a large one: small
    axes = {"ids": {0: "batch", 1: "sequence"}, "image": {0: "batch", 2: "height", 3: "width"}}
    feed = {"ids": np.ones((2, 7), np.int64), "image": np.zeros((2, 3, 32, 24), np.float32)}
    # the converters' check (Keras, TensorFlow, scikit-learn, adopted files) and the PyTorch route's ask the rule
    assert {k: v.shape for k, v in grown(feed, axes).items()} == {"ids": (3, 9), "image": (3, 3, 64, 32)}
    sample = Sample(list(feed), [torch.from_numpy(v) for v in feed.values()], False, axes)
    assert growth(sample) == {"batch": 1, "sequence": 2, "height": 32, "width": 8}
    # the sample makers read their sizes from one table
    assert (BATCH, SEQUENCE, SAMPLE_SEQUENCE, SAMPLE_PAST) == tuple(
        SAMPLE_SIZES[k] for k in ("batch", "sequence", "step_sequence", "past_sequence"))
    # "is it a decoder" read from the record the adapter wrote, not from the cache layout's presence
    decoder = ModelSource("hf-dir", "m", location="/models/m", generation="decoder")
    assert 'precision="int4"' in too_big_advice(decoder)
    assert "precision" not in too_big_advice(ModelSource("hf-dir", "m", location="/models/m"))


def test_modules_stay_small_and_export_fits_a_screen() -> None:
    long = {p.relative_to(PACKAGE).as_posix(): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}, long
    tree = ast.parse((PACKAGE / "steps" / "export" / "exporting.py").read_text())
    export = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "export")
    body = export.body[1:]  # after its docstring
    assert body[-1].end_lineno - body[0].lineno + 1 <= 12  # type: ignore[operator]


def test_the_table_recognises_each_kind_and_records_it(tmp_path: Path, gpt2_export: onnx_nb.ExportResult) -> None:
    import torch
    import transformers

    import tiny_models
    from onnx_nb.steps.export.adapters.registry import adapter_of, adapters, resolve
    from onnx_nb.steps.export.args import ExportArgs

    keys = [s.key for s in adapters()]
    assert keys == ["yolo", "torchvision", "diffusers", "sam", "onnx", "keras-torch", "keras", "tensorflow",
                    "sklearn", "vlm", "speech-llm", "lean", "hf", "torch"]
    bert = tiny_models.build("bert")
    folder = tiny_models.save("bert", tmp_path / "bert")
    assert resolve(bert).key == "hf" and resolve(str(folder)).key == "hf" and resolve(folder).key == "hf"
    assert resolve(str(folder), ExportArgs(precision="int4")).key == "lean"
    assert resolve(torch.nn.Linear(2, 2)).key == "torch"
    sam_folder = tmp_path / "sam"
    sam_folder.mkdir()
    (sam_folder / "config.json").write_text('{"model_type": "sam"}')
    assert resolve(sam_folder).key == "sam"
    # a speech LLM by its audio tower and token ids (Voxtral names no audio token); an audio token with no tower to
    # fill it (a text-only Gemma 4) is a plain decoder
    for name, config, key in (
            ("voxtral", {"model_type": "voxtral", "architectures": ["VoxtralForConditionalGeneration"],
                         "audio_config": {"model_type": "voxtral_encoder"}}, "speech-llm"),
            ("gemma4", {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"],
                        "audio_token_id": 7, "audio_config": None}, "hf")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        assert resolve(tmp_path / name).key == key, name
    voxtral = transformers.VoxtralForConditionalGeneration(transformers.VoxtralConfig(
        text_config={"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 64},
        audio_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}))
    assert resolve(voxtral).key == "speech-llm"
    with pytest.raises(onnx_nb.ExportError, match="names no audio token"):  # the default config's
        onnx_nb.export(voxtral, out=tmp_path / "v", progress=False)
    result = onnx_nb.export(bert, out=tmp_path / "b.onnx", progress=False)
    assert (result.source.adapter, result.source.generation, result.source.eager) == ("hf", None, True)
    assert adapter_of(result).key == "hf" and adapter_of(str(result.path)).key == "onnx"
    assert resolve(result.path).key == "onnx"
    decoder = gpt2_export  # read only (conftest's shared exports)
    assert decoder.source.generation == "decoder" and decoder.cache_layout is not None
    plain = onnx_nb.export(torch.nn.Linear(4, 2), torch.randn(2, 4), out=tmp_path / "l.onnx", progress=False)
    assert (plain.source.kind, plain.source.adapter) == ("module", "torch")
    assert isinstance(bert, transformers.PreTrainedModel)


def test_arguments_are_checked_before_the_model_and_refused_by_what_takes_them(tmp_path: Path) -> None:
    import torch

    from onnx_nb.steps.export.args import ARGUMENTS, ExportArgs

    with pytest.raises(onnx_nb.InvalidArgumentError, match="opset=99"):
        onnx_nb.export("no/such/model", opset=99)  # said before anything is looked for
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"nms=.*conf"):
        onnx_nb.export("no/such/model", nms={"confidence": 0.3})
    # cache=True on a plain module was silently ignored: a clear error now
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"cache=True is for generative models.*plain"):
        onnx_nb.export(torch.nn.Linear(2, 2), torch.randn(1, 2), cache=True, out=tmp_path / "c.onnx")
    assert ExportArgs(opset=17, cache=False).given == ("opset", "cache")
    import inspect

    from onnx_nb.steps.export.exporting import export

    # the table and export()'s signature name the same arguments with the same defaults, and the magic and the
    # command line reach every one of them (progress aside: a terminal always shows it)
    params = {n: p.default for n, p in inspect.signature(export).parameters.items() if n != "model"}
    assert {a.name: a.default for a in ARGUMENTS} == params
    from onnx_nb.frontends import cli, specs

    flags = {flag for names, _, _ in specs.EXPORT for flag in names}
    assert {a.flag for a in ARGUMENTS if a.name != "progress"} <= flags
    ns = cli.parser().parse_args(["export", "m", "--nms", "conf=0.3,max_det=10", "--cache", "false", "--name", "x"])
    kwargs = specs.export_kwargs(ns)
    assert kwargs["nms"] == {"conf": 0.3, "max_det": 10} and kwargs["cache"] is False and kwargs["name"] == "x"
    assert set(kwargs) == set(params) - {"sample", "progress"}


def test_a_yolo_network_is_its_own_reference(tmp_path: Path) -> None:
    """check_parity(YOLO(...).model, variant) failed with "BaseModel.forward() missing 1 required positional
    argument: 'x'": its reference was built by another rule than its export. Now the adapter builds both."""
    import tiny_models

    torch = pytest.importorskip("torch")
    net = tiny_models.build_yolo()
    result = onnx_nb.export(net, torch.rand(1, 3, 320, 320), nms=True, out=tmp_path / "y.onnx", progress=False)
    report = onnx_nb.check_parity(net, result.path, progress=False)  # the suppression read back from the file
    assert report and all("matched" in row.note for row in report.rows), repr(report)
    variant = onnx_nb.optimize(result, out=tmp_path / "y.opt.onnx", validate=False)
    assert onnx_nb.check_parity(net, variant, progress=False)


def test_a_detector_takes_the_sample_it_is_called_with(tmp_path: Path) -> None:
    """A torchvision detector is called with a list of image tensors; export() took only a tensor or a dict
    ("sample is a list, not a tensor"). One image in a list is that image; several are refused clearly."""
    torch = pytest.importorskip("torch")
    detection = pytest.importorskip("torchvision.models.detection")

    torch.manual_seed(0)
    model = detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=3)
    image = torch.rand(3, 240, 320)
    with pytest.raises(onnx_nb.SampleError, match=r"list of 2 images.*one image per call"):
        onnx_nb.export(model, [image, image], out=tmp_path / "d2.onnx", progress=False)
    result = onnx_nb.export(model, [image], out=tmp_path / "d.onnx", exporter="torchscript", progress=False)
    assert result.check["passed"] and result.source.sample["images"].shape == (1, 3, 240, 320)
