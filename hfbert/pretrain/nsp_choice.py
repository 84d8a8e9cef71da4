"""Next sentence prediction where it can be learned.

NSP (the original BERT's second task: is segment B the text that follows A, or a random segment?) teaches the
encoder something only where the two cases differ in the text. Where they do not, the NSP head learns the label
prior and its loss spends the encoder's gradient on nothing -- or worse: on a corpus whose pairs all take a random
B, an NSP head learned in a few steps made the model fine-tune worse (docs/downstream.md). Two rules decide where
NSP is trained, unless ``--next_sentence_prediction`` says so:

1. **Before the first step, from the data, length by length** (:func:`choose_nsp`). A length whose training rows
   take a random segment B in at least :data:`DEGENERATE_NSP` of their pairs does not train NSP: its label is then
   the prior. Short sequences hold more chunks of one sentence, which always take a random B, so a 32-token phase
   may have nothing to learn where the 128-token phase of the same text does. Only training rows are counted.

2. **During training, from the held-out set** (:func:`check_held_out`). Text can have pairs of both kinds and still
   nothing to tell them apart: unrelated lines grouped into documents, or pairs too short to carry a topic. At the
   first held-out evaluation after :data:`CHECK_SHARE` of a phase that trains NSP, the held-out NSP accuracy is
   compared with the majority class of the held-out labels by a one-sided exact binomial test: unless the accuracy
   is above the baseline at significance :data:`SIGNIFICANCE` on the held-out pair count, NSP learns nothing there
   and stops for the rest of the phase (the next phase, at another length, trains and is checked again). A held-out
   set too small to see an accuracy :data:`DETECTABLE` above the baseline is not checked. Given
   ``--next_sentence_prediction true``, NSP trains on and the run says that it learns nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .checkpointing import from_main

__all__ = ["CHECK_SHARE", "DEGENERATE_NSP", "DETECTABLE", "NSP_COUNT_BLOCKS", "NspChoice", "SIGNIFICANCE",
           "binomial_tail", "check_held_out", "check_note", "choose_nsp", "random_next_share"]

#: At least this share of random-B pairs leaves NSP nothing to learn (documents of a single sentence).
DEGENERATE_NSP = 0.9
#: Training rows whose NSP labels are counted: the label column of at most this many row groups, spread evenly over
#: the training split (every one of a corpus of up to that many groups).
NSP_COUNT_BLOCKS = 64
#: The share of a phase that trains NSP before its held-out accuracy is checked.
CHECK_SHARE = 0.25
#: The one-sided p-value above which held-out NSP accuracy counts as the majority baseline.
SIGNIFICANCE = 0.01
#: A held-out set is checked only where an accuracy this far above the baseline would be significant: a smaller one
#: could not tell NSP that learns from NSP that does not.
DETECTABLE = 0.1


@dataclass
class NspChoice:
    """Whether each length of the schedule trains NSP, as the settings or the data decide before the first step."""

    by_length: dict[int, bool]
    given: bool  # --next_sentence_prediction was set: the held-out check reports, never stops
    notes: list[str] = field(default_factory=list)  # why NSP is off at a length, one line each

    def trains(self, length: int) -> bool:
        return self.by_length[length]


def random_next_share(corpus) -> float | None:
    """The share of a prepared corpus's training pairs that take a random segment B (label 1), counted on training
    rows only: every row of a corpus of up to :data:`NSP_COUNT_BLOCKS` row groups, else those of that many groups
    spread evenly over the split. None without training rows."""
    blocks = corpus.blocks("train")
    if len(blocks) == 0 or blocks.sum() == 0:
        return None
    starts = np.concatenate(([0], np.cumsum(blocks)))
    chosen = np.unique(np.linspace(0, len(blocks) - 1, min(len(blocks), NSP_COUNT_BLOCKS)).round().astype(int))
    random_next = rows = 0
    for block in chosen.tolist():  # one row group at a time: the reader keeps only a few decoded
        labels = corpus.read_arrays("train", np.arange(starts[block], starts[block + 1]))["next_sentence_label"]
        random_next, rows = random_next + int(labels.sum()), rows + len(labels)
    return random_next / rows


def choose_nsp(config, data, lengths: Sequence[int], say: Callable[[str], None] = print,
               accelerator=None) -> NspChoice:
    """Rule 1 (module docstring): which of ``lengths`` train NSP. The same on every process and on resume. When
    every length agrees, ``config.next_sentence_prediction`` is set to the choice (the card and metrics.json show
    it).

    Args:
        config (`PretrainConfig`): the run's settings; ``next_sentence_prediction``, when given, decides.
        data (`TrainingData`): the run's corpora (:class:`~hfbert.pretrain.corpora.TrainingData`), whose training
            rows decide otherwise.
        lengths (`Sequence[int]`): the schedule's sequence lengths.
        say (`Callable[[str], None]`, *optional*): prints each length turned off, one line.
        accelerator (`Accelerator`, *optional*): the run's; its main process counts the labels and gives every
            process the counts (the others read no rows). `None`: this process counts.

    Returns:
        `NspChoice`: whether each length trains NSP, and why not.
    """
    lengths = list(dict.fromkeys(lengths))
    if config.next_sentence_prediction is not None:
        return NspChoice(dict.fromkeys(lengths, config.next_sentence_prediction), given=True)
    count = lambda: [random_next_share(data.by_length[length].corpus) for length in lengths]  # noqa: E731
    shares = count() if accelerator is None else from_main(accelerator, count)
    choice = NspChoice({}, given=False)
    for length, share in zip(lengths, shares):
        choice.by_length[length] = share is None or share < DEGENERATE_NSP
        if not choice.by_length[length]:
            where = f" at length {length}" if len(lengths) > 1 else ""
            choice.notes.append(f"next sentence prediction: off{where} ({share:.0%} of the training pairs take a "
                                "random segment B, so NSP has nothing to learn; --next_sentence_prediction true to "
                                "train it anyway)")
            say(choice.notes[-1])
    if len(set(choice.by_length.values())) == 1:
        config.next_sentence_prediction = choice.by_length[lengths[0]]
    return choice


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed exactly in log space."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0 or p >= 1.0:
        return float(p >= 1.0)
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
             for i in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def check_held_out(correct: int, pairs: int, baseline: float) -> dict | None:
    """Rule 2 (module docstring) on one held-out evaluation: ``correct`` of ``pairs`` NSP labels right, against the
    majority class's share ``baseline``. ``{"accuracy", "baseline", "pairs", "p_value", "learned"}``, or None where
    the held-out set is too small for the test to tell (an accuracy :data:`DETECTABLE` above the baseline would not be
    significant on it)."""
    if pairs == 0 or binomial_tail(math.ceil(min(baseline + DETECTABLE, 1.0) * pairs), pairs, baseline) > SIGNIFICANCE:
        return None
    p_value = binomial_tail(correct, pairs, baseline)
    return {"accuracy": correct / pairs, "baseline": baseline, "pairs": pairs, "p_value": p_value,
            "learned": p_value <= SIGNIFICANCE}


def check_note(check: dict, given: bool) -> str:
    """The one line that says a held-out check found NSP at the majority baseline (``check`` as the loop records
    it: :func:`check_held_out`'s result with ``step``, ``max_seq_length`` and ``stopped``)."""
    where = f"step {check['step']} (length {check['max_seq_length']})"
    found = (f"held-out NSP accuracy {check['accuracy']:.3f} is not above the majority baseline "
             f"{check['baseline']:.3f} ({check['pairs']} pairs, one-sided binomial p = {check['p_value']:.2g})")
    if given:
        return f"next sentence prediction: at {where}, {found}; trained on, as --next_sentence_prediction true asks"
    if check["stopped"]:
        return (f"next sentence prediction: stopped at step {check['step']}, for the rest of the phase at length "
                f"{check['max_seq_length']}: {found}, so NSP learns nothing there")
    return f"next sentence prediction: at {where}, {found}, so the NSP head learned only the label prior"
