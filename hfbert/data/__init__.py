"""BERT pretraining data: documents -> NSP pairs -> MLM masks -> batches; prepared corpora of Parquet shards.

Faithful to google-research/bert ``create_pretraining_data.py`` (see :mod:`hfbert.data.nsp` and
:mod:`hfbert.data.masking` for the algorithm and every documented deviation), multi-process and streaming,
with whole-word masking for English (``##``) and Chinese (pluggable word segmenters).
"""

from .collator import DataCollatorForBertPretraining
from .documents import (
    CHAPTER_HEADING,
    CorpusError,
    ReadStats,
    read_document_range,
    read_documents,
    read_people_daily,
    split_sentences,
)
from .masking import MaskingSpec, mask_sequence, num_to_predict
from .nsp import create_instances_from_document, truncate_seq_pair
from .pipeline import build_pretraining_dataset, pool_bounds
from .prepared import PreparedCorpus, PreparedDataError, prepare_corpus, push_prepared
from .report import content_digest, render_report, write_report
from .segmenters import JiebaSegmenter, PreSegmented
from .settings import ExampleSettings

__all__ = [
    "CHAPTER_HEADING",
    "CorpusError",
    "DataCollatorForBertPretraining",
    "ExampleSettings",
    "JiebaSegmenter",
    "MaskingSpec",
    "PreSegmented",
    "PreparedCorpus",
    "PreparedDataError",
    "ReadStats",
    "build_pretraining_dataset",
    "content_digest",
    "create_instances_from_document",
    "mask_sequence",
    "num_to_predict",
    "pool_bounds",
    "prepare_corpus",
    "push_prepared",
    "read_document_range",
    "read_documents",
    "read_people_daily",
    "render_report",
    "split_sentences",
    "truncate_seq_pair",
    "write_report",
]
