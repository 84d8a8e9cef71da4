"""The fine-tuning task kinds: one record per kind, the one table that says what each kind trains, runs and scores.

Every other place reads it: :func:`~hfbert.tasks.loading.load_model` (the head classes), ``hfbert evaluate``'s suites
(the task types and their columns), the rows a suite task's recipe reads, the protocol (failed runs, lower-is-better
scores) and the model-index (the Hub's task name). A new kind is a record here, its recipe (a module of
:mod:`hfbert.recipes` with ``DataArguments`` and ``run``) and, if it needs one, a metric (:mod:`hfbert.metrics`).

It imports nothing heavy: the command line reads it without torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ..heads_hfbert import HEADS

__all__ = ["KINDS", "MODEL_HEADS", "TaskKind", "head_classes", "lower_is_better"]

#: The heads :func:`~hfbert.tasks.loading.load_model` builds, by its task name -> the class-name suffix (``HfBert`` +
#: suffix in hfbert, ``Bert`` + suffix in transformers; :data:`hfbert.heads_hfbert.HEADS` gives its Auto class).
MODEL_HEADS = {
    "sequence-classification": "ForSequenceClassification",
    "token-classification": "ForTokenClassification",
    "question-answering": "ForQuestionAnswering",
    "multiple-choice": "ForMultipleChoice",
    "masked-lm": "ForMaskedLM",
    "base": "Model",
}


def head_classes(head: str) -> tuple[str, str, str]:
    """The classes of a head of :data:`MODEL_HEADS`.

    Args:
        head: a task name of :func:`~hfbert.tasks.loading.load_model`, e.g. ``"sequence-classification"``.

    Returns:
        ``(hfbert class, transformers class, Auto class)`` names, e.g. ``("HfBertForSequenceClassification",
        "BertForSequenceClassification", "AutoModelForSequenceClassification")``.
    """
    suffix = MODEL_HEADS[head]
    return f"HfBert{suffix}", f"Bert{suffix}", HEADS[suffix]


@dataclass(frozen=True, eq=False)
class TaskKind:
    """One kind of fine-tuning task.

    Args:
        name: the kind's name; a suite task's ``type``.
        head: the head it trains, a key of :data:`MODEL_HEADS`.
        recipe: the module of :mod:`hfbert.recipes` that fine-tunes it.
        metrics: the :mod:`hfbert.metrics` modules that score it.
        hub_task: the Hub's task name (a card's model-index).
        problem_type: the recipe's ``task_type`` for this kind, where the recipe serves several kinds.
        columns: a suite task's column roles -> (the recipe's data setting naming the column, required); empty for a
            kind the suites do not run.
        tags: the role of a column of per-word tags: tags stored as class ids are read as their names, and the
            labels are those of every split (a tag seen only in the validation rows is still a label).
        windows: long rows are read as windows sharing a quarter of their tokens (the recipe's ``doc_stride``).
        per_label_scores: its recipe also reports ``eval_<label>_f1`` for each label (entity type).
        trainer_scores: the Trainer's own evaluations report its scores, so the best checkpoint can be chosen by
            them (NER's report only the loss; its scores come after the words are merged).
        floors: score -> what a constant predictor scores: ``"majority"`` (the training rows' most common label) or a
            number. A run at or below it failed.
        row_scores: the scores whose paired bootstrap may resample the held-out rows (the recipe writes one
            prediction per row): ``"accuracy"`` or ``"pearson"``.
        lower_is_better: the scores where smaller is better (the loss is, for every kind).
        probe: the recipe's scores on a tiny input, whose keys are the scores a suite may name.
    """

    name: str
    head: str
    recipe: str
    metrics: tuple[str, ...]
    hub_task: str
    problem_type: str | None = None
    columns: Mapping[str, tuple[str, bool]] = field(default_factory=dict)
    tags: str | None = None
    windows: bool = False
    per_label_scores: bool = False
    trainer_scores: bool = True
    floors: Mapping[str, str | float] = field(default_factory=dict)
    row_scores: tuple[str, ...] = ()
    lower_is_better: tuple[str, ...] = ()
    probe: Callable[[], Mapping[str, Any]] | None = None

    @property
    def classes(self) -> tuple[str, str, str]:
        """``(hfbert class, transformers class, Auto class)`` names of its head."""
        return head_classes(self.head)

    def recipe_module(self) -> ModuleType:
        """The recipe's module (importing it loads transformers); its ``run`` takes typed arguments."""
        return importlib.import_module(f"{__name__.rsplit('.', 2)[0]}.recipes.{self.recipe}")

    def scores(self) -> frozenset[str]:
        """The ``eval_*`` scores its recipe reports: the keys of :attr:`probe`, and the loss."""
        return frozenset({"eval_loss"} | {f"eval_{key}" for key in (self.probe() if self.probe else {})})

    def recipe_settings(self, columns: Mapping[str, str], max_length: int,
                        labels: Sequence[str] | None = None) -> dict[str, Any]:
        """The recipe's data settings for a suite task of this kind.

        Args:
            columns: the task's column roles -> column names.
            max_length: tokens per example.
            labels: every label of the task's rows, where the kind reads them from every split (:attr:`tags`).

        Returns:
            The settings of the recipe's ``DataArguments`` that name the columns, the problem type, the labels and
            the windows' stride.
        """
        values: dict[str, Any] = {self.columns[role][0]: column for role, column in columns.items()}
        if self.problem_type:
            values["task_type"] = self.problem_type
        if self.tags and labels:
            values["label_list"] = ",".join(labels)
        if self.windows:  # the recipe's 32 shared tokens at 128
            values["doc_stride"] = max(1, min(32, max_length // 4))
        return values


def _labels_probe(problem_type: str) -> Callable[[], Mapping[str, Any]]:
    def probe():
        import numpy as np

        from .classification import classification_metrics

        if problem_type == "regression":
            return classification_metrics(np.array([0.1, 0.5, 0.9]), np.array([0.0, 0.6, 1.0]), problem_type)
        if problem_type == "multi_label_classification":
            return classification_metrics(np.array([[0.9, -0.1], [-0.2, 0.8]]), np.array([[1, 0], [0, 1]]),
                                          problem_type)
        return classification_metrics(np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]), np.array([0, 1, 1]),
                                      problem_type)

    return probe


def _entities_probe() -> Mapping[str, Any]:
    from .ner import entity_scores

    return entity_scores([["B-X", "O"]], [["B-X", "O"]])


_SENTENCES = {"text": ("text_column", True), "text_pair": ("text_pair_column", False), "label": ("label_column", True)}

_KINDS = [
    TaskKind("classification", "sequence-classification", "finetune_classification", ("classification",),
             "text-classification", problem_type="single_label_classification", columns=_SENTENCES,
             floors={"accuracy": "majority", "mcc": 0.0}, row_scores=("accuracy",),
             probe=_labels_probe("single_label_classification")),
    TaskKind("regression", "sequence-classification", "finetune_classification", ("regression",),
             "text-classification", problem_type="regression", columns=_SENTENCES,
             floors={"pearson": 0.0, "spearman": 0.0}, row_scores=("pearson",), lower_is_better=("mse", "mae", "rmse"),
             probe=_labels_probe("regression")),
    TaskKind("multi_label", "sequence-classification", "finetune_classification", ("classification",),
             "text-classification", problem_type="multi_label_classification",
             probe=_labels_probe("multi_label_classification")),
    TaskKind("ner", "token-classification", "finetune_ner", ("entities",), "token-classification",
             columns={"tokens": ("tokens_column", True), "tags": ("tags_column", True)}, tags="tags", windows=True,
             per_label_scores=True, trainer_scores=False, floors={"f1": 0.0}, probe=_entities_probe),
    TaskKind("qa", "question-answering", "finetune_qa", ("squad", "squad_v2"), "question-answering"),
    TaskKind("multiple_choice", "multiple-choice", "finetune_multiple_choice", ("classification",), "multiple-choice"),
]
#: Every task kind by name, in the order above.
KINDS: dict[str, TaskKind] = {kind.name: kind for kind in _KINDS}


def lower_is_better(metric: str) -> bool:
    """Whether a smaller ``metric`` is the better score.

    Args:
        metric: a score as the Trainer names it, e.g. ``"eval_mse"``.

    Returns:
        True for the loss, and for a score some kind lists in :attr:`TaskKind.lower_is_better` (an error).
    """
    name = metric.removeprefix("eval_")
    return name == "loss" or any(name in kind.lower_is_better for kind in KINDS.values())
