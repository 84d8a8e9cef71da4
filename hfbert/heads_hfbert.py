"""The heads hfbert provides, each with the transformers Auto class that loads it.

The one list that the rest is read from: the model file's ``auto_map`` and names, the package's names, the Auto
registration and ``hfbert convert``'s heads. It imports nothing, so the command line reads it without torch, and it
travels with the model files as remote code (the model file imports it).
"""

# Class-name suffix (``HfBert`` + suffix; ``Bert`` + suffix in transformers) -> the Auto class that loads that head.
HEADS = {
    "Model": "AutoModel",
    "ForPreTraining": "AutoModelForPreTraining",
    "ForMaskedLM": "AutoModelForMaskedLM",
    "ForNextSentencePrediction": "AutoModelForNextSentencePrediction",
    "ForSequenceClassification": "AutoModelForSequenceClassification",
    "ForTokenClassification": "AutoModelForTokenClassification",
    "ForQuestionAnswering": "AutoModelForQuestionAnswering",
    "ForMultipleChoice": "AutoModelForMultipleChoice",
}
#: The model classes' names, in the order of :data:`HEADS`.
MODEL_CLASSES = tuple(f"HfBert{suffix}" for suffix in HEADS)

__all__ = ["HEADS", "MODEL_CLASSES"]
