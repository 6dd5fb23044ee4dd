"""Every tutorial runs headlessly (nbclient) with assertions on what it shows."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import executed
import nbformat
import pytest
from nbclient import NotebookClient

import lab
from notebook_memory import PEAK_EXPR, keep_peak
from notebook_outputs import (
    by_source,
    check_quickstart,
    outputs,
    plotly_titles,
    remember_widgets,
    text,
    widget,
)

NOTEBOOKS = executed.NOTEBOOKS
PEAK_MARK = "onnx-nb-test peak memory:"
# The tutorials start no worker of their own (isolation is opt-in); 07's headless Chromium stands in for the reader's
# browser, which on Binder is not in the session's memory.
PEAK_CELL = f"print({PEAK_MARK!r}, {PEAK_EXPR})"


def run_cells(nb: Any, folder: Path, **env: str) -> None:
    """Run every cell of ``nb`` in a new kernel in ``folder``, as a reader's Run All would, with this process's
    environment (``env`` added), less its ``ONNX_NB_OUT``: a step given no ``out=`` writes beside the notebook."""
    NotebookClient(nb, kernel_name="python3", timeout=600, store_widget_state=True,
                   extra_arguments=["--IPKernelApp.log_level=ERROR"],  # ipykernel's notice about TCP: not ours
                   resources={"metadata": {"path": str(folder)}}).execute(
        env={**{k: v for k, v in os.environ.items() if k != "ONNX_NB_OUT"}, **env})


def execute(name: str, tmp_path: Path) -> list[Any]:
    """Run the tutorial as a reader's Run All would, then read the kernel's peak memory: over Binder's budget fails
    the test (notebook_memory). The cell added here is not in the docs' copy."""
    src = tmp_path / name
    shutil.copy(NOTEBOOKS / name, src)
    nb = nbformat.read(src, as_version=4)
    shipped = len(nb.cells)
    nb.cells.append(nbformat.v4.new_code_cell(PEAK_CELL))
    # the kernel's own temporary folder, removed afterwards: a tutorial's tempfile.mkdtemp() work folder (tens of
    # megabytes of models) must not outlive its test
    kernel_tmp = Path(tempfile.mkdtemp(prefix="nbkernel-"))
    try:
        run_cells(nb, tmp_path, TMPDIR=str(kernel_tmp))
    finally:
        shutil.rmtree(kernel_tmp, ignore_errors=True)
    kernel_mb = int(text(nb.cells[-1]).split(PEAK_MARK)[1].split()[0])
    nb.cells = nb.cells[:shipped]
    keep_peak(Path(name).stem, name, kernel_mb, [])
    executed.keep(nb, name, tmp_path, kernel_tmp)  # the docs' copy
    remember_widgets(nb)
    return [c for c in nb.cells if c.cell_type == "code"]


def test_all_tutorials_are_tested() -> None:
    """Each tutorial has its test here, 07_browser in a real JupyterLab page (tests/test_browser.py)."""
    assert "07_browser.ipynb" in (Path(__file__).parent / "test_browser.py").read_text()
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(
        ["01_quickstart.ipynb", "02_huggingface_tasks.ipynb", "03_debugging_parity.ipynb",
         "04_quantization_autotune.ipynb", "05_providers_latency.ipynb", "06_generation.ipynb",
         "07_browser.ipynb", "08_diffusion.ipynb", "09_yolo.ipynb", "10_beyond_pytorch.ipynb",
         "11_vision_language.ipynb", "12_evaluation.ipynb", "13_other_tools.ipynb"])


@pytest.mark.lower_bounds
def test_quickstart(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Run by nbclient where no JupyterLab runs it: on the lower bounds, or with no Chromium. On the lock the browser
    test runs the same cells in JupyterLab, checks them with the same checks (notebook_outputs.check_quickstart) and
    then the Studio's "Run all steps" that its last cell invites: a second run here cost the suite 72 s."""
    if lab.available() and "lower_bounds" not in (request.config.option.markexpr or ""):
        pytest.skip("run in JupyterLab: test_browser.py::test_quickstart_and_studio_in_jupyterlab")
    check_quickstart(execute("01_quickstart.ipynb", tmp_path), tmp_path)


@pytest.mark.lower_bounds
def test_huggingface_tasks(tmp_path: Path) -> None:
    cells = execute("02_huggingface_tasks.ipynb", tmp_path)
    assert "using a local stand-in for distilbert-base-uncased-finetuned-sst-2-english" in text(cells[1])
    assert "stand-in:" in text(cells[2]) and ("POSITIVE" in text(cells[2]) or "NEGATIVE" in text(cells[2]))
    chatter = [line for c in cells for line in text(c).splitlines() if "[transformers]" in line]
    assert not chatter, chatter  # library warnings stay out of the cells
    table = text(cells[-1])
    for name in ("gpt2", "vit", "wav2vec2", "clip"):
        assert name in table
    assert "FAILED" not in table and table.count("passed") >= 4


def test_debugging_parity(tmp_path: Path) -> None:
    cells = execute("03_debugging_parity.ipynb", tmp_path)
    assert "first diverging node" in text(by_source(cells, "assert not report")).lower()
    graph = widget(by_source(cells, "onnx_nb.GraphView"), "graph")
    assert graph["highlight"] and graph["overlay"], "the diverging node is highlighted over the errors"
    assert "ToleranceExceeded" in text(cells[-1])


def test_quantization_autotune(tmp_path: Path) -> None:
    cells = execute("04_quantization_autotune.ipynb", tmp_path)
    assert "FAILED" in text(cells[0]) and "layers.2" in text(by_source(cells, "debug = onnx_nb.quant_debug"))
    assert "TuneResult" in text(by_source(cells, "import transformers"))
    assert "Autotune: latency against accuracy" in plotly_titles(cells)
    int4 = text(by_source(cells, 'int4 = onnx_nb.quantize'))
    assert "gptq" in int4 and "kept" in int4 and "measured: each layer's error at 4 and 8 bits alone" in int4
    assert any("each layer's SQNR alone" in t for t in plotly_titles(cells))


@pytest.mark.parametrize("name", ["05_providers_latency.ipynb"])
def test_providers_latency(name: str, tmp_path: Path) -> None:
    cells = execute(name, tmp_path)
    table = text(by_source(cells, "result = onnx_nb.export"))
    assert "unavailable" in table and "openvino-runtime:cpu" in table and "PyTorch eager" in table
    titles = plotly_titles(cells)
    assert "Latency per variant and backend" in titles and "Time per operator type (per run)" in titles
    graph = widget(cells[-1], "graph")  # the graph coloured by the profile's time per node
    assert graph["overlay"] and "ms" in graph["overlay_label"], graph["overlay_label"]


def test_generation(tmp_path: Path) -> None:
    cells = execute("06_generation.ipynb", tmp_path)
    assert "a tiny GPT-2 from a config" in text(cells[0]), "offline, the local stand-in runs and says so"
    assert "key/value cache" in text(by_source(cells, "result = onnx_nb.export"))
    generated = text(by_source(cells, "out = onnx_nb.generate"))
    assert "GenerationResult: 2 prompt(s)" in generated
    parity = text(by_source(cells, "report = onnx_nb.check_parity"))
    assert "Parity PASSED" in parity and "decode step 8" in parity and "greedy tokens identical" in parity
    latency = text(by_source(cells, "table = onnx_nb.benchmark"))
    assert "prefill 32 tokens" in latency and "PyTorch eager, no cache" in latency
    assert "passed" in text(by_source(cells, "int8 = onnx_nb.quantize"))
    fast = text(by_source(cells, "fast = onnx_nb.optimize"))
    assert "opset 23" in fast and "Attention x2" in fast and "optimized" in fast and "peak_mb" in fast
    llama = text(next(c for c in cells if "llama_tokenizer = transformers" in c.source))
    assert "a tiny Llama from a config" in llama and "auto:     GroupQueryAttention" in llama
    assert "standard: re-exported with torch.export" in llama and "Parity PASSED" in llama
    gqa = text(by_source(cells, "print(onnx_nb.generate(gqa"))
    assert "GenerationResult: 2 prompt(s)" in gqa and "GroupQueryAttention" in gqa and "decode 1 token after 64" in gqa
    assert "one buffer shared by past and present" in gqa
    assert text(by_source(cells, 'prompt = ["The ONNX file"]')).startswith("True | onnx-nb loop:")
    t5 = text(next(c for c in cells if "t5_tokenizer = transformers" in c.source))
    assert "a tiny T5 from a config" in t5 and "cross-attention cache computed once" in t5 and "GenerationResult" in t5
    assert "Parity PASSED" in text(by_source(cells, "t5_report"))
    t5_latency = text(by_source(cells, "onnx_nb.benchmark(t5_result"))
    assert "decode 1 token after 16" in t5_latency and "PyTorch eager, no cache" in t5_latency
    marian = text(next(c for c in cells if "mt_tokenizer = transformers" in c.source))
    assert "a tiny Marian from a config" in marian and "task: text2text-generation" in marian
    assert "model.encoder.onnx" in marian and "onnx_nb.to_transformers" not in marian and "ONNX Runtime" in marian
    beams = text(next(c for c in cells if "beams_onnx = onnx_marian.generate" in c.source))
    assert "4-beam tokens equal to PyTorch's generate()" in beams and "GenerationResult: 1 prompt(s)" in beams
    assert "max_new_tokens" not in beams, beams  # transformers' warning when both lengths are set, printed twice


def test_a_notebook_run_with_no_browser_open_takes_a_headless_chromium(tmp_path: Path) -> None:
    """Run with no browser open (nbclient, as nbconvert or papermill run it), the notebook's page cannot answer: the
    browser rows come from a headless Chromium and say so. (07_browser itself runs in a real JupyterLab page,
    tests/test_browser.py, whose run is the documentation's copy: the same cells run here cost 80 s more.)"""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in (
        "import torch, transformers\nimport onnx_nb\ntorch.manual_seed(0)\n"
        "config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, "
        "intermediate_size=64, vocab_size=100)\n"
        "result = onnx_nb.export(transformers.BertModel(config).eval(), out='bert.onnx', progress=False)",
        "report = onnx_nb.check_parity(result, providers=['cpu', 'browser'], progress=False)\nreport",
        "onnx_nb.benchmark(result, providers=['browser'], runs=3, warmup=1, progress=False)",
    )])
    run_cells(nb, tmp_path)
    parity, latency = text(nb.cells[1]), text(nb.cells[2])
    assert "Parity PASSED" in parity and "headless Chromium (no notebook page answered" in parity, parity[-2000:]
    assert "ort-web:wasm (HeadlessChrome" in latency, latency[-2000:]


def test_diffusion_tutorial(tmp_path: Path) -> None:
    cells = execute("08_diffusion.ipynb", tmp_path)
    assert "local stand-in for hf-internal-testing/tiny-stable-diffusion-pipe" in text(cells[1])
    exported = text(by_source(cells, "sd = onnx_nb.export"))
    for name in ("text_encoder.onnx", "unet.onnx", "vae_decoder.onnx", "verified", "[2, 4, 64, 64]"):
        assert name in exported
    parity = text(by_source(cells, "parity = onnx_nb.check_diffusion"))
    assert "image PSNR" in parity and "passed: at least 40 dB" in parity and "unet" in parity
    assert outputs(by_source(cells, "from PIL import Image"), "image/png")
    assert "image PSNR" in text(by_source(cells, "calibration = onnx_nb.unet_calibration"))
    assert "(96, 96)" in text(by_source(cells, "onnx_pipe = onnx_nb.to_diffusers"))
    chatter = [line for c in cells for line in text(c).splitlines() if "[transformers]" in line]
    assert not chatter, chatter


def test_yolo_tutorial(tmp_path: Path) -> None:
    cells = execute("09_yolo.ipynb", tmp_path)
    exported = text(by_source(cells, "result = onnx_nb.export"))
    assert "verified" in exported and "images" in exported and "output0" in exported
    predicted = text(by_source(cells, "bus = str("))
    counts = re.findall(r"(\d+) boxes, (\d+) of them on a PyTorch box", predicted)
    theirs = re.search(r"PyTorch: (\d+) boxes", predicted)
    # random weights score many boxes 1.0 on a photo: the two runs may keep other boxes among those tied at the cut
    assert counts and theirs and theirs.group(1) == counts[0][0] != "0", predicted
    assert int(counts[0][1]) >= 0.8 * int(counts[0][0]), predicted
    assert "Parity PASSED" in text(by_source(cells, "boxed = onnx_nb.export"))
    assert "score" in text(by_source(cells, "import onnxruntime as ort"))
    int8 = text(by_source(cells, "calibration = Path(work)"))
    assert "int8-static" in int8 and "box arithmetic" in int8 and "Parity PASSED" in int8
    latency = text(by_source(cells, "onnx_nb.benchmark([result, int8]"))
    assert "int8-static" in latency and "PyTorch eager" in latency
    noise = [line for c in cells for line in text(c).splitlines() if "Expected bias" in line]  # the quantizer's
    assert not noise, noise


def test_beyond_pytorch_tutorial(tmp_path: Path) -> None:
    for module in ("tensorflow", "keras", "tf2onnx", "sklearn", "skl2onnx"):  # onnx-nb[tensorflow,sklearn]
        pytest.importorskip(module)
    cells = execute("10_beyond_pytorch.ipynb", tmp_path)
    cnn = text(by_source(cells, "keras.utils.set_random_seed(0)"))
    assert "tiny_cnn [keras]" in cnn and re.search(r"exporter\s+tf2onnx", cnn) and "verified" in cnn
    assert "passed: ORT vs Keras (tensorflow)" in cnn and "[batch, height, width, 3]" in cnn
    parity = text(by_source(cells, "onnx_nb.check_parity(result"))
    assert "Parity PASSED" in parity and "vs Keras tiny_cnn" in parity and "batch=4, height=96, width=80" in parity
    lstm = text(by_source(cells, "keras.utils.set_random_seed(1)"))
    assert "text_classifier [keras]" in lstm and "verified" in lstm and "[batch, sequence]" in lstm
    tabular = text(by_source(cells, "from sklearn.datasets"))
    assert "Pipeline [sklearn]" in tabular and re.search(r"exporter\s+skl2onnx", tabular) and "verified" in tabular
    assert re.search(r"output\s+label\s+int64\s+\[batch\]", tabular), tabular
    assert re.search(r"output\s+probabilities\s+float32\s+\[batch, 3\]", tabular), tabular
    assert "ZipMap" not in tabular
    shown = text(by_source(cells, "import onnxruntime as ort"))
    labels = re.search(r"label\s+(\[[\d ]+\])\s+scikit-learn: (\[[\d ]+\])", shown)
    assert labels and labels[1] == labels[2] and "float32 [4, 3]" in shown, shown
    tabular_parity = text(by_source(cells, "onnx_nb.check_parity(tabular"))
    assert "Parity PASSED" in tabular_parity and "vs scikit-learn Pipeline" in tabular_parity
    assert "batch=1" in tabular_parity, "checked at other batch sizes than the sample's 20 rows"
    adopted = text(by_source(cells, "adopted = onnx_nb.export"))
    assert "['io.npz', 'model.onnx']" in adopted, "adopted in place: nothing copied"
    assert re.search(r"exporter\s+adopted", adopted) and "passed: ORT vs ONNX reference evaluator" in adopted
    assert "verified" in adopted
    alone = text(by_source(cells, 'onnx_nb.check_parity(vendor / "model.onnx")'))
    assert "Parity PASSED" in alone and "vs ONNX reference evaluator on model.onnx" in alone
    saved = text(by_source(cells, 'onnx_nb.check_parity(vendor / "model.onnx", against='))
    assert "Parity PASSED" in saved and "the outputs saved beside the sample" in saved
    int8 = text(by_source(cells, "int8 = onnx_nb.quantize"))
    assert "int8-static(QDQ)" in int8 and "Parity PASSED" in int8 and "vs ONNX model.onnx" in int8
    mobile = text(by_source(cells, "mobile = onnx_nb.optimize"))
    assert "model.mobile.ort" in mobile and "cpu:ort-format" in mobile and "Parity PASSED" in mobile
    noise = [line for c in cells for line in text(c).splitlines()
             if "oneDNN" in line or "absl::" in line or ("tf2onnx" in line.lower() and "WARNING" in line)]
    assert not noise, noise  # TensorFlow's and tf2onnx's log lines stay out of the cells


def test_vision_language_tutorial(tmp_path: Path) -> None:
    cells = execute("11_vision_language.ipynb", tmp_path)
    assert "a tiny LLaVA from a config" in text(cells[0]) and "saved with its processor" in text(cells[0])
    shown = text(by_source(cells, "vlm = onnx_nb.export"))
    assert all(f"{part}.onnx" in shown for part in ("vision", "embed", "decoder"))
    assert "chained against PyTorch" in shown and "(passed)" in shown
    generated = text(by_source(cells, "import base64"))
    lines = [line for line in generated.splitlines() if line.startswith(("noise:", "gradient:"))]
    assert len(lines) == 2 and all(line.endswith("same: True") for line in lines), generated
    assert lines[0].split("|")[0].split(":", 1)[1] != lines[1].split("|")[0].split(":", 1)[1], "the image matters"
    assert "<img src='data:image/png;base64," in generated and "first token" in generated
    piped = text(by_source(cells, "pipe = transformers.pipeline"))
    answer = lines[0].split("'")[1].split()
    assert "generated_text" in piped and " ".join(answer[-3:]) in piped, (answer, piped)
    assert "Warning" not in piped and "shards" not in text(cells[0])
    refused = text(by_source(cells, "inputs = processor"))
    assert refused.startswith("InvalidArgumentError") and "14 image tokens" in refused and "16 feature rows" in refused


def test_shipped_notebooks_carry_no_paths_of_the_machine_that_ran_them() -> None:
    """A reader of a shipped notebook (or the docs' copy) sees paths relative to the notebook and ``$TMP`` for a
    temporary folder, never the temp or home folders of the machine that executed it."""
    from notebook_paths import scrub

    foreign = re.compile(r"/tmp/|/private/var/|/var/folders/|/root/|/home/\w+/")
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        shown = json.dumps([c.get("outputs", []) for c in nb.cells])
        assert not foreign.search(shown), (path.name, foreign.search(shown))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output(
        "execute_result", {"text/plain": "/tmp/nbrun/onnx_nb_out/a/model.onnx and /tmp/tmpab_1x/b.onnx"})])])
    assert scrub(nb, "/tmp/nbrun").cells[0].outputs[0]["data"]["text/plain"] == \
        "onnx_nb_out/a/model.onnx and $TMP/b.onnx"


def test_shipped_latency_tables_show_memory_that_holds_the_weights() -> None:
    """No shipped notebook shows a file's row with less resident memory than the weights its session holds (an
    8.6 MB decoder's decode row read 0.05 MB): every latency table's ``peak_mb`` is at least its ``size_mb``
    (both MB), less the graph's own bytes."""
    rows = 0
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            for out in cell.get("outputs", []):
                for table in re.findall(r'<table class="key">(.*?)</table>', out.get("data", {}).get("text/html", ""),
                                        re.S):
                    head = [re.sub("<[^>]+>", "", h) for h in re.findall(r"<th>(.*?)</th>", table)]
                    if "peak_mb" not in head or "size_mb" not in head:
                        continue
                    for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]:
                        cells = dict(zip(head, (re.sub("<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>",
                                                                                              row, re.S))))
                        if cells.get("size_mb", "-") != "-" and cells.get("peak_mb", "-") != "-":
                            rows += 1
                            assert float(cells["peak_mb"]) >= 0.9 * float(cells["size_mb"]), (path.name, cells)
    assert rows >= 5, rows


def test_evaluation_tutorial(tmp_path: Path) -> None:
    cells = execute("12_evaluation.ipynb", tmp_path)
    digits = text(by_source(cells, "x, y, test_x, test_y"))
    assert "Evaluation: accuracy on 360 examples" in digits and "int8-static(QDQ)" in digits and "kept:" in digits
    assert "int8-static(QDQ) · OpenVINO" in digits and "computing in" in digits
    assert any(t.startswith("accuracy against cost") for t in plotly_titles(cells))
    assert "by perplexity on the data given" in text(by_source(cells, "lm = onnx_nb.export"))
    assert "Evaluation: perplexity on" in text(by_source(cells, "perplexity = onnx_nb.evaluate"))
    assert "Chosen by accuracy" in text(by_source(cells, "tuned = onnx_nb.autotune"))
    harness = text(by_source(cells, "import json"))
    assert harness.count("accuracy 0.") == 3, harness


def test_other_tools_tutorial(tmp_path: Path) -> None:
    cells = execute("13_other_tools.ipynb", tmp_path)
    table = text(by_source(cells, "prompt = "))
    for tool in ("onnx-nb", "onnx-nb optimized", "transformers.exporters", "onnxruntime-genai"):
        assert tool in table, table
    assert "FAILED" not in table and "PASSED" in table, table
    assert "OnnxExporter is experimental" not in text(by_source(cells, "import contextlib"))  # its notes hidden
    across = text(by_source(cells, "across = onnx_nb.check_parity"))  # OpenVINO against ONNX Runtime, one file
    assert "openvino-runtime (OpenVINO " in across and "the same file on two runtimes" in across, across
    assert "fail" not in across and "pass" in across, across
