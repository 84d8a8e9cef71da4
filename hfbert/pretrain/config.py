"""The settings of ``hfbert pretrain``: one validated dataclass, read by :class:`hfbert.arguments.CommandParser`.

Every setting has a default, so ``hfbert pretrain`` with no arguments is the project's main job: the built-in
Austen corpus, an 8,000-entry WordPiece vocabulary, the ``tiny`` preset, a few minutes on a CPU. A config file
(``--config run.yaml``) replaces defaults, and ``--key value`` replaces both. The settings that decide the examples
are the fields of :class:`hfbert.data.ExampleSettings`, shared with ``hfbert prepare`` (one name, one help text, one
check); the job's own follow. Each field's ``help`` is its ``--help`` text. Bad values raise :class:`ConfigError`
naming the setting before any work is done.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..arguments import CommandParser, UsageError, fits_type, load_settings_file
from ..data.remote import DEFAULT_CACHE_LIMIT, parse_size
from ..data.settings import ExampleSettings
from ..optim_names import OPTIMIZERS
from ..settings import setting, settings_marked

if TYPE_CHECKING:
    from ..configuration_hfbert import HfBertConfig

__all__ = ["CARD_SETTINGS", "OPTIMIZER_GROUP_KEYS", "RECOVERY_CHANGES", "RESUMABLE_CHANGES", "SCHEDULE_SETTINGS",
           "TRAJECTORY_NEUTRAL", "ConfigError", "PretrainConfig", "Phase", "command_parser", "load_config",
           "native_mixed_precision", "parse_args", "resolve_phases"]

# A fresh model's overrides by default: no dropout (short runs on small corpora learn faster without it).
FRESH_MODEL_DEFAULTS = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
# The settings that fix a pretrained model's tensor shapes (--model may not change them with --init_from).
SHAPE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "max_position_embeddings", "type_vocab_size")

# The card's fill-mask prompts: the corpus's first sentence, and two from chapters the default job holds out.
DEFAULT_FILL_MASK_TEXT = [
    "It is a truth universally acknowledged, that a single man in possession of a good [MASK], must be in want "
    "of a wife.",
    '"I hope, my dear," said Mr. Bennet to his wife, as they were at breakfast the next morning, "that you have '
    'ordered a good [MASK] to-day, because I have reason to expect an addition to our family party."',
    "When the time proposed drew near, Mrs. Weston's fears were justified in the arrival of a [MASK] of excuse.",
]


# Short sequences first: attention learns to use its neighbours at length 32 within minutes, and carries over to
# longer sequences (benchmarks/results/time_to_accuracy.md); the same tokens per step in both phases.
DEFAULT_PHASES = [
    {"max_seq_length": 32, "batch_size": 64, "fraction": 0.6},
    {"max_seq_length": 128, "batch_size": 16, "fraction": 0.4},
]


class ConfigError(UsageError):
    """A setting that cannot work; raised before any work is done."""


@dataclass
class PretrainConfig(ExampleSettings):
    """Everything ``hfbert pretrain`` needs: the example settings (:class:`~hfbert.data.ExampleSettings`; masking is
    dynamic here, and ``seed`` also seeds the weights and the batches), then the job's own."""

    # -- the example settings whose defaults or meaning differ here
    masking: Literal["static", "dynamic"] = setting(
        "dynamic", "training masks: 'dynamic' (new masks every batch) or 'static' (dupe_factor copies with fixed "
                   "masks)", card=True)
    max_seq_length: int | None = setting(
        None, "sequence length of a one-length run (no phases); default: the short-first schedule, 60% of the "
              "steps at 32 (batch 64), then 40% at 128 (batch 16)", job=True)
    seed: int = setting(42, "seed of the initial weights, the batch order, the masks and dropout", card=True,
                        job=True)
    # -- data
    prepared: list[str] | None = setting(
        None, "prepared folders or Hub dataset repos (hfbert prepare), one per sequence length of the schedule; "
              "without it the job prepares its input into output_dir/prepared first")
    cache_limit: str = setting(
        DEFAULT_CACHE_LIMIT, "disk for the bytes of remote --prepared corpora (a Hub repo or an fsspec URL) fetched "
                             "on this machine, shared by its processes, e.g. 20GB or 500MB; least recently used first "
                             "out", neutral=True)
    prepared_download: bool = setting(
        False, "copy remote --prepared corpora whole to this machine first (every shard's sha256 checked) "
               "instead of reading only the row groups each process needs", neutral=True)
    input: list[str] | None = setting(
        None, "text files, globs or fsspec URLs (UTF-8, .gz too); default: the built-in public-domain Austen corpus")
    dataset: str | None = setting(
        None, "a `datasets` dataset of raw text instead of files: a save_to_disk folder or a load_dataset path")
    dataset_split: str = setting("train", "split of --dataset")
    max_eval_examples: int = setting(
        1000, "cap on held-out examples (statically masked once, the same at every evaluation)", neutral=True)
    shuffle_window: int = setting(
        32, "row groups whose rows the training order mixes together (each is decoded once per window)")
    num_proc: int = setting(1, "processes for building examples")
    # -- tokenizer
    tokenizer: str | None = setting(
        None, "a saved tokenizer folder to reuse instead of training one; with --init_from, a vocabulary that extends "
              "the checkpoint's (hfbert train-tokenizer --extend): the embeddings grow by its new entries")
    # -- model
    init_from: str | None = setting(
        None, "start from this pretrained BERT instead of a fresh one: a Hub model id, an hfbert or transformers BERT "
              "folder (any head), or a Google BERT folder (bert_config.json, vocab.txt, bert_model.ckpt.*); its "
              "size, vocabulary and casing are kept, heads it lacks start fresh, the optimizer and schedule start "
              "anew")
    init_revision: str | None = setting(None, "branch, tag or commit of an --init_from Hub repository")
    new_embeddings: Literal["fvt", "mean"] | None = setting(
        None, "with --init_from and a --tokenizer that extends its vocabulary, how the new entries' embeddings and MLM "
              "biases start: fvt (default: the mean of those of the pieces the checkpoint's vocabulary splits the "
              "entry into) or mean (transformers' mean_resizing: the mean of all)")
    preset: str | None = setting(
        None, "model size of a fresh model: tiny, mini, small, medium, base, large (default tiny; none with "
              "--init_from, whose size is the checkpoint's)", architecture=True)
    model: dict[str, Any] | None = setting(
        None, 'HfBertConfig overrides as JSON, e.g. \'{"hidden_size": 128}\' (default: dropout off for a fresh '
              'model, the checkpoint\'s own settings with --init_from, where only non-shape settings such as '
              'dropout may change; a value given here replaces the whole default)', architecture=SHAPE_KEYS)
    next_sentence_prediction: bool | None = setting(
        None, "train the NSP head beside MLM (the original); false: MLM only. Default: on, unless the corpus gives "
              "NSP nothing to learn: when at least 90% of its training pairs take a random segment B (documents of "
              "one sentence: reviews, tweets, queries), where a trivially learned NSP head hurts fine-tuning",
        card=True)
    # -- optimisation
    optimizer: str = setting(
        "adamw", "adamw, adam_google (Google's Adam without bias correction) or lamb", card=True)
    learning_rate: float | None = setting(
        None, "peak learning rate (default 2e-3 for a fresh model, 1e-4 with --init_from: continued pretraining "
              "wants a smaller one, as Google's README advises)", recoverable=("initial_lr", "schedule"), card=True)
    weight_decay: float = setting(0.01, "decoupled weight decay; not applied to LayerNorm parameters and biases",
                                  recoverable=("weight_decay",), card=True)
    adam_beta1: float = setting(0.9, "first-moment decay", recoverable=("betas",), card=True)
    adam_beta2: float = setting(0.98, "second-moment decay", recoverable=("betas",), card=True)
    adam_epsilon: float = setting(1e-6, "added to the denominator of the update", recoverable=("eps",),
                                  card=True)
    max_grad_norm: float = setting(1.0, "global-norm gradient clipping; 0 turns it off", recoverable=True, card=True)
    warmup_ratio: float = setting(0.03, "linear warmup over this share of max_steps, then linear decay to 0",
                                  recoverable=("schedule",), card=True)
    warmup_steps: int | None = setting(None, "warmup steps; overrides warmup_ratio", recoverable=("schedule",),
                                       card=True)
    batch_size: int = setting(32, "examples per process per micro-batch", card=True)
    gradient_accumulation_steps: int = setting(1, "micro-batches per optimizer step", card=True)
    max_steps: int = setting(3000, "optimizer steps of the whole schedule (all phases)", card=True)
    max_time_minutes: float | None = setting(
        20.0, "stop the training loop of this invocation after this long (null: never); a safety net that ends a "
              "step-counted run wherever the clock stops it", neutral=True, card=True)
    budget_minutes: float | None = setting(
        None, "train for this long instead of max_steps: the schedule's progress is the training time spent over "
              "the budget (warm-up, decay and the phases follow the clock), and the run ends at the budget, "
              "annealed, then evaluates and exports; --resume continues its clock; not bitwise repeatable", card=True)
    phases: list[dict[str, Any]] | None = setting(
        None, 'the length schedule as JSON, e.g. \'[{"max_seq_length": 128, "fraction": 0.9}, '
              '{"max_seq_length": 512, "fraction": 0.1, "batch_size": 8}]\'')
    mixed_precision: str = setting(
        "auto", "auto (bf16 where the hardware computes it natively: a CUDA GPU with bf16, a CPU with AVX-512 BF16 "
                "or AMX; fp32 elsewhere; decided at start and printed), no (fp32), bf16, fp16 (fp16 needs a GPU)",
        recoverable=True, card=True)
    torch_compile: bool = setting(
        False, "compile the model with torch.compile (inductor, dynamic shapes: one graph for every batch width); "
               "the first step takes minutes to compile", resumable=True)
    gradient_checkpointing: bool = setting(
        False, "recompute each encoder layer's activations in the backward pass instead of keeping them from the "
               "forward (activation checkpointing): less memory for a longer sequence or a larger batch, for about a "
               "third more compute per step; the same losses and gradients", resumable=True, card=True)
    # -- logging, evaluation, checkpoints
    logging_steps: int = setting(10, "optimizer steps between log lines", neutral=True)
    eval_steps: int = setting(250, "optimizer steps between held-out evaluations", neutral=True)
    eval_batch_size: int = setting(64, "examples per process per evaluation batch", neutral=True)
    save_steps: int = setting(250, "optimizer steps between checkpoints", neutral=True)
    keep_last: int = setting(2, "checkpoints kept", neutral=True)
    report_to: list[str] = setting(
        help="trackers: jsonl (always on), tensorboard (when installed), and any of Accelerate's wandb, mlflow, "
             "trackio, comet_ml, aim, clearml, dvclive and swanlab (each needs its package, configured as usual: "
             "WANDB_MODE, MLFLOW_TRACKING_URI, ...); every one gets the same scalars and the run's settings",
        factory=lambda: ["jsonl", "tensorboard"], neutral=True)
    progress_bar: bool | None = setting(
        None, "true: a progress bar wherever the output goes; false: none; default: a bar on a terminal, and "
              "elsewhere (a log file, a pipe) a plain line at each log line instead of a redraw per step", neutral=True)
    output_dir: str = setting("out/hfbert-tiny-austen", "folder of the run: checkpoints, logs, the exported model",
                              neutral=True)
    resume: bool = setting(False, "continue from the latest checkpoint in output_dir", neutral=True)
    overwrite_output_dir: bool = setting(False, "start over in an output_dir that holds a previous run", neutral=True)
    resume_from: str | None = setting(
        None, "resume from this checkpoint of output_dir (e.g. checkpoint-00000400) instead of the latest; the later "
              "ones are deleted (implies --resume)", neutral=True)
    resume_with_changes: list[str] | None = setting(
        None, "settings allowed to differ from the run on resume, to recover from a divergence: the optimizer's "
              "(learning rate and warm-up, mixed precision, gradient clipping, weight decay, Adam's betas and "
              "epsilon; a setting outside them is refused with the list); each change is recorded in the run's "
              "history", neutral=True)
    loss_spike_factor: float | None = setting(
        4.0, "stop as diverged when a step's loss exceeds this multiple of the median of the last loss_spike_window "
             "steps (null: stop on NaN/inf only)", neutral=True)
    loss_spike_window: int = setting(100, "steps whose median loss_spike_factor compares with", neutral=True)
    # -- export
    push_to_hub: str | None = setting(None, "repository id to upload the finished folder to", neutral=True)
    hub_revision: str | None = setting(None, "branch to push to (created when missing)", neutral=True)
    hub_timeout: float | None = setting(
        None, "seconds to wait for the Hub to connect or answer (default: $HFBERT_HUB_TIMEOUT, else 60)", neutral=True)
    fill_mask_text: list[str] = setting(help="sentences with [MASK] to try the trained model on (one or more)",
                                         factory=lambda: list(DEFAULT_FILL_MASK_TEXT), neutral=True)
    # -- downstream evaluation of the exported model (hfbert evaluate), before the push
    evaluate_suite: str | None = setting(
        None, "after the export, fine-tune the model on every task of this suite (glue, local or a suite file; see "
              "hfbert evaluate) and add the scores to its card; checked before training starts", neutral=True)
    evaluate_data_dir: str | None = setting(
        None, "the evaluation's --data_dir: the folder of the suite's local files and of local copies of its Hub "
              "datasets", neutral=True)
    evaluate_seeds: list[int] = setting(help="fine-tuning seeds of the evaluation: every task runs once per seed",
                                         factory=lambda: [1, 2, 3], neutral=True)
    evaluate_suite_steps: int | None = setting(
        None, "also fine-tune the suite on the model every this many optimizer steps during training and at its end "
              "(the clock of a budget run stops meanwhile): the scores go to the metrics log, the trackers, the "
              "downstream curve and the card; a suite's quick form (local-quick) keeps it cheap", neutral=True)

    def __post_init__(self) -> None:
        if isinstance(self.fill_mask_text, str):  # one sentence, as a file or a caller may give it
            self.fill_mask_text = [self.fill_mask_text]
        try:
            super().__post_init__()  # the types of every field, and the example settings' values
        except UsageError as err:
            raise ConfigError(str(err)) from None
        self.resume = self.resume or self.resume_from is not None  # choosing a checkpoint is resuming
        _check_model_source(self)
        if self.init_from is None:  # a fresh model's defaults, resolved once so that a run records them
            self.preset = "tiny" if self.preset is None else self.preset
            self.model = dict(FRESH_MODEL_DEFAULTS) if self.model is None else self.model
        self.model = {} if self.model is None else self.model
        if self.learning_rate is None:
            self.learning_rate = 2e-3 if self.init_from is None else 1e-4
        _check_values(self)
        if self.mixed_precision == "auto":  # decided once, so a run records (and its resume compares) what it used
            self.mixed_precision = native_mixed_precision()[0]
        resolve_phases(self)  # validates the phase list

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def model_config(self, vocab_size: int = 16, pad_token_id: int = 0) -> HfBertConfig:
        """The fresh model's :class:`HfBertConfig`: ``preset`` with the ``model`` overrides, for a vocabulary of
        ``vocab_size`` (before the tokenizer is known, a placeholder: every other value is already final)."""
        from ..configuration_hfbert import HfBertConfig  # transformers: not needed to read or show the settings

        return HfBertConfig.from_preset(self.preset, vocab_size=vocab_size, pad_token_id=pad_token_id, **self.model)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PretrainConfig:
        if not isinstance(values, dict):
            raise ConfigError(f"a config must be a mapping of settings, got {type(values).__name__}")
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"unknown setting(s) {unknown}; run `hfbert pretrain --help` for the list")
        return cls(**values)


# What the code needs to know of each setting is marked on its field (``setting(..., mark=True)``), and read here:
#: Settings that do not change what a run computes: two runs differing in one of them end with bitwise-equal weights
#: (tested one by one). When, where and how often the run evaluates, saves, logs and reports; where it writes and
#: pushes; how remote data is fetched; when it stops (a time limit ends the same trajectory earlier).
TRAJECTORY_NEUTRAL = frozenset(settings_marked(PretrainConfig, "neutral"))
#: Settings a resumed run may change without --resume_with_changes: the neutral ones, and those marked
#: ``resumable`` (torch_compile, whose compiled kernels compute the same steps with other float rounding).
RESUMABLE_CHANGES = TRAJECTORY_NEUTRAL | frozenset(settings_marked(PretrainConfig, "resumable"))
#: Settings --resume_with_changes may list: they change how the weights move from the checkpoint on, never what the
#: checkpoint means (the model, the data and the batch plan stay the run's). The mark says where a new value goes
#: in a resumed run: the optimizer's per-group entries it names and, for "schedule", the learning-rate schedule
#: (``True``: nothing is carried over; the resumed run reads the new value where it reads the setting).
RECOVERY_CHANGES = frozenset(settings_marked(PretrainConfig, "recoverable"))
_WHERE = {f.name: f.metadata["recoverable"] for f in dataclasses.fields(PretrainConfig)
          if isinstance(f.metadata.get("recoverable"), tuple)}
#: Each recoverable setting -> the optimizer group entries that hold it.
OPTIMIZER_GROUP_KEYS = {name: keys for name, where in _WHERE.items()
                        if (keys := tuple(key for key in where if key != "schedule"))}
#: The recoverable settings the learning-rate schedule is built from.
SCHEDULE_SETTINGS = frozenset(name for name, where in _WHERE.items() if "schedule" in where)
#: Hyper-parameters the pretrained model's card shows, in the fields' order.
CARD_SETTINGS = settings_marked(PretrainConfig, "card")


@dataclass(frozen=True)
class Phase:
    """One stretch of the schedule at a fixed sequence length: optimizer steps [first_step, first_step + steps)."""

    index: int
    max_seq_length: int
    steps: int
    first_step: int
    batch_size: int


# ----------------------------------------------------------------------------------------------------------------
# Validation


@functools.cache
def native_mixed_precision() -> tuple[str, str]:
    """("bf16", why) where this machine computes bf16 natively, else ("no", why). bf16 autocast pays only there:
    elsewhere it is emulated and slower than fp32. fp16 is never chosen by itself (it needs loss scaling)."""
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return "bf16", f"{name} computes bf16"
        return "no", f"{name} has no native bf16"
    if torch.backends.mps.is_available():
        return "no", "bf16 autocast is not native on this Apple GPU"
    probes = (("AMX", "_is_amx_tile_supported"), ("AVX-512 BF16", "_is_avx512_bf16_supported"))
    capable = [name for name, probe in probes if getattr(torch.cpu, probe, lambda: False)()]
    if capable:
        return "bf16", f"this CPU has {' and '.join(capable)}"
    return "no", f"this CPU ({torch.backends.cpu.get_cpu_capability()}) has neither AVX-512 BF16 nor AMX"


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _check_values(c: PretrainConfig) -> None:
    _require(c.input is None or c.dataset is None, "give either input (files) or dataset, not both")
    _require(c.input is None or len(c.input) > 0, "input is an empty list; give at least one file")
    _require(c.prepared is None or len(c.prepared) > 0, "prepared is an empty list; give at least one folder")
    _require(c.prepared is None or (c.input is None and c.dataset is None
                                    and (c.tokenizer is None or c.init_from is not None)),
             "prepared folders hold their examples and tokenizer: give prepared, or input/dataset/tokenizer (with "
             "--init_from, --tokenizer names the vocabulary that extends the checkpoint's)")
    _require(0.0 < c.eval_fraction < 1.0, f"eval_fraction must be in (0, 1), got {c.eval_fraction}")
    _require(c.optimizer in OPTIMIZERS, f"unknown optimizer {c.optimizer!r}; expected one of {list(OPTIMIZERS)}")
    _require(c.learning_rate > 0, f"learning_rate must be > 0, got {c.learning_rate}")
    _require(c.weight_decay >= 0, f"weight_decay must be >= 0, got {c.weight_decay}")
    for name in ("adam_beta1", "adam_beta2"):
        _require(0.0 <= getattr(c, name) < 1.0, f"{name} must be in [0, 1), got {getattr(c, name)}")
    _require(c.adam_epsilon > 0, f"adam_epsilon must be > 0, got {c.adam_epsilon}")
    _require(c.max_grad_norm >= 0, f"max_grad_norm must be >= 0 (0 = no clipping), got {c.max_grad_norm}")
    _require(0.0 <= c.warmup_ratio < 1.0, f"warmup_ratio must be in [0, 1), got {c.warmup_ratio}")
    _require(c.warmup_steps is None or 0 <= c.warmup_steps <= c.max_steps,
             f"warmup_steps must be in [0, max_steps={c.max_steps}], got {c.warmup_steps}")
    _require(c.max_time_minutes is None or c.max_time_minutes > 0,
             f"max_time_minutes must be > 0 (or null for no limit), got {c.max_time_minutes}")
    _require(c.budget_minutes is None or c.budget_minutes > 0,
             f"budget_minutes must be > 0 (or null: train for max_steps), got {c.budget_minutes}")
    _require(c.budget_minutes is None or c.warmup_steps is None,
             "warmup_steps counts steps, which a budget run does not fix in advance; give warmup_ratio instead")
    _require(c.mixed_precision in ("auto", "no", "bf16", "fp16"),
             f"mixed_precision must be 'auto', 'no', 'bf16' or 'fp16', got {c.mixed_precision!r}")
    for name in ("max_eval_examples", "shuffle_window", "num_proc", "batch_size", "max_steps",
                 "gradient_accumulation_steps", "logging_steps", "eval_steps", "eval_batch_size", "save_steps",
                 "keep_last"):
        _require(getattr(c, name) >= 1, f"{name} must be >= 1, got {getattr(c, name)}")
    _require(c.loss_spike_factor is None or c.loss_spike_factor > 1,
             f"loss_spike_factor must be > 1 (or null: stop on NaN/inf only), got {c.loss_spike_factor}")
    _require(c.loss_spike_window >= 1, f"loss_spike_window must be >= 1, got {c.loss_spike_window}")
    _require(c.hub_timeout is None or c.hub_timeout > 0, f"hub_timeout must be > 0 seconds, got {c.hub_timeout}")
    try:
        parse_size(c.cache_limit)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    _check_trackers(c.report_to)
    _require(bool(c.output_dir), "output_dir must not be empty")
    for text in c.fill_mask_text:
        _require("[MASK]" in text, f"fill_mask_text must contain [MASK], got {text!r}")
    _check_model_overrides(c)
    _check_evaluation(c)


# --report_to: hfbert's JSON lines, then Accelerate's trackers, each with the module it imports and the package that
# installs it. TensorBoard is on by default, so it is used where installed and skipped elsewhere; another tracker is
# asked for by name, and a missing package stops the run before any work.
TRACKERS = {"jsonl": None, "tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb"),
            "mlflow": ("mlflow", "mlflow"), "trackio": ("trackio", "trackio"), "comet_ml": ("comet_ml", "comet-ml"),
            "aim": ("aim", "aim"), "clearml": ("clearml", "clearml"), "dvclive": ("dvclive", "dvclive"),
            "swanlab": ("swanlab", "swanlab")}


def _check_trackers(report_to: list[str]) -> None:
    from importlib.util import find_spec

    unknown = sorted(set(report_to) - set(TRACKERS))
    _require(not unknown, f"report_to accepts {', '.join(TRACKERS)}; got {unknown}")
    for name in report_to:
        if name not in ("jsonl", "tensorboard") and find_spec(TRACKERS[name][0]) is None:
            raise ConfigError(f"report_to {name} needs the {TRACKERS[name][1]} package, which is not installed: "
                              f"pip install {TRACKERS[name][1]}")


def _check_evaluation(c: PretrainConfig) -> None:
    """The downstream suite runs after training, so everything it can be checked for is checked now: the suite,
    every task's data and columns, its metric and recipe settings (:func:`hfbert.evaluation.check_settings`)."""
    if c.evaluate_suite is None:
        _require(c.evaluate_data_dir is None, "evaluate_data_dir is the data of an evaluate_suite; give that too")
        _require(c.evaluate_suite_steps is None, "evaluate_suite_steps says how often to run an evaluate_suite; "
                                                 "give that too")
        return
    _require(c.evaluate_suite_steps is None or c.evaluate_suite_steps >= 1,
             f"evaluate_suite_steps must be >= 1, got {c.evaluate_suite_steps}")
    _require(len(c.evaluate_seeds) > 0 and len(set(c.evaluate_seeds)) == len(c.evaluate_seeds),
             f"evaluate_seeds must be one or more different seeds, got {c.evaluate_seeds}")
    from ..evaluation import check_settings

    try:
        check_settings(c.evaluate_suite, c.evaluate_data_dir)
    except UsageError as err:
        raise ConfigError(f"evaluate_suite {c.evaluate_suite}: {err}") from None


def _check_model_source(c: PretrainConfig) -> None:
    """A pretrained model brings its own size, vocabulary and tokenizer: settings that would give them another
    way are refused, naming both; a --tokenizer may only extend its vocabulary (checked once both are found)."""
    if c.init_from is None:
        _require(c.init_revision is None, "init_revision names a revision of --init_from; give --init_from too")
        _require(c.new_embeddings is None, f"--new_embeddings {c.new_embeddings} starts the entries a --tokenizer adds "
                                           "to an --init_from model's vocabulary; give --init_from too")
        return
    for f in dataclasses.fields(c):  # the architecture settings: all of one (True), or the model keys it names
        fixed, value = f.metadata.get("architecture"), getattr(c, f.name)
        if fixed is True:
            _require(value is None, f"--{f.name} {value} and --init_from {c.init_from} both give the model's size; "
                                    f"drop --{f.name} (the size is the checkpoint's)")
        elif fixed:
            clash = sorted(set(value or {}) & set(fixed))
            _require(not clash, f"--{f.name} sets {', '.join(clash)}, which --init_from {c.init_from} fixes; only "
                                "settings that keep the checkpoint's shapes (dropout, ...) may change")
    _require(c.new_embeddings is None or c.tokenizer is not None,
             f"--new_embeddings {c.new_embeddings} starts the entries a --tokenizer adds to --init_from "
             f"{c.init_from}'s vocabulary; give that --tokenizer")
    if c.tokenizer is not None and c.new_embeddings is None:
        c.new_embeddings = "fvt"


def _check_model_overrides(c: PretrainConfig) -> None:
    """Build the model config once with a placeholder vocabulary, so a bad preset or override fails now, not
    after the tokenizer and the examples are built."""
    if c.init_from is not None:  # checked against the checkpoint's config once it is found
        return
    if "vocab_size" in c.model:
        raise ConfigError("set the vocabulary size with vocab_size (or tokenizer), not model.vocab_size")
    try:
        c.model_config(vocab_size=max(c.vocab_size, 16)).check_values()
    except (TypeError, ValueError) as err:
        raise ConfigError(f"bad model setting (preset {c.preset!r}, model {c.model}): {err}") from None


def resolve_phases(c: PretrainConfig, prepared_lengths: list[int] | None = None,
                   total: int | None = None) -> list[Phase]:
    """The schedule as phases with step counts: ``phases`` entries give ``max_seq_length`` and either ``steps``
    (summing to max_steps) or ``fraction`` (summing to 1; the last phase takes the rounding remainder), and
    optionally their own ``batch_size``. Without ``phases`` or ``max_seq_length``, one prepared folder trains at
    its own length (``prepared_lengths``: the lengths of the ``prepared`` folders, when known); anything else
    follows the short-first default schedule. ``total``: what fractions cut (default max_steps; a budget run gives
    the units of its budget, so that each phase's share is exact)."""
    if c.phases is not None:
        raw = c.phases
    elif c.max_seq_length is not None:
        raw = [{"max_seq_length": c.max_seq_length, "fraction": 1.0}]
    elif prepared_lengths is not None and len(prepared_lengths) == 1:
        raw = [{"max_seq_length": prepared_lengths[0], "fraction": 1.0}]
    else:
        raw = DEFAULT_PHASES
    _require(len(raw) > 0, "phases is an empty list")
    # a pretrained model's positions are checked when it is found (hfbert.pretrain.loop)
    positions = 512 if c.init_from is not None else c.model_config().max_position_embeddings
    allowed = {"max_seq_length", "steps", "fraction", "batch_size"}
    for number, phase in enumerate(raw, start=1):
        _require(isinstance(phase, dict), f"phase {number} must be a mapping, got {phase!r}")
        extra = sorted(set(phase) - allowed)
        _require(not extra, f"phase {number} has unknown key(s) {extra}; allowed: {sorted(allowed)}")
        length = phase.get("max_seq_length")
        _require(fits_type(int, length) and 8 <= length <= positions,
                 f"phase {number}: max_seq_length must be an int in [8, {positions}] (the model's positions), "
                 f"got {length!r}")
        _require(("steps" in phase) != ("fraction" in phase), f"phase {number} needs exactly one of steps, fraction")
        _require(fits_type(int, phase.get("batch_size", 1)) and phase.get("batch_size", 1) >= 1,
                 f"phase {number}: batch_size must be an int >= 1, got {phase.get('batch_size')!r}")
    kinds = {"steps" if "steps" in p else "fraction" for p in raw}
    _require(len(kinds) == 1, "give every phase steps, or every phase a fraction, not a mix")
    if kinds == {"steps"}:
        steps = [p["steps"] for p in raw]
        _require(all(fits_type(int, s) and s >= 1 for s in steps), f"phase steps must be ints >= 1, got {steps}")
        _require(sum(steps) == c.max_steps, f"phase steps {steps} sum to {sum(steps)}, not max_steps={c.max_steps}")
    else:
        fractions = [p["fraction"] for p in raw]
        _require(all(fits_type(float, f) and 0 < f <= 1 for f in fractions),
                 f"phase fractions must be in (0, 1], got {fractions}")
        _require(abs(sum(fractions) - 1.0) < 1e-6, f"phase fractions {fractions} must sum to 1")
        total = c.max_steps if total is None else total  # a budget run cuts its budget's units, not steps
        steps = [int(round(f * total)) for f in fractions[:-1]]
        steps.append(total - sum(steps))
        _require(all(s >= 1 for s in steps),
                 f"max_steps={c.max_steps} is too small for the phase fractions {fractions} (steps {steps})")
    phases, first = [], 0
    for index, (phase, count) in enumerate(zip(raw, steps)):
        phases.append(Phase(index, phase["max_seq_length"], count, first, phase.get("batch_size", c.batch_size)))
        first += count
    return phases


# ----------------------------------------------------------------------------------------------------------------
# Reading files and the command line


def command_parser() -> CommandParser:
    """The ``hfbert pretrain`` parser: ``--config FILE.json|yaml`` and one ``--key value`` option per field."""
    return CommandParser("hfbert pretrain", PretrainConfig, description=(
        "Pretrain BERT: corpus -> WordPiece vocabulary -> NSP/MLM examples -> Accelerate training -> Hub-format "
        "folder. Mappings and lists of mappings (--model, --phases) are JSON or YAML text."))


def load_config(config_file: str | Path | None = None, overrides: dict[str, Any] | None = None) -> PretrainConfig:
    """Defaults <- a JSON/YAML file <- ``overrides`` (a mapping of settings), validated."""
    values = load_settings_file(config_file) if config_file is not None else {}
    values.update(overrides or {})
    return PretrainConfig.from_dict(values)


def parse_args(argv: list[str]) -> PretrainConfig:
    """``[--config FILE] [--key value ...]`` -> a validated :class:`PretrainConfig`; raises :class:`UsageError`
    (a :class:`ConfigError` for a bad value), and exits with status 2 for a malformed command line."""
    return command_parser().parse_values(argv)
