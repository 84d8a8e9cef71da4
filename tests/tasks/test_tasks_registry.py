"""The task kinds' one table (hfbert.tasks.registry): every kind has a recipe with a typed ``run``, metrics that load
and a head the Auto classes know; the older tables are read from it; no other module branches on a kind's name."""

import inspect
import re
from pathlib import Path

import pytest
import transformers

import hfbert
import hfbert.metrics
from hfbert.evaluation.suites import TASK_TYPES, known_metrics
from hfbert.recipes import RECIPES
from hfbert.tasks.loading import TASK_CLASSES
from hfbert.tasks.recipe import ModelArguments
from hfbert.tasks.registry import KINDS, MODEL_HEADS, lower_is_better

PACKAGE = Path(hfbert.__file__).resolve().parent


@pytest.mark.parametrize("name", list(KINDS))
def test_every_kind_has_a_recipe_with_a_typed_run(name):
    kind = KINDS[name]
    recipe = kind.recipe_module()
    assert kind.recipe in RECIPES and callable(recipe.main)
    hints = {k: v for k, v in inspect.get_annotations(recipe.run, eval_str=True).items() if k != "return"}
    assert hints == {"model_args": ModelArguments, "data_args": recipe.DataArguments,
                     "training_args": transformers.TrainingArguments}
    fields = set(recipe.DataArguments.__dataclass_fields__)
    settings = kind.recipe_settings({role: f"column_{role}" for role in kind.columns}, 128, ["O", "B-X"])
    assert set(settings) <= fields, set(settings) - fields  # every setting the kind gives, the recipe has
    assert kind.recipe_settings({}, 128) == ({"task_type": kind.problem_type} if kind.problem_type else {}) | (
        {"doc_stride": 32} if kind.windows else {})


@pytest.mark.parametrize("name", list(KINDS))
def test_every_kind_has_a_head_the_auto_classes_load(name):
    ours, theirs, auto = KINDS[name].classes
    config = hfbert.HfBertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=8, max_position_embeddings=16)
    model = getattr(transformers, auto).from_config(config)
    assert type(model) is getattr(hfbert, ours) and model.__class__.__name__ == ours
    assert theirs.removeprefix("Bert") == ours.removeprefix("HfBert") and hasattr(transformers, theirs)


def test_every_metric_of_a_kind_loads_and_every_metric_belongs_to_a_kind():
    named = {metric for kind in KINDS.values() for metric in kind.metrics}
    assert named == set(hfbert.metrics.NAMES)
    for name in sorted(named):
        assert hfbert.metrics.shared(name).name == name


def test_the_older_tables_are_read_from_the_registry():
    assert RECIPES == ("finetune_classification", "finetune_ner", "finetune_qa", "finetune_multiple_choice")
    assert set(TASK_CLASSES) == set(MODEL_HEADS) and {k.head for k in KINDS.values()} <= set(TASK_CLASSES)
    assert all(TASK_CLASSES[k.head] == k.classes[:2] for k in KINDS.values())
    assert sorted(TASK_TYPES) == ["classification", "ner", "regression"]  # the kinds with suite columns
    assert all(TASK_TYPES[name] is KINDS[name] for name in TASK_TYPES)
    assert {"eval_accuracy", "eval_f1", "eval_mcc", "eval_loss"} <= known_metrics("classification")
    assert {"eval_pearson", "eval_spearman", "eval_mse"} <= known_metrics("regression")
    assert {"eval_f1", "eval_precision", "eval_recall"} <= known_metrics("ner")
    assert lower_is_better("eval_loss") and lower_is_better("eval_mse") and not lower_is_better("eval_f1")


# A task's type, or a kind's name, compared outside the registry: the branch belongs in the kind's record ("regression"
# is also a problem type, which the classification code compares).
_NAMES = [name for name in KINDS if name not in {kind.problem_type for kind in KINDS.values()}]
_BRANCH = re.compile(r"""\.type\s*(?:==|!=|in)\s|(?:==|!=)\s*["'](?:%s)["']""" % "|".join(_NAMES))


def test_no_module_branches_on_a_kind_name():
    assert _BRANCH.search('        if task.type == "ner":') and _BRANCH.search('if kind_name == "qa":')
    branches = [f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
                for path in sorted(PACKAGE.rglob("*.py")) if path.name != "registry.py"
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                if _BRANCH.search(line) and "device.type" not in line and "ids.device" not in line]
    assert not branches, "\n".join(branches)
