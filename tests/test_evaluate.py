"""evaluate(): variants judged by their task on real data with no download (Python's own documentation, scikit-learn's
digits), each metric checked against an independent computation, and the task deciding quantize()'s INT4 algorithm
and autotune()'s pick."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import onnx_nb
import tiny_models
from onnx_nb.frontends import demo_tasks
from onnx_nb.steps.evaluate import data as eval_data
from onnx_nb.steps.evaluate import metrics


def test_minilm_int8_keeps_its_retrieval_on_pythons_own_docs(minilm_export: onnx_nb.ExportResult,
                                                             minilm_dir: Path, tmp_path: Path) -> None:
    import transformers

    pairs = demo_tasks.docs_retrieval()
    assert len(pairs) > 300 and all(q and d for q, d in pairs)
    pairs = pairs[::5]  # 68 of them: the suite's time (benchmarks/evaluate_variants.py measures all 340)
    int8 = onnx_nb.quantize(minilm_export, out=tmp_path / "int8.onnx")
    ev = onnx_nb.evaluate([minilm_export, int8], pairs, latency=False, progress=False)
    torch_row, fp32, q = ev.rows
    assert (ev.metric.name, ev.task, ev.baseline) == ("recall@1", "retrieval", "PyTorch")
    # PyTorch's row against an independent computation: transformers' model, mean-pooled, cosine, rank of its own
    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = transformers.AutoModel.from_pretrained(minilm_dir).eval()

    def embed(texts: list[str]) -> torch.Tensor:
        with torch.no_grad():
            enc = tok(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"][..., None].float()
            return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)

    queries = torch.cat([embed([q for q, _ in pairs[i:i + 32]]) for i in range(0, len(pairs), 32)])
    docs = torch.cat([embed([d for _, d in pairs[i:i + 32]]) for i in range(0, len(pairs), 32)])
    hits = (queries @ docs.T).argmax(-1) == torch.arange(len(pairs))
    assert torch_row.value == pytest.approx(100 * hits.float().mean().item())
    assert 20 < torch_row.value < 100  # far above chance (1 in 68)
    assert abs(fp32.value - torch_row.value) <= 100 / len(pairs) + 1e-9  # a near-tie may flip one query
    # the target, INT8 within 1 point of fp32's recall@1: what 68 queries can tell (its difference's interval reaches
    # a loss under a point; benchmarks/evaluate_variants.py prints the figures)
    assert q.delta_high is not None and q.delta_high > -1.0, repr(ev)
    for r in ev.rows:
        assert r.low <= r.value <= r.high and len(r.per_example) == len(pairs)
        assert set(r.values) == {"recall@1", "recall@5", "ndcg@10", "mrr"}
        assert r.values["recall@1"] <= r.values["recall@5"]
    assert q.parent == "export" and q.size_mb < fp32.size_mb / 3
    assert fp32.delta_low <= fp32.delta <= fp32.delta_high
    assert ev.best in ("export", int8.name) and "recall@1" in ev.why()
    assert len(ev.per_example()) == len(pairs) and json.dumps(ev.to_dict())


def test_a_digits_cnn_keeps_its_accuracy_with_static_int8(tmp_path: Path, ip: object,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    model = demo_tasks.digits_cnn()
    x, _y, tx, ty = demo_tasks.digits()
    with torch.no_grad():
        own = (model(torch.from_numpy(tx)).argmax(-1).numpy() == ty).mean() * 100
    result = onnx_nb.export(model, sample={"input": torch.from_numpy(tx[:4])}, out=tmp_path / "cnn.onnx",
                            progress=False)
    int8 = onnx_nb.quantize(result, method="static", calibration=[{"input": x[i:i + 32]} for i in range(0, 320, 32)],
                            out=tmp_path / "int8.onnx")
    ev = onnx_nb.evaluate([result, int8], (tx, ty), openvino=True, progress=False)
    torch_row, fp32, q, ov32, ov8 = ev.rows
    assert torch_row.value == pytest.approx(own) and own > 95
    assert fp32.value == pytest.approx(own)
    assert q.value >= fp32.value - 0.5, repr(ev)  # the target: static INT8 within half a point
    assert set(q.values) == {"accuracy", "f1", "top5"} and q.values["top5"] >= q.value
    # the same two files in the OpenVINO runtime (its own precision: bf16 where the CPU has it), against OpenVINO
    # run here by hand
    import openvino as ov

    assert (ov32.name, ov8.name, ov8.parent) == ("export · OpenVINO", f"{int8.name} · OpenVINO", "export · OpenVINO")
    for row, path in ((ov32, result.path), (ov8, int8.path)):
        compiled = ov.Core().compile_model(str(path), "CPU", {"PERFORMANCE_HINT": "LATENCY"})
        by_hand = np.concatenate([compiled({"input": tx[i:i + 16]})[0] for i in range(0, len(tx), 16)])  # its batches
        assert row.value == pytest.approx((by_hand.argmax(-1) == ty).mean() * 100), repr(ev)
        assert row.value >= fp32.value - 1.0 and row.p50_ms and row.size_mb
    assert any(n.startswith("export · OpenVINO: OpenVINO ") and "computing in " in n for n in ev.notes)
    assert {r.backend for r in ev.latency.rows} == {"torch:cpu", "ort:cpu", "openvino-runtime:cpu"}
    # timed beside PyTorch eager; the kept file is never one slower than its parent
    assert all(r.p50_ms for r in ev.rows) and ev.latency is not None
    kept = ev.row(ev.best)
    assert kept is not None and kept.within_budget and not kept.slower
    fig = ev.figure()
    assert {t.name for t in fig.data} >= {"Pareto front"} and len(fig.layout.annotations) >= 2
    html = ev._repr_html_()
    assert "accuracy" in html and "95% interval" in html
    # the magic (variables) and the command line (files alone: no PyTorch row, the examples from an .npz)
    ip.user_ns.update(cnn=result, cnn8=int8, digits_xy=(tx, ty))  # type: ignore[attr-defined]
    magic = ip.run_line_magic("onnx_evaluate",  # type: ignore[attr-defined]
                              "cnn cnn8 --data digits_xy --no-latency --openvino")
    assert [r.value for r in magic.rows] == [r.value for r in ev.rows]
    from onnx_nb.frontends.cli import main

    np.savez(tmp_path / "digits.npz", x=tx, y=ty)
    assert main(["evaluate", str(result.path), str(int8.path), "--data", str(tmp_path / "digits.npz"),
                 "--no-latency", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in printed["rows"]] == ["cnn", "int8"] and printed["baseline"] == "cnn"
    assert printed["rows"][0]["value"] == pytest.approx(fp32.value)


@pytest.fixture(scope="module")
def docs_lm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, onnx_nb.ExportResult]:
    """The small LM trained on Python's documentation, saved and exported once for this file."""
    root = tmp_path_factory.mktemp("docs-lm")
    folder = demo_tasks.docs_lm(root / "lm", steps=150)
    return folder, onnx_nb.export(str(folder), out=root / "lm.onnx", progress=False)


def test_the_pipeline_and_the_studio_judge_every_file_on_the_task(tmp_path: Path) -> None:
    model = demo_tasks.digits_cnn(epochs=4)
    _x, _y, tx, ty = demo_tasks.digits()
    sample = {"input": torch.from_numpy(tx[:4])}
    report = onnx_nb.pipeline(model, sample, data=(tx[:150], ty[:150]), task_budget=1.0, out=tmp_path / "pipe",
                              min_seconds=0.2, progress=False, providers=["cpu", "openvino-runtime"])
    assert [s.step for s in report.steps][-2:] == ["latency", "evaluate"], repr(report)
    ev = report["evaluate"]
    assert [r.name for r in ev.rows][:2] == ["PyTorch", "export (fp32)"] and len(ev.rows) >= 3
    assert all(r.p50_ms for r in ev.rows), repr(ev)  # the latency step's own p50s
    assert "export (fp32) · OpenVINO" in [r.name for r in ev.rows]  # the OpenVINO runtime's rows, as benchmark's
    assert ev.best is not None and ev.best in ev.why() and ev.best in report.summary_rows()[-1][-1]
    html = report.save_html(tmp_path / "report.html").read_text()
    assert "Evaluation: accuracy" in html and "Pareto front" in html
    studio = onnx_nb.Studio(model, sample, threaded=False, data=(tx[:60], ty[:60]))
    assert [k for k, _ in studio.panel.steps][-3:] == ["evaluate", "report", "web"]
    studio.run("evaluate")
    assert "Evaluate: accuracy" in studio.panel.html["evaluate"] and "<svg" in studio.panel.html["evaluate"]


def test_int4_chosen_by_perplexity_is_no_worse_than_round_to_nearest(
        docs_lm: tuple[Path, onnx_nb.ExportResult], tmp_path: Path) -> None:
    import transformers

    folder, result = docs_lm
    _train, held = demo_tasks.docs_text()
    choose_on, judge_on = held[:len(held) // 2], held[len(held) // 2:]
    settings = {"method": "int4", "mixed_precision": None, "lm_head_bits": 4}
    by_task = onnx_nb.quantize(result, data=[choose_on], out=tmp_path / "task.onnx", **settings)
    rtn = onnx_nb.quantize(result, algorithm="rtn", out=tmp_path / "rtn.onnx", **settings)
    assert set(by_task.recipe["int4_task"]) == {"rtn", "rtn_asym", "k_quant", "hqq", "gptq", "awq"}
    assert "by perplexity on the data given" in by_task.recipe["int4_algorithm_rule"]
    ev = onnx_nb.evaluate({"fp32": result, "by task": by_task, "rtn": rtn}, [judge_on], window=128, latency=False,
                          progress=False)
    torch_row, fp32, task_row, rtn_row = ev.rows
    # the target, on text the choice never saw: no worse than round-to-nearest, at no more size
    assert task_row.value <= rtn_row.value * 1.001 and task_row.size_mb <= rtn_row.size_mb * 1.05, repr(ev)
    # perplexity against transformers' own loss over the same windows: 128 tokens, each after the first predicted
    # once (a window starts at the last token the one before scored)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.tensor(tok(judge_on)["input_ids"])
    total, count = 0.0, 0
    with torch.no_grad():
        for begin in range(0, len(ids) - 1, 127):
            window = ids[begin:begin + 128][None]
            total += model(input_ids=window, labels=window).loss.item() * (window.shape[1] - 1)
            count += window.shape[1] - 1
    assert count == len(ids) - 1
    assert torch_row.value == pytest.approx(np.exp(total / count), rel=1e-4)
    assert fp32.value == pytest.approx(torch_row.value, rel=1e-4)
    assert ev.metric.relative and "tokens in" in ev.measured_on


def test_autotune_picks_by_the_task_when_data_is_given(tmp_path: Path) -> None:
    model = demo_tasks.digits_cnn(epochs=4)
    _x, _y, tx, ty = demo_tasks.digits()
    result = onnx_nb.export(model, sample={"input": torch.from_numpy(tx[:4])}, out=tmp_path / "cnn.onnx",
                            progress=False)
    tuned = onnx_nb.autotune(result, data=(tx[:120], ty[:120]), task_budget=2.0, out=tmp_path / "tune",
                             candidates=("optimized(extended)", "int8 per-tensor"), min_seconds=0.1, progress=False)
    assert tuned.evaluation is not None and tuned.evaluation.metric.name == "accuracy"
    built = [c for c in tuned.candidates if c.variant is not None]
    assert len(built) == 3 and all(c.task is not None for c in built)
    assert any("Chosen by accuracy" in n for n in tuned.notes)
    best = tuned.best_candidate
    assert best is not None and best.within_budget
    assert "accuracy" in repr(tuned) and tuned.figure().layout.yaxis.title.text == "accuracy"


def test_speech_to_text_by_word_error_rate_and_generation_by_agreement(tmp_path: Path) -> None:
    import jiwer
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    model = tiny_models.build_generative("whisper")
    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(model.config.vocab_size)}, unk_token="w0"))
    words.pre_tokenizer, words.decoder = pre_tokenizers.WhitespaceSplit(), decoders.WordPiece()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0")
    result = onnx_nb.export(model, out=tmp_path / "w.onnx", progress=False)
    rng = np.random.default_rng(0)
    clips = [{"input_features": rng.standard_normal((1, model.config.num_mel_bins,
                                                      2 * model.config.max_source_positions)).astype(np.float32)}
             for _ in range(5)]
    said = ["w5 w6 w7", "w8 w9", "w10", "w11 w12", "w13"]
    ev = onnx_nb.evaluate(result, list(zip(clips, said)), tokenizer=tok, latency=False, progress=False)
    assert (ev.task, ev.metric.name, ev.metric.higher_is_better) == ("speech", "wer", False)
    with torch.no_grad():
        heard = [tok.decode(model.generate(input_features=torch.from_numpy(c["input_features"]), max_new_tokens=32,
                                           do_sample=False)[0], skip_special_tokens=True) for c in clips]
    assert ev.rows[0].value == pytest.approx(100 * jiwer.wer(said, heard))  # PyTorch's row is jiwer's own
    assert ev.rows[1].value == ev.rows[0].value and ev.rows[1].within_budget
    agree = onnx_nb.evaluate(result, clips, metric="agreement", tokenizer=tok, latency=False, progress=False)
    assert [r.value for r in agree.rows] == [100.0, 100.0] and agree.data == "5 inputs"


def test_examples_are_read_from_where_users_keep_them(tmp_path: Path) -> None:
    rows = [{"sentence": "good", "label": 1}, {"sentence": "bad", "label": 0}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "d.csv").write_text("sentence,label\ngood,1\nbad,0\n")
    (tmp_path / "d.txt").write_text("one line\n\nanother\n")
    np.savez(tmp_path / "d.npz", x=np.zeros((3, 2)), y=np.arange(3))
    (tmp_path / "imgs" / "cat").mkdir(parents=True)
    (tmp_path / "imgs" / "cat" / "a.png").write_bytes(b"")
    for source, n in [(tmp_path / "d.jsonl", 2), (tmp_path / "d.csv", 2), (str(tmp_path / "d.txt"), 2),
                      (tmp_path / "d.npz", 3), (tmp_path / "imgs", 1), (rows, 2), ({"a": [1, 2], "b": [3, 4]}, 2),
                      ((np.zeros((4, 2)), np.arange(4)), 4), (["x", "y"], 2), ([("q", "d")], 1)]:
        got = eval_data.read(source)
        assert len(got) == n, source
    csv = eval_data.read(tmp_path / "d.csv")
    assert csv.column("input") == "sentence" and csv.column("target", avoid=("sentence",)) == "label"
    drawn = eval_data.read([str(i) for i in range(100)], limit=10)
    assert drawn.rows == eval_data.read([str(i) for i in range(100)], limit=10).rows and len(drawn) == 10
    with pytest.raises(onnx_nb.DataError, match="empty"):
        eval_data.read([])
    with pytest.raises(onnx_nb.DataError, match=r"No target column.*'text'"):
        eval_data.read([{"text": "a"}]).column("target", avoid=("text",))
    with pytest.raises(onnx_nb.DataError, match=r"'name:config:split'"):
        eval_data.read("a:b:c:d")
    with pytest.raises(onnx_nb.DataError, match=r"\.xml"):
        (tmp_path / "d.xml").write_text("<a/>")
        eval_data.read(tmp_path / "d.xml")


def test_bad_arguments_name_what_to_do(bert_export: onnx_nb.ExportResult) -> None:
    with pytest.raises(onnx_nb.InvalidArgumentError, match="metric='bleu'"):
        onnx_nb.evaluate(bert_export, ["a"], metric="bleu")
    with pytest.raises(onnx_nb.InvalidArgumentError, match="cannot run a dict"):
        onnx_nb.evaluate([{}], ["a"])
    with pytest.raises(onnx_nb.DataError, match="label 'maybe'"):
        onnx_nb.evaluate(bert_export, [("fine", "maybe")], latency=False, progress=False)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="budget='lots'"):
        onnx_nb.evaluate(bert_export, [("fine", 0)], budget="lots", latency=False, progress=False)


def test_intervals_are_paired_and_hold_the_value() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 200)
    scores = rng.normal(size=(200, 3))
    scores[np.arange(150), labels[:150]] += 5  # 150 right for sure, the rest by chance
    got = metrics.measure({"label": labels, "scores": scores}, metrics.classification, "accuracy",
                          metrics.classification_examples)
    assert got.interval is not None and got.interval[0] <= got.values["accuracy"] <= got.interval[1]
    assert 75 <= got.values["accuracy"] <= 90 and got.interval[1] - got.interval[0] < 15
    fast = metrics.mean_draws(metrics.classification_examples)
    same = metrics.measure({"label": labels, "scores": scores}, metrics.classification, "accuracy",
                           metrics.classification_examples, draws_of=fast)
    assert metrics.difference_interval(got, same) == (0.0, 0.0)  # the same resamples for both: paired


def test_the_harness_runs_its_own_tasks_on_the_file(docs_lm: tuple[Path, onnx_nb.ExportResult], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """lm-evaluation-harness's own code (a YAML task read from a local file, its prompts and accuracy) on the exported
    file and on PyTorch; the scores it asks for against transformers' own."""
    import random

    import lm_eval
    import transformers
    from lm_eval.api.instance import Instance
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    folder, result = docs_lm
    words = demo_tasks.docs_text()[1].split()
    rng = random.Random(0)
    rows = []
    for _ in range(24):  # which three words come next: the true ones among three drawn elsewhere
        at = rng.randrange(len(words) - 20)
        right = " " + " ".join(words[at + 12:at + 15])
        choices = [right] + [" " + " ".join(words[j:j + 3]) for j in (rng.randrange(len(words) - 3) for _ in "abc")]
        rng.shuffle(choices)
        rows.append({"context": " ".join(words[at:at + 12]), "choices": choices, "answer": choices.index(right)})
    (tmp_path / "next.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "next.yaml").write_text(
        "task: next_words\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {tmp_path / 'next.jsonl'}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{context}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")
    tasks = TaskManager(include_path=str(tmp_path))
    file_lm, torch_lm = onnx_nb.lm_eval_model(result), onnx_nb.lm_eval_model(result, pytorch=True)
    on_file = lm_eval.simple_evaluate(model=file_lm, tasks=["next_words"], task_manager=tasks)["results"]
    on_torch = lm_eval.simple_evaluate(model=torch_lm, tasks=["next_words"], task_manager=tasks)["results"]
    assert on_file["next_words"]["acc,none"] == on_torch["next_words"]["acc,none"]
    assert on_file["next_words"]["sample_len"] == len(rows)
    # the scores themselves: a continuation's log-probability and a text's rolling one, against transformers'
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    context, continuation = rows[0]["context"], rows[0]["choices"][0]
    asked = [Instance("loglikelihood", {}, (context, continuation), 0)]
    (file_lp, _), = file_lm.loglikelihood(asked)
    ids = torch.tensor([tok.encode(context + continuation)])
    n = len(tok.encode(context))
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].double(), -1)
    assert file_lp == pytest.approx(logp[n - 1:].gather(1, ids[0, n:, None]).sum().item(), rel=1e-4)
    text = " ".join(words[:300])
    rolling = [Instance("loglikelihood_rolling", {}, (text,), 0)]
    assert file_lm.loglikelihood_rolling(rolling)[0] == pytest.approx(torch_lm.loglikelihood_rolling(rolling)[0],
                                                                        rel=1e-4)
    made = file_lm.generate_until([Instance("generate_until", {}, (context, {"until": ["."], "max_gen_toks": 8}), 0)])
    assert made == torch_lm.generate_until([Instance("generate_until", {}, (context, {"until": ["."],
                                                                                       "max_gen_toks": 8}), 0)])
    assert "." not in made[0]


def test_extractive_answers_by_squads_exact_match_and_f1(minilm_dir: Path, tmp_path: Path) -> None:
    """A tiny BERT question-answering head (random weights, MiniLM's tokenizer): the file's answers are PyTorch's, and
    the spans and scores are those an independent reading of PyTorch's logits gives."""
    import re
    import string
    from collections import Counter

    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64)
    torch.manual_seed(0)
    model = transformers.BertForQuestionAnswering(config).eval()
    enc = tok(["Who wrote it?"], ["Guido wrote Python in 1991."], return_tensors="pt")
    result = onnx_nb.export(model, sample=dict(enc), out=tmp_path / "qa.onnx", progress=False)
    asked = [("Who wrote Python?", "Python was written by Guido van Rossum in 1991.", "Guido van Rossum"),
             ("When was it released?", "The first release came out in February 1991.", "February 1991"),
             ("What is a list?", "A list is a mutable sequence of items.", "a mutable sequence")]
    rows = [{"question": q, "context": c, "answers": {"text": [a], "answer_start": [c.find(a)]}} for q, c, a in asked]
    ev = onnx_nb.evaluate(result, rows, tokenizer=tok, latency=False, progress=False)
    assert (ev.task, ev.metric.name) == ("question-answering", "exact_match")
    torch_row, file_row = ev.rows
    assert torch_row.values == pytest.approx(file_row.values)

    def norm(text: str) -> list[str]:
        text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
        return re.sub(r"\b(a|an|the)\b", " ", text).split()

    exact, f1 = [], []
    for row in rows:
        enc = tok(row["question"], row["context"], return_offsets_mapping=True, return_tensors="pt")
        offsets = enc.pop("offset_mapping")[0]
        with torch.no_grad():
            out = model(**enc)
        context = [i for i, s in enumerate(enc.sequence_ids(0)) if s == 1]
        s, e = max(((s, e) for s in context for e in context if 0 <= e - s < 30),
                   key=lambda p: out.start_logits[0, p[0]] + out.end_logits[0, p[1]])
        said, truth = norm(row["context"][offsets[s][0]:offsets[e][1]]), norm(row["answers"]["text"][0])
        exact.append(float(said == truth))
        common = sum((Counter(said) & Counter(truth)).values())
        f1.append(0.0 if common == 0 else 2 * common / (len(said) + len(truth)))
    assert torch_row.values["exact_match"] == pytest.approx(100 * np.mean(exact))
    assert torch_row.values["squad_f1"] == pytest.approx(100 * np.mean(f1))


def test_a_datasets_split_is_read_as_its_rows() -> None:
    import datasets

    split = datasets.Dataset.from_dict({"text": ["good", "bad", "fine"], "label": [1, 0, 1]})
    got = eval_data.read(split)
    assert len(got) == 3 and got.column("input") == "text" and got.values("target", avoid=("text",)) == [1, 0, 1]
    with pytest.raises(onnx_nb.DataError, match=r"several splits \(train, test\)"):
        eval_data.read(datasets.DatasetDict(train=split, test=split))
    with pytest.raises(onnx_nb.DataError, match="give texts as a list"):
        eval_data.read("A long text given where examples were expected. " * 20)
    # word error rate on what was said, not on its case and punctuation (jiwer's transforms)
    said = metrics.word_errors(["Hello, world.", "It is FINE"], ["hello world", "it is fine!"])
    assert said["errors"].tolist() == [0.0, 0.0] and said["words"].tolist() == [2.0, 3.0]


def test_what_a_file_gives_is_read_as_the_task_means_it(minilm_dir: Path, tmp_path: Path) -> None:
    """A scikit-learn classifier's file (label, then probabilities), sentence pairs through the tokenizer, and
    embeddings that cannot tell documents apart ranked last, not first."""
    import transformers
    from sklearn.linear_model import LogisticRegression

    from onnx_nb.steps.evaluate import candidates, tasks

    x, y, tx, ty = demo_tasks.digits()
    flat, test = x.reshape(len(x), -1), tx.reshape(len(tx), -1)
    clf = LogisticRegression(max_iter=300).fit(flat, y)
    result = onnx_nb.export(clf, test[:4], out=tmp_path / "clf.onnx", progress=False)
    ev = onnx_nb.evaluate(result, (test, ty), latency=False, progress=False)
    assert [r.name for r in ev.rows] == ["export"]  # no PyTorch model behind it
    assert ev.rows[0].value == pytest.approx(100 * clf.score(test, ty))

    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)

    class Flat(torch.nn.Module):  # every text the same embedding
        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return torch.ones(input_ids.shape[0], 4) + 0 * attention_mask[:, :1]

    enc = tok(["a b c", "d e"], padding=True, return_tensors="pt")
    flat_file = onnx_nb.export(Flat(), sample={k: enc[k] for k in ("input_ids", "attention_mask")},
                               out=tmp_path / "flat.onnx", progress=False)
    same = onnx_nb.evaluate(flat_file, [("q one", "d one"), ("q two", "d two"), ("q three", "d three")],
                            metric="recall@1", tokenizer=tok, latency=False, progress=False)
    assert [r.value for r in same.rows] == [0.0, 0.0]
    file_row = candidates.candidates(flat_file, pytorch=False)[0]
    pairs = eval_data.read([{"sentence1": "A man sleeps.", "sentence2": "Someone rests.", "label": 1}])
    prepared = tasks.prepare_classification(pairs, file_row, {"tokenizer": tok})
    ids = prepared.batches[0][0]["input_ids"][0].tolist()
    assert ids.count(tok.sep_token_id) == 2  # both sentences, joined as the tokenizer joins a pair


def test_named_entities_by_conlls_entity_f1(minilm_dir: Path, tmp_path: Path) -> None:
    """A tiny BERT token classifier (random weights, MiniLM's tokenizer): the file's tags are PyTorch's, each word's
    tag is its first sub-token's, entities are CoNLL's, and the entity F1 is what an independent count gives."""
    import transformers

    from onnx_nb.steps.evaluate.token_tasks import entities

    assert entities(["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-PER", "S-ORG"]) == {
        ("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 5), ("PER", 5, 6), ("ORG", 6, 7)}
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, num_labels=5,
                                     id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)})
    torch.manual_seed(3)
    model = transformers.BertForTokenClassification(config).eval()
    enc = tok(["Guido lives in Amsterdam"], return_tensors="pt")
    result = onnx_nb.export(model, sample=dict(enc), out=tmp_path / "ner.onnx", progress=False)
    rows = [{"tokens": ["Guido", "van", "Rossum", "lives", "in", "Amsterdam"], "ner_tags": [1, 2, 2, 0, 0, 3]},
            {"tokens": ["Python", "comes", "from", "the", "Netherlands"], "ner_tags": [0, 0, 0, 0, 3]},
            {"tokens": ["Ada", "Lovelace", "wrote", "notes"], "ner_tags": [1, 2, 0, 0]}]
    ev = onnx_nb.evaluate(result, rows, tokenizer=tok, latency=False, progress=False)
    assert (ev.task, ev.metric.name) == ("token-classification", "entity_f1")
    torch_row, file_row = ev.rows
    assert torch_row.values == pytest.approx(file_row.values)
    tp = found = wanted = right = words = 0
    for row in rows:
        enc = tok(row["tokens"], is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            best = model(**enc).logits[0].argmax(-1).tolist()
        firsts = {}
        for position, word in enumerate(enc.word_ids(0)):
            firsts.setdefault(word, position) if word is not None else None
        said = [labels[best[firsts[w]]] for w in range(len(row["tokens"]))]
        gold = [labels[t] for t in row["ner_tags"]]
        tp += len(entities(said) & entities(gold))
        found, wanted = found + len(entities(said)), wanted + len(entities(gold))
        right, words = right + sum(a == b for a, b in zip(said, gold)), words + len(gold)
    assert torch_row.values["entity_f1"] == pytest.approx(100 * 2 * tp / (found + wanted) if found + wanted else 0)
    assert torch_row.values["token_accuracy"] == pytest.approx(100 * right / words)


def test_mteb_scores_the_file_with_its_own_code(minilm_export: onnx_nb.ExportResult) -> None:
    mteb = pytest.importorskip("mteb")
    pairs = demo_tasks.docs_retrieval()[::10]
    ev = onnx_nb.evaluate([minilm_export], pairs, latency=False, progress=False)
    task = onnx_nb.mteb_task(pairs, name="PydocTopics")
    scores = {}
    for label, kw in (("file", {}), ("PyTorch", {"pytorch": True})):
        encoder = onnx_nb.mteb_model(minilm_export, **kw)
        assert isinstance(encoder, mteb.models.EncoderProtocol) and encoder.mteb_model_meta.name.startswith("onnx-nb/")
        done = mteb.evaluate(encoder, task, cache=None, co2_tracker=False, show_progress_bar=False)
        scores[label] = done.task_results[0].scores["test"][0]
    # MTEB's own retrieval metrics (pytrec_eval) over the file's embeddings are evaluate()'s, to its rounding
    mine = ev.row("export")
    assert mine is not None
    assert scores["file"]["ndcg_at_10"] == pytest.approx(mine.values["ndcg@10"] / 100, abs=1e-5)
    assert scores["file"]["recall_at_1"] == pytest.approx(mine.values["recall@1"] / 100, abs=1e-5)
    assert scores["PyTorch"]["ndcg_at_10"] == pytest.approx(scores["file"]["ndcg_at_10"], abs=0.03)
    with pytest.raises(onnx_nb.OnnxNbError, match="letters, digits"):
        onnx_nb.mteb_task(pairs, name="two words")
