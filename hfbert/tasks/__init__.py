"""Fine-tuning: data preparation, decoding and metrics for classification, NER, extractive QA and
multiple choice; sentence pooling; the extractive question-answering pipeline; the recipes' shared run steps;
the task kinds (:mod:`~hfbert.tasks.registry`).

Everything here is a pure function of its inputs (seeded where random) so recipes stay thin and tests can
exercise the logic without a model.

The names below load their module on first use (PEP 562), so the light modules (:mod:`~hfbert.tasks.registry`) are
read without torch or datasets.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_NAMES = {
    "..modelcard": ["metrics_table", "render_model_card", "write_model_card"],
    ".classification": ["PROBLEM_TYPES", "build_label_maps", "check_columns", "classification_metrics",
                        "encode_labels", "metric_inputs", "metrics_for_trainer"],
    ".loading": ["MODEL_FAMILIES", "TASK_CLASSES", "load_data", "load_model", "load_tokenizer"],
    ".ner": ["align_labels", "b_to_i_map", "build_label_list", "encode_tags", "entity_scores", "load_peoples_daily",
             "merge_word_predictions", "tokenize_and_align_labels"],
    ".pipelines": ["ExtractiveQuestionAnsweringPipeline", "register_pipelines"],
    ".pooling": ["POOLING_STRATEGIES", "encode_sentences", "pool", "special_tokens_mask"],
    ".qa": ["AnswerCheck", "QAPredictions", "best_spans", "check_answer_offsets", "count_windows", "load_qa_file",
            "load_squad_json", "postprocess_qa_predictions", "prepare_qa_features", "synthetic_squad_from_entities"],
    ".recipe": ["CardKeepingTrainer"],
    ".registry": ["KINDS", "TaskKind"],
    ".squad_metrics": ["best_null_threshold", "exact_match", "f1", "normalize_answer", "squad_evaluate"],
}
_MODULE_OF = {name: module for module, names in _NAMES.items() for name in names}

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from ..modelcard import metrics_table, render_model_card, write_model_card  # noqa: F401
    from .classification import (  # noqa: F401
        PROBLEM_TYPES, build_label_maps, check_columns, classification_metrics, encode_labels,
        metric_inputs, metrics_for_trainer,
    )
    from .loading import MODEL_FAMILIES, TASK_CLASSES, load_data, load_model, load_tokenizer  # noqa: F401
    from .ner import (  # noqa: F401
        align_labels, b_to_i_map, build_label_list, encode_tags, entity_scores, load_peoples_daily,
        merge_word_predictions, tokenize_and_align_labels,
    )
    from .pipelines import ExtractiveQuestionAnsweringPipeline, register_pipelines  # noqa: F401
    from .pooling import POOLING_STRATEGIES, encode_sentences, pool, special_tokens_mask  # noqa: F401
    from .qa import (  # noqa: F401
        AnswerCheck, QAPredictions, best_spans, check_answer_offsets, count_windows, load_qa_file,
        load_squad_json, postprocess_qa_predictions, prepare_qa_features, synthetic_squad_from_entities,
    )
    from .recipe import CardKeepingTrainer  # noqa: F401
    from .registry import KINDS, TaskKind  # noqa: F401
    from .squad_metrics import best_null_threshold, exact_match, f1, normalize_answer, squad_evaluate  # noqa: F401


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE_OF[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))


__all__ = sorted(_MODULE_OF)
