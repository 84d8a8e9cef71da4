"""hfbert: the original BERT as a first-class Hugging Face plugin.

``import hfbert`` registers every model class with the transformers Auto classes under ``model_type="hfbert"`` and
marks them for remote code, so ``save_pretrained`` writes ``auto_map`` and copies the config and modeling files.
"""

from transformers import (
    AutoConfig,
    AutoTokenizer,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForNextSentencePrediction,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

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
from .hub import load_any_bert, push_to_hub
from .tokenization import HfBertTokenizer, bert_tokenizer_from_vocab, tokenize_dataset, train_wordpiece

__version__ = "0.1.0"

AUTO_CLASSES = {
    AutoModel: HfBertModel,
    AutoModelForPreTraining: HfBertForPreTraining,
    AutoModelForMaskedLM: HfBertForMaskedLM,
    AutoModelForNextSentencePrediction: HfBertForNextSentencePrediction,
    AutoModelForSequenceClassification: HfBertForSequenceClassification,
    AutoModelForMultipleChoice: HfBertForMultipleChoice,
    AutoModelForTokenClassification: HfBertForTokenClassification,
    AutoModelForQuestionAnswering: HfBertForQuestionAnswering,
}


def register_auto_classes() -> None:
    """Idempotent: registering twice (re-import, importlib.reload) changes nothing."""
    AutoConfig.register(HfBertConfig.model_type, HfBertConfig, exist_ok=True)
    HfBertConfig.register_for_auto_class()
    AutoTokenizer.register(HfBertConfig, tokenizer_class=HfBertTokenizer, exist_ok=True)
    for auto_class, model_class in AUTO_CLASSES.items():
        auto_class.register(HfBertConfig, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto_class.__name__)


register_auto_classes()

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
