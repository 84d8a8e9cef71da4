"""The settings of ``hfbert pretrain``: one validated dataclass, read from JSON/YAML files and ``--key value``.

Every setting has a default, so ``hfbert pretrain`` with no arguments is the project's main job: the built-in
Austen corpus, an 8,000-entry WordPiece vocabulary, the ``mini`` preset, a few minutes on a CPU. A config file
(``--config run.yaml``) replaces defaults, and ``--key value`` replaces both. Unknown keys and bad values raise
:class:`ConfigError` naming the key before any work is done.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ConfigError", "PretrainConfig", "Phase", "load_config", "parse_args", "resolve_phases"]

# Settings that may differ between a run and its resumption (they do not change the trajectory of training).
RESUMABLE_CHANGES = frozenset({
    "resume", "max_time_minutes", "keep_last", "save_steps", "eval_steps", "logging_steps", "push_to_hub",
    "hub_revision", "fill_mask_text", "progress_bar", "report_to", "output_dir", "overwrite_output_dir",
    "max_eval_examples", "eval_batch_size",
})

DEFAULT_FILL_MASK_TEXT = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
    "of a [MASK]."
)


class ConfigError(ValueError):
    """A setting that cannot work; raised before any work is done."""


@dataclass
class PretrainConfig:
    """Everything ``hfbert pretrain`` needs. Field comments are the ``--help`` text."""

    # -- data
    corpus: list[str] | None = None  # text files (UTF-8); default: the built-in public-domain Austen corpus
    dataset: str | None = None  # a `datasets` dataset instead of files: a save_to_disk folder or a load_dataset path
    dataset_split: str = "train"  # split of --dataset
    text_column: str | None = None  # column of --dataset with the text ('sentences' or 'text' when not given)
    input_layout: str | None = None  # 'sentences' (one per line, blank line between documents) or 'paragraphs'
    document_boundary: str | None = None  # regex for heading lines that start a new document
    eval_fraction: float = 0.05  # share of documents held out for evaluation (whole documents)
    max_eval_examples: int = 1000  # cap on held-out examples (statically masked once, the same at every eval)
    masking: str = "dynamic"  # training masks: 'dynamic' (new masks every batch) or 'static' (dupe_factor copies)
    dupe_factor: int | None = None  # corpus copies with different masks (default 10 static, 1 dynamic)
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    short_seq_prob: float = 0.1
    whole_word_mask: bool = False
    num_proc: int = 1  # processes for building examples
    # -- tokenizer
    tokenizer: str | None = None  # a saved tokenizer folder to reuse instead of training one
    vocab_size: int = 8000  # WordPiece vocabulary size when training one
    lowercase: bool = True
    # -- model
    preset: str = "mini"  # tiny, mini, small, medium, base, large
    model: dict[str, Any] = field(default_factory=dict)  # HfBertConfig overrides, e.g. {"hidden_size": 128}
    # -- optimisation
    optimizer: str = "adamw"  # adamw, adam_google (Google's Adam without bias correction) or lamb
    learning_rate: float = 5e-4
    weight_decay: float = 0.01  # not applied to LayerNorm parameters and biases
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-6
    max_grad_norm: float = 1.0  # global-norm clipping; 0 turns it off
    warmup_ratio: float = 0.1  # linear warmup over this share of max_steps, then linear decay to 0
    warmup_steps: int | None = None  # overrides warmup_ratio
    batch_size: int = 32  # examples per process per micro-step
    gradient_accumulation_steps: int = 1
    max_steps: int = 1000  # optimizer steps of the whole schedule (all phases)
    max_time_minutes: float | None = 4.0  # stop the training loop of this invocation after this long (null: never)
    max_seq_length: int = 128  # used when no phases are given
    phases: list[dict[str, Any]] | None = None  # [{max_seq_length: 128, fraction: 0.9}, {max_seq_length: 512, ...}]
    mixed_precision: str = "no"  # no, bf16, fp16 (fp16 needs a GPU)
    # -- logging, evaluation, checkpoints
    logging_steps: int = 10
    eval_steps: int = 100
    eval_batch_size: int = 64
    save_steps: int = 100
    keep_last: int = 2  # checkpoints kept
    report_to: list[str] = field(default_factory=lambda: ["jsonl", "tensorboard"])  # JSONL always, tensorboard if found
    progress_bar: bool = True
    seed: int = 42
    output_dir: str = "out/hfbert-mini-austen"
    resume: bool = False  # continue from the latest checkpoint in output_dir
    overwrite_output_dir: bool = False  # start over in an output_dir that holds a previous run
    # -- export
    push_to_hub: str | None = None  # repository id to upload the finished folder to
    hub_revision: str | None = None  # branch to push to (created when missing)
    fill_mask_text: str = DEFAULT_FILL_MASK_TEXT

    def __post_init__(self) -> None:
        _check_types(self)
        _check_values(self)
        resolve_phases(self)  # validates the phase list

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PretrainConfig:
        if not isinstance(values, dict):
            raise ConfigError(f"a config must be a mapping of settings, got {type(values).__name__}")
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"unknown setting(s) {unknown}; run `hfbert pretrain --help` for the list")
        return cls(**values)


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


def _type_hints() -> dict[str, Any]:
    return typing.get_type_hints(PretrainConfig)


def _accepts(hint: Any, value: Any) -> bool:
    """isinstance against a type hint (``int | None``, ``list[str]``, ``dict[str, Any]``); bools are not ints."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(arg, value) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_accepts(item, v) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) for k in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "") if not isinstance(hint, type) else hint.__name__


def _check_types(config: PretrainConfig) -> None:
    for name, hint in _type_hints().items():
        value = getattr(config, name)
        if not _accepts(hint, value):
            raise ConfigError(f"{name} must be {_type_name(hint)}, got {value!r}")
        if hint is float:
            setattr(config, name, float(value))  # 1 and 1.0 mean the same; keep the dump consistent


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _check_values(c: PretrainConfig) -> None:
    from ..optim import OPTIMIZERS

    _require(c.corpus is None or c.dataset is None, "give either corpus (files) or dataset, not both")
    _require(c.corpus is None or len(c.corpus) > 0, "corpus is an empty list; give at least one file")
    _require(c.input_layout in (None, "sentences", "paragraphs"),
             f"input_layout must be 'sentences' or 'paragraphs', got {c.input_layout!r}")
    _require(0.0 < c.eval_fraction < 1.0, f"eval_fraction must be in (0, 1), got {c.eval_fraction}")
    _require(c.masking in ("dynamic", "static"), f"masking must be 'dynamic' or 'static', got {c.masking!r}")
    _require(0.0 < c.masked_lm_prob < 1.0, f"masked_lm_prob must be in (0, 1), got {c.masked_lm_prob}")
    _require(0.0 <= c.short_seq_prob <= 1.0, f"short_seq_prob must be in [0, 1], got {c.short_seq_prob}")
    _require(c.vocab_size >= 16, f"vocab_size must be at least 16, got {c.vocab_size}")
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
    _require(c.mixed_precision in ("no", "bf16", "fp16"),
             f"mixed_precision must be 'no', 'bf16' or 'fp16', got {c.mixed_precision!r}")
    for name in ("max_eval_examples", "max_predictions_per_seq", "num_proc", "batch_size", "max_steps",
                 "gradient_accumulation_steps", "logging_steps", "eval_steps", "eval_batch_size", "save_steps",
                 "keep_last"):
        _require(getattr(c, name) >= 1, f"{name} must be >= 1, got {getattr(c, name)}")
    _require(c.dupe_factor is None or c.dupe_factor >= 1, f"dupe_factor must be >= 1, got {c.dupe_factor}")
    _require(c.seed >= 0, f"seed must be >= 0, got {c.seed}")
    unknown_trackers = sorted(set(c.report_to) - {"jsonl", "tensorboard"})
    _require(not unknown_trackers, f"report_to accepts 'jsonl' and 'tensorboard', got {unknown_trackers}")
    _require(bool(c.output_dir), "output_dir must not be empty")
    _require("[MASK]" in c.fill_mask_text, f"fill_mask_text must contain [MASK], got {c.fill_mask_text!r}")
    _check_model_overrides(c)


def _check_model_overrides(c: PretrainConfig) -> None:
    """Build the model config once with a placeholder vocabulary, so a bad preset or override fails now, not
    after the tokenizer and the examples are built."""
    from ..configuration_hfbert import HfBertConfig

    if "vocab_size" in c.model:
        raise ConfigError("set the vocabulary size with vocab_size (or tokenizer), not model.vocab_size")
    try:
        HfBertConfig.from_preset(c.preset, vocab_size=max(c.vocab_size, 16), **c.model)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"bad model setting (preset {c.preset!r}, model {c.model}): {err}") from None


def resolve_phases(c: PretrainConfig) -> list[Phase]:
    """The schedule as phases with step counts: ``phases`` entries give ``max_seq_length`` and either ``steps``
    (summing to max_steps) or ``fraction`` (summing to 1; the last phase takes the rounding remainder), and
    optionally their own ``batch_size``."""
    from ..configuration_hfbert import HfBertConfig

    raw = c.phases if c.phases is not None else [{"max_seq_length": c.max_seq_length, "fraction": 1.0}]
    _require(len(raw) > 0, "phases is an empty list")
    positions = HfBertConfig.from_preset(c.preset, vocab_size=16, **c.model).max_position_embeddings
    allowed = {"max_seq_length", "steps", "fraction", "batch_size"}
    for number, phase in enumerate(raw, start=1):
        _require(isinstance(phase, dict), f"phase {number} must be a mapping, got {phase!r}")
        extra = sorted(set(phase) - allowed)
        _require(not extra, f"phase {number} has unknown key(s) {extra}; allowed: {sorted(allowed)}")
        length = phase.get("max_seq_length")
        _require(_accepts(int, length) and 8 <= length <= positions,
                 f"phase {number}: max_seq_length must be an int in [8, {positions}] (the model's positions), "
                 f"got {length!r}")
        _require(("steps" in phase) != ("fraction" in phase), f"phase {number} needs exactly one of steps, fraction")
        _require(_accepts(int, phase.get("batch_size", 1)) and phase.get("batch_size", 1) >= 1,
                 f"phase {number}: batch_size must be an int >= 1, got {phase.get('batch_size')!r}")
    kinds = {"steps" if "steps" in p else "fraction" for p in raw}
    _require(len(kinds) == 1, "give every phase steps, or every phase a fraction, not a mix")
    if kinds == {"steps"}:
        steps = [p["steps"] for p in raw]
        _require(all(_accepts(int, s) and s >= 1 for s in steps), f"phase steps must be ints >= 1, got {steps}")
        _require(sum(steps) == c.max_steps, f"phase steps {steps} sum to {sum(steps)}, not max_steps={c.max_steps}")
    else:
        fractions = [p["fraction"] for p in raw]
        _require(all(_accepts(float, f) and 0 < f <= 1 for f in fractions),
                 f"phase fractions must be in (0, 1], got {fractions}")
        _require(abs(sum(fractions) - 1.0) < 1e-6, f"phase fractions {fractions} must sum to 1")
        steps = [int(round(f * c.max_steps)) for f in fractions[:-1]]
        steps.append(c.max_steps - sum(steps))
        _require(all(s >= 1 for s in steps),
                 f"max_steps={c.max_steps} is too small for the phase fractions {fractions} (steps {steps})")
    phases, first = [], 0
    for index, (phase, count) in enumerate(zip(raw, steps)):
        phases.append(Phase(index, phase["max_seq_length"], count, first, phase.get("batch_size", c.batch_size)))
        first += count
    return phases


# ----------------------------------------------------------------------------------------------------------------
# Reading files and the command line


def load_config_file(path: str | Path) -> dict[str, Any]:
    """A JSON or YAML mapping of settings."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    text = path.read_text(encoding="utf-8")
    try:
        values = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot parse {path}: {err}") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path} must hold a mapping of settings, got {type(values).__name__}")
    return values


def _union_members(hint: Any) -> set:
    """``int | None`` -> {int, NoneType}; any other hint -> {hint}."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return set(typing.get_args(hint))
    return {hint}


def _convert(name: str, text: str, hint: Any) -> Any:
    """A command-line string as the type of the setting (YAML syntax for lists and mappings)."""
    import yaml

    args = _union_members(hint)
    if text.lower() in ("null", "none") and type(None) in args:
        return None
    if bool in args:
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise ConfigError(f"--{name} takes true or false, got {text!r}")
    for scalar in (int, float):
        if scalar in args:
            try:
                return scalar(text)
            except ValueError:
                if scalar is int and float in args:
                    continue
                raise ConfigError(f"--{name} must be {_type_name(hint)}, got {text!r}") from None
    if str in args and not any(typing.get_origin(a) in (list, dict) for a in args):
        return text
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"--{name}: cannot parse {text!r} as YAML/JSON: {err}") from None


def parse_overrides(argv: list[str]) -> dict[str, Any]:
    """``--key value`` / ``--key=value`` pairs (``-`` and ``_`` both accepted); a boolean flag alone means true.
    A list setting takes several values (``--corpus a.txt b.txt``)."""
    hints = _type_hints()
    values: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--") or token == "--":
            raise ConfigError(f"expected --key value, got {token!r}")
        key, _, inline = token[2:].partition("=")
        name = key.replace("-", "_")
        if name not in hints:
            raise ConfigError(f"unknown setting --{key}; run `hfbert pretrain --help` for the list")
        following = []
        if not inline:
            while i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                following.append(argv[i + 1])
                i += 1
        i += 1
        hint = hints[name]
        is_list = any(typing.get_origin(a) is list for a in _union_members(hint))
        if inline:
            following = [inline]
        if not following:
            if hint is bool:
                values[name] = True
                continue
            raise ConfigError(f"--{key} needs a value")
        if is_list and len(following) > 1 or is_list and not following[0].lstrip().startswith("["):
            if name == "phases":
                raise ConfigError("--phases takes a YAML/JSON list, e.g. '[{max_seq_length: 128, fraction: 1.0}]'")
            values[name] = following
            continue
        if len(following) > 1:
            raise ConfigError(f"--{key} takes one value, got {following}")
        values[name] = _convert(key, following[0], hint)
    return values


def load_config(config_file: str | Path | None = None, overrides: dict[str, Any] | None = None) -> PretrainConfig:
    """Defaults <- config file <- overrides, validated."""
    values = load_config_file(config_file) if config_file is not None else {}
    values.update(overrides or {})
    return PretrainConfig.from_dict(values)


def parse_args(argv: list[str]) -> PretrainConfig:
    """``[--config FILE] [--key value ...]`` -> a validated :class:`PretrainConfig`."""
    argv = list(argv)
    config_file = None
    for flag in ("--config", "-c"):
        if flag in argv:
            index = argv.index(flag)
            if index + 1 >= len(argv):
                raise ConfigError(f"{flag} needs a file name")
            config_file = argv[index + 1]
            del argv[index : index + 2]
    for token in list(argv):
        if token.startswith("--config="):
            config_file = token.split("=", 1)[1]
            argv.remove(token)
    return load_config(config_file, parse_overrides(argv))


def help_text() -> str:
    """Every setting with its type, default and comment (from this module's source)."""
    import inspect

    source = inspect.getsource(PretrainConfig)
    comments = {}
    for line in source.splitlines():
        stripped = line.strip()
        if ":" in stripped and "#" in stripped and not stripped.startswith("#"):
            comments[stripped.split(":", 1)[0]] = stripped.split("#", 1)[1].strip()
    defaults = PretrainConfig()
    lines = ["usage: hfbert pretrain [--config FILE.json|yaml] [--key value ...]", "",
             "Pretrain BERT: corpus -> WordPiece vocabulary -> NSP/MLM examples -> Accelerate training -> "
             "Hub-format folder.", "", "settings (--key value; lists and mappings in YAML/JSON syntax):"]
    for f in dataclasses.fields(PretrainConfig):
        default = json.dumps(getattr(defaults, f.name))
        note = f"  {comments[f.name]}" if f.name in comments else ""
        lines.append(f"  --{f.name} ({_type_name(_type_hints()[f.name])}, default {default}){note}")
    return "\n".join(lines)
