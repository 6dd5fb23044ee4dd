"""Every task :func:`onnx_nb.evaluate` knows, and which one an export's pipeline task or an asked metric means."""

from __future__ import annotations

from . import generation_tasks, metrics, tasks, token_tasks

TASKS: dict[str, tasks.Task] = {t.name: t for t in (
    tasks.Task("classification", "accuracy", metrics.classification, metrics.classification_examples,
               tasks.prepare_classification, tasks.score_classification,
               metrics.mean_draws(metrics.classification_examples)),
    tasks.Task("retrieval", "recall@1", metrics.retrieval, metrics.retrieval_examples, tasks.prepare_retrieval,
               tasks.score_retrieval, metrics.mean_draws(metrics.retrieval_examples)),
    tasks.Task("perplexity", "perplexity", metrics.perplexity, metrics.perplexity_examples, tasks.prepare_perplexity,
               tasks.score_perplexity, metrics.perplexity_draws),
    tasks.Task("question-answering", "exact_match", metrics.means("exact_match", "squad_f1"),
               metrics.first_mean("exact_match"), tasks.prepare_qa, tasks.score_qa,
               metrics.mean_draws(metrics.first_mean("exact_match"))),
    *generation_tasks.TASKS,
    *token_tasks.TASKS,
)}
# the pipeline task an export records -> the evaluation task it is judged by
BY_MODEL_TASK = {"text-classification": "classification", "image-classification": "classification",
                 "audio-classification": "classification", "feature-extraction": "retrieval",
                 "sentence-similarity": "retrieval", "text-generation": "perplexity",
                 "question-answering": "question-answering", "automatic-speech-recognition": "speech",
                 "text2text-generation": "generation", "image-text-to-text": "generation",
                 "token-classification": "token-classification"}
# a metric asked by name -> the task that gives it
BY_METRIC = {"accuracy": "classification", "f1": "classification", "top5": "classification",
             "recall@1": "retrieval", "recall@5": "retrieval", "ndcg@10": "retrieval", "mrr": "retrieval",
             "perplexity": "perplexity", "exact_match": "question-answering", "squad_f1": "question-answering",
             "wer": "speech", "agreement": "generation", "entity_f1": "token-classification",
             "token_accuracy": "token-classification"}
