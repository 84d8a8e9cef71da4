"""Fine-tuning: data preparation, decoding and metrics for classification, NER, extractive QA and
multiple choice; sentence pooling; the extractive question-answering pipeline; the recipes' shared run steps.

Everything here is a pure function of its inputs (seeded where random) so recipes stay thin and tests can
exercise the logic without a model.
"""

from ..modelcard import metrics_table, render_model_card, write_model_card
from .classification import (
    PROBLEM_TYPES,
    build_label_maps,
    check_columns,
    classification_metrics,
    encode_labels,
    metric_inputs,
    metrics_for_trainer,
)
from .loading import MODEL_FAMILIES, TASK_CLASSES, load_data, load_model, load_tokenizer
from .ner import (
    align_labels,
    b_to_i_map,
    build_label_list,
    encode_tags,
    entity_scores,
    load_peoples_daily,
    merge_word_predictions,
    tokenize_and_align_labels,
)
from .pipelines import ExtractiveQuestionAnsweringPipeline, register_pipelines
from .pooling import POOLING_STRATEGIES, encode_sentences, pool, special_tokens_mask
from .qa import (
    AnswerCheck,
    QAPredictions,
    best_spans,
    check_answer_offsets,
    count_windows,
    load_qa_file,
    load_squad_json,
    postprocess_qa_predictions,
    prepare_qa_features,
    synthetic_squad_from_entities,
)
from .recipe import CardKeepingTrainer
from .squad_metrics import best_null_threshold, exact_match, f1, normalize_answer, squad_evaluate

__all__ = [
    "AnswerCheck", "CardKeepingTrainer", "ExtractiveQuestionAnsweringPipeline", "MODEL_FAMILIES",
    "POOLING_STRATEGIES", "PROBLEM_TYPES", "QAPredictions", "TASK_CLASSES", "align_labels", "b_to_i_map",
    "best_null_threshold", "best_spans", "build_label_list", "build_label_maps", "check_answer_offsets",
    "check_columns", "classification_metrics", "count_windows", "encode_labels", "encode_sentences", "encode_tags",
    "entity_scores", "exact_match", "f1", "load_data", "load_model", "load_peoples_daily", "load_qa_file", "load_squad_json",
    "load_tokenizer", "merge_word_predictions", "metric_inputs", "metrics_for_trainer", "metrics_table", "normalize_answer",
    "pool", "postprocess_qa_predictions", "prepare_qa_features", "register_pipelines", "render_model_card",
    "special_tokens_mask", "squad_evaluate", "synthetic_squad_from_entities", "tokenize_and_align_labels",
    "write_model_card",
]
