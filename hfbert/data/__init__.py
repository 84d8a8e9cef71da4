"""BERT pretraining data: documents -> NSP pairs -> MLM masks -> batches; prepared corpora of Parquet shards.

Faithful to google-research/bert ``create_pretraining_data.py`` (see :mod:`hfbert.data.nsp` and
:mod:`hfbert.data.masking` for the algorithm and every documented deviation), multi-process and streaming,
with whole-word masking for English (``##``) and Chinese (pluggable word segmenters).

The names below are imported on first use (PEP 562), so a process that only builds shards (a worker of
``hfbert prepare``) loads the build modules alone, not the collator and the reader with torch behind them.
"""

import importlib

_EXPORTS = {
    "collator": ["DataCollatorForBertPretraining"],
    "documents": ["CHAPTER_HEADING", "CorpusError", "LINE_LAYOUTS", "ReadStats", "read_document_range",
                  "read_documents", "read_people_daily", "split_sentences"],
    "manifest": ["Manifest"],
    "masking": ["MaskingSpec", "mask_sequence", "num_to_predict"],
    "nsp": ["create_instances_from_document", "truncate_seq_pair"],
    "pipeline": ["build_pretraining_dataset", "pool_bounds"],
    "reader": ["PreparedCorpus", "PreparedDataError"],
    "writer": ["prepare_corpus", "push_prepared"],
    "report": ["content_digest", "render_report", "write_report"],
    "segmenters": ["JiebaSegmenter", "PreSegmented"],
    "settings": ["ExampleSettings"],
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next look-up is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
