"""hfbert's model classes registered with the transformers Auto classes under ``model_type="hfbert"`` (done when
this module is imported, by ``import hfbert``) and marked for remote code, so ``save_pretrained`` writes
``auto_map`` and copies the config and modeling files."""

import transformers
from transformers import AutoConfig, AutoTokenizer

from . import modeling_hfbert
from .configuration_hfbert import HfBertConfig
from .heads_hfbert import HEADS
from .tokenization import HfBertTokenizer

# The transformers Auto class of every head -> hfbert's class (hfbert.heads_hfbert.HEADS).
AUTO_CLASSES = {getattr(transformers, auto): getattr(modeling_hfbert, f"HfBert{suffix}")
                for suffix, auto in HEADS.items()}


def register_auto_classes() -> None:
    """Idempotent: registering twice (re-import, importlib.reload) changes nothing."""
    AutoConfig.register(HfBertConfig.model_type, HfBertConfig, exist_ok=True)
    HfBertConfig.register_for_auto_class()
    AutoTokenizer.register(HfBertConfig, tokenizer_class=HfBertTokenizer, exist_ok=True)
    for auto_class, model_class in AUTO_CLASSES.items():
        auto_class.register(HfBertConfig, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto_class.__name__)


register_auto_classes()
