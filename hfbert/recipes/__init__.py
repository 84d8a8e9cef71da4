"""The fine-tuning recipes: linear ``Trainer`` scripts (arguments -> data -> train -> evaluate -> save) over the
library code in :mod:`hfbert.tasks`, one module per task family, each run by its ``main(argv)``:

* :mod:`~hfbert.recipes.finetune_classification` -- sentence (pair) classification, regression, multi-label;
* :mod:`~hfbert.recipes.finetune_ner` -- token classification with BIO tags;
* :mod:`~hfbert.recipes.finetune_qa` -- extractive question answering (SQuAD v1.1 / v2.0);
* :mod:`~hfbert.recipes.finetune_multiple_choice` -- SWAG-style multiple choice.

``python -m hfbert.recipes.finetune_ner ...`` runs one from an installed package; the repository's ``recipes/``
scripts run the same functions; ``hfbert evaluate`` calls them for every task of a suite.
"""

RECIPES = ("finetune_classification", "finetune_ner", "finetune_qa", "finetune_multiple_choice")

__all__ = ["RECIPES"]
