"""An extractive ``question-answering`` pipeline for transformers 5, decoding exactly like the QA recipe.

transformers 5 removed its extractive QA pipeline and lists ``"question-answering"`` among
``REMOVED_TASKS``, which ``pipeline()`` checks *before* its registry. :func:`register_pipelines` therefore
(1) registers :class:`ExtractiveQuestionAnsweringPipeline` in ``PIPELINE_REGISTRY`` under
``"question-answering"`` and under the alias ``"extractive-question-answering"``, and (2) takes
``"question-answering"`` off the removed list, so ``pipeline("question-answering", model=folder)`` works
again. It is idempotent and only runs when called.

Preprocessing and decoding are :func:`hfbert.tasks.qa.prepare_qa_features` and
:func:`hfbert.tasks.qa.postprocess_qa_predictions`, the functions the recipe evaluates with, so the
pipeline and the recipe cannot drift apart.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoModelForQuestionAnswering, Pipeline
from transformers import pipelines as tf_pipelines

from .qa import postprocess_qa_predictions, prepare_qa_features

QA_TASKS = ("question-answering", "extractive-question-answering")


class ExtractiveQuestionAnsweringPipeline(Pipeline):
    """``pipe(question=..., context=...)`` -> ``{"answer", "score", "start", "end"}`` (a list when ``top_k > 1``).

    Long contexts are split into windows (``max_seq_len``, ``doc_stride``) and merged by maximum context;
    ``handle_impossible_answer=True`` enables SQuAD 2.0 abstention (answer ``""``) with
    ``null_score_diff_threshold``. ``score`` is the softmax probability over the n-best list. Runs one
    question at a time (``batch_size=1``): the windows of a question already form the model batch.
    """

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False

    def __call__(self, inputs: Any = None, *args: Any, question: Any = None, context: Any = None, **kwargs: Any):
        if inputs is None:
            if question is None or context is None:
                raise ValueError("give question= and context= (or a dict / list of dicts with those keys)")
            if isinstance(question, list) != isinstance(context, list):
                raise TypeError("question and context must both be strings or both be lists")
            if isinstance(question, list):
                if len(question) != len(context):
                    raise ValueError(f"{len(question)} questions but {len(context)} contexts")
                inputs = [{"question": q, "context": c} for q, c in zip(question, context)]
            else:
                inputs = {"question": question, "context": context}
        return super().__call__(inputs, *args, **kwargs)

    def _sanitize_parameters(
        self, top_k=None, max_seq_len=None, doc_stride=None, max_question_len=None, max_answer_len=None,
        n_best_size=None, handle_impossible_answer=None, null_score_diff_threshold=None,
    ):
        preprocess = {k: v for k, v in (("max_length", max_seq_len), ("doc_stride", doc_stride),
                                        ("max_query_length", max_question_len)) if v is not None}
        post = {k: v for k, v in (("top_k", top_k), ("max_answer_length", max_answer_len), ("n_best_size", n_best_size),
                                  ("version_2_with_negative", handle_impossible_answer),
                                  ("null_score_diff_threshold", null_score_diff_threshold)) if v is not None}
        if "top_k" in post and post["top_k"] < 1:
            raise ValueError(f"top_k must be >= 1, got {post['top_k']}")
        return preprocess, {}, post

    def preprocess(self, inputs, max_length: int = 384, doc_stride: int = 128, max_query_length: int = 64):
        if not isinstance(inputs, dict) or not {"question", "context"} <= set(inputs):
            raise ValueError(f"each input needs 'question' and 'context' keys, got {inputs!r:.80}")
        question, context = inputs["question"], inputs["context"]
        if not isinstance(question, str) or not isinstance(context, str):
            raise TypeError("question and context must be strings")
        if not question.strip() or not context.strip():
            raise ValueError("question and context must not be empty")
        max_length = min(max_length, self.tokenizer.model_max_length)
        batch = {"id": ["0"], "question": [question], "context": [context]}
        feats = prepare_qa_features(batch, self.tokenizer, max_length, doc_stride, max_query_length)
        names = [n for n in ("input_ids", "token_type_ids", "attention_mask") if n in feats]
        features = [{"example_id": e, "offset_mapping": o, "max_context": m}
                    for e, o, m in zip(feats["example_id"], feats["offset_mapping"], feats["max_context"])]
        return {"model_inputs": {n: torch.tensor(feats[n]) for n in names},
                "example": {"id": "0", "context": context}, "features": features}

    def _forward(self, inputs):
        out = self.model(**inputs["model_inputs"])
        return {"start_logits": out.start_logits, "end_logits": out.end_logits,
                "example": inputs["example"], "features": inputs["features"]}

    def postprocess(self, outputs, top_k: int = 1, n_best_size: int = 20, max_answer_length: int = 30,
                    version_2_with_negative: bool = False, null_score_diff_threshold: float = 0.0):
        result = postprocess_qa_predictions(
            [outputs["example"]], outputs["features"], outputs["start_logits"].float().numpy(),
            outputs["end_logits"].float().numpy(), n_best_size=max(n_best_size, top_k),
            max_answer_length=max_answer_length, version_2_with_negative=version_2_with_negative,
            null_score_diff_threshold=null_score_diff_threshold,
        )
        chosen = result.predictions["0"]
        nbest = result.nbest["0"]
        # The decided answer goes first (with a threshold it need not be the top-scoring entry).
        first = next((c for c in nbest if c["text"] == chosen), {"text": chosen, "probability": 0.0, "start": 0, "end": 0})
        ordered = [first] + [c for c in nbest if c is not first]
        answers = [{"score": c["probability"], "start": c["start"], "end": c["end"], "answer": c["text"]}
                   for c in ordered[:top_k]]
        return answers[0] if top_k == 1 else answers


def register_pipelines() -> None:
    """Register the extractive QA pipeline with transformers (idempotent; see the module docstring)."""
    registry = tf_pipelines.PIPELINE_REGISTRY
    for task in QA_TASKS:
        if registry.supported_tasks.get(task, {}).get("impl") is not ExtractiveQuestionAnsweringPipeline:
            registry.register_pipeline(
                task, pipeline_class=ExtractiveQuestionAnsweringPipeline, pt_model=AutoModelForQuestionAnswering,
                type="text",
            )
    # transformers 5 refuses the task name before consulting the registry; this package provides it again.
    tf_pipelines.REMOVED_TASKS.pop("question-answering", None)
