"""hfbert: the original BERT as a first-class Hugging Face plugin.

``import hfbert`` registers every model class with the transformers Auto classes under ``model_type="hfbert"`` and
marks them for remote code, so ``save_pretrained`` writes ``auto_map`` and copies the config and modeling files.

With ``HFBERT_LAZY_IMPORT=1`` in its environment, ``import hfbert`` loads the model code (torch, transformers'
modeling) and registers the classes on the first use of one of the names below instead: a process that only
builds data (the workers of ``hfbert prepare``, forked with it) then imports its modules in about a third of the
time.  A Dask worker started by hand for builds may set it too (``HFBERT_LAZY_IMPORT=1 dask worker ...``).
"""

import importlib
import os

__version__ = "0.1.0"

_MODULE_OF = {
    "AUTO_CLASSES": "auto",
    "register_auto_classes": "auto",
    "HfBertConfig": "configuration_hfbert",
    **dict.fromkeys(["HfBertPreTrainedModel", "HfBertModel", "HfBertForPreTraining", "HfBertForPreTrainingOutput",
                     "HfBertForMaskedLM", "HfBertForNextSentencePrediction", "HfBertForSequenceClassification",
                     "HfBertForMultipleChoice", "HfBertForTokenClassification", "HfBertForQuestionAnswering"],
                    "modeling_hfbert"),
    **dict.fromkeys(["HfBertTokenizer", "train_wordpiece", "bert_tokenizer_from_vocab", "tokenize_dataset"],
                    "tokenization"),
    "load_any_bert": "model_source",
    "push_to_hub": "hub",
    "convert": "convert",
}

if os.environ.get("HFBERT_LAZY_IMPORT") != "1":
    from .auto import AUTO_CLASSES, register_auto_classes
    from .configuration_hfbert import HfBertConfig
    from .modeling_hfbert import (
        HfBertForMaskedLM,
        HfBertForMultipleChoice,
        HfBertForNextSentencePrediction,
        HfBertForPreTraining,
        HfBertForPreTrainingOutput,
        HfBertForQuestionAnswering,
        HfBertForSequenceClassification,
        HfBertForTokenClassification,
        HfBertModel,
        HfBertPreTrainedModel,
    )
    from .convert import convert
    from .hub import push_to_hub
    from .model_source import load_any_bert
    from .tokenization import HfBertTokenizer, bert_tokenizer_from_vocab, tokenize_dataset, train_wordpiece
else:

    def __getattr__(name: str):
        if name not in _MODULE_OF:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        importlib.import_module(".auto", __name__)  # the first use of a model name registers them all
        # ... and binds every name, also over a submodule of the same name that an import bound here (convert)
        for export, module in _MODULE_OF.items():
            globals()[export] = getattr(importlib.import_module(f".{module}", __name__), export)
        return globals()[name]

__all__ = [
    "HfBertConfig",
    "HfBertPreTrainedModel",
    "HfBertModel",
    "HfBertForPreTraining",
    "HfBertForPreTrainingOutput",
    "HfBertForMaskedLM",
    "HfBertForNextSentencePrediction",
    "HfBertForSequenceClassification",
    "HfBertForMultipleChoice",
    "HfBertForTokenClassification",
    "HfBertForQuestionAnswering",
    "HfBertTokenizer",
    "train_wordpiece",
    "bert_tokenizer_from_vocab",
    "tokenize_dataset",
    "load_any_bert",
    "push_to_hub",
    "convert",
]
