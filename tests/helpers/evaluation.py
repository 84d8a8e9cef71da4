"""What the ``hfbert evaluate`` tests share: the words of their tiny data sets (the tiny model's vocabulary, built
in tests/tasks/conftest.py) and the record of the recipe runs an evaluation starts."""

from pathlib import Path

from hfbert.tasks.registry import KINDS

POS, NEG = ["good", "great", "fine", "nice"], ["bad", "awful", "poor", "dull"]
FILLER = ["the", "movie", "was", "plot", "and", "it", "met", "in", "really", "quite"]
PEOPLE, PLACES = ["alice", "bob", "carol"], ["paris", "london", "rome"]
WORDS = sorted({*POS, *NEG, *FILLER, *PEOPLE, *PLACES, "sentence", "a", "b"})


class RecipeRuns:
    """Every recipe run an evaluation starts, by wrapping each recipe's ``run``: ``calls`` holds the typed
    arguments of each, ``(model_args, data_args, training_args)``. A recipe's ``main`` (its command line) fails the
    run: an evaluation passes dataclasses, not an argv."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple] = []
        for module in {kind.recipe_module() for kind in KINDS.values()}:
            monkeypatch.setattr(module, "run", self._recorded(module.run))
            monkeypatch.setattr(module, "main", _refused)

    def _recorded(self, run):
        def recorded(model_args, data_args, training_args):
            self.calls.append((model_args, data_args, training_args))
            return run(model_args, data_args, training_args)
        return recorded

    @property
    def runs(self) -> list[tuple[str, str]]:
        """(task, seed) of each run of a plain evaluation (its folder is ``runs/<task>/seed-<seed>``)."""
        return [(Path(training.output_dir).parent.name, str(training.seed)) for _, _, training in self.calls]


def _refused(argv=None):
    raise AssertionError(f"hfbert evaluate called a recipe's main({argv!r}); it calls run with typed arguments")
