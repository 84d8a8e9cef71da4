"""The fine-tuning recipes: linear ``Trainer`` scripts (arguments -> data -> train -> evaluate -> save) over the
library code in :mod:`hfbert.tasks`, one module per task family:

* :mod:`~hfbert.recipes.finetune_classification` -- sentence (pair) classification, regression, multi-label;
* :mod:`~hfbert.recipes.finetune_ner` -- token classification with BIO tags;
* :mod:`~hfbert.recipes.finetune_qa` -- extractive question answering (SQuAD v1.1 / v2.0);
* :mod:`~hfbert.recipes.finetune_multiple_choice` -- SWAG-style multiple choice.

Each has ``run(model_args, data_args, training_args)``, which fine-tunes with its typed arguments
(:class:`~hfbert.tasks.recipe.ModelArguments`, its own ``DataArguments``, transformers' ``TrainingArguments``) and
returns the metrics, and ``main(argv)``, which parses a command line into them and calls ``run``.
``python -m hfbert.recipes.finetune_ner ...`` runs one from an installed package; the repository's ``recipes/``
scripts run the same functions; ``hfbert evaluate`` calls ``run`` for every task of a suite. Which recipe fine-tunes
which task kind is in :data:`hfbert.tasks.registry.KINDS`.
"""

from ..tasks.registry import KINDS

#: The recipes' module names, one per recipe of the task kinds.
RECIPES = tuple(dict.fromkeys(kind.recipe for kind in KINDS.values()))

__all__ = ["RECIPES"]
