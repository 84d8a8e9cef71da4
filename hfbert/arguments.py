"""One settings system for every ``hfbert`` command: dataclasses read the way transformers' ``HfArgumentParser``
reads them.

A command declares its settings as a dataclass whose fields carry their ``--help`` text in
``field(metadata={"help": ...})`` and whose ``__post_init__`` raises :class:`UsageError` for a bad value. Then

    settings = CommandParser("hfbert prepare", PrepareArguments).parse(argv)

reads ``--key value`` from the command line (``--max_seq_length`` and ``--max-seq-length`` both work, as in
transformers), over a JSON or YAML file given with ``--config FILE`` (the command line wins), over the field
defaults. Mappings and lists of mappings (a model override, a phase schedule) are given as JSON or YAML text.
A field's metadata may also carry ``"aliases"`` (other option names, e.g. ``["--output"]``; each gets its dashed
spelling too) and ``"positional": True`` (an argument without ``--``, e.g. ``hfbert convert SRC DST``).

Errors a user can fix -- a bad value, a missing file, a malformed line -- are one line on stderr,
``hfbert <command>: error: ...``, and exit status 2: :func:`run_command` turns :class:`UsageError` into that.

The options follow ``HfArgumentParser``'s rules (``--x`` / ``--x false`` / ``--no_x`` for a boolean, ``nargs="+"``
for a list, choices for a ``Literal`` or an ``Enum``, ``X | None`` read as ``X``), so a recipe's
``TrainingArguments`` parse as transformers parses them; the rules are written here because this module is what
``hfbert <command> --help`` and a bad setting load, and importing transformers alone takes seconds.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import enum
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from .settings import UsageError, check_types, fits_type, load_settings_file

__all__ = ["CommandParser", "UsageError", "check_types", "fits_type", "load_settings_file", "run_command",
           "settings_from"]


def _structured(hint: Any) -> bool:
    """``dict[...]``, ``list[dict]`` (optionally ``| None``): values argparse cannot split into words."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for arg in args:
        origin = typing.get_origin(arg)
        if origin is dict or arg is dict:
            return True
        if origin is list and typing.get_args(arg) and typing.get_origin(typing.get_args(arg)[0]) is dict:
            return True
    return False


def _nullable_scalar(hint: Any) -> bool:
    """``int | None``, ``float | None``, ``str | None``: a value that may be given as ``null``."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return False
    args = typing.get_args(hint)
    return type(None) in args and all(arg in (int, float, str, type(None)) for arg in args)


def _or_null(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return None if text.lower() in ("null", "none") else convert(text)

    parse.__name__ = getattr(convert, "__name__", "value")  # argparse names the type in its error message
    return parse


def _yaml_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"cannot parse {text!r} as JSON/YAML: {err}") from None


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where the help text does not already speak of it, and never ``None``; a ``%`` in a
    field's help is prose ("5% of the documents"), not an argparse format."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(" not in text:
            text = text.replace("%", "%%")
        if ("default" in text or action.default in (None, argparse.SUPPRESS) or not action.option_strings
                or isinstance(action, argparse._StoreFalseAction) or "%(default)" in text):
            return text
        return text + " (default: %(default)s)"


# What a field's metadata may pass on to ``add_argument``.
_ARGPARSE_KEYS = frozenset({"help", "aliases", "metavar", "choices", "nargs", "const", "required", "type"})
_TRUE, _FALSE = ("yes", "true", "t", "y", "1"), ("no", "false", "f", "n", "0")


def _bool(text: str | bool) -> bool:
    if isinstance(text, bool):
        return text
    if text.lower() in _TRUE + _FALSE:
        return text.lower() in _TRUE
    raise argparse.ArgumentTypeError(f"expected true or false (also yes/no, t/f, y/n, 1/0), got {text!r}")


def _choice(choices: Sequence[Any]) -> Callable[[str], Any]:
    """The choice whose text is ``text`` (a ``Literal[1, 2]`` choice is an int), else ``text`` for argparse to
    refuse naming the choices."""
    by_text = {str(choice): choice for choice in choices}
    return lambda text: by_text.get(text, text)


def _is_bool(hint: Any) -> bool:
    return hint is bool or hint == bool | None


def _default(field: dataclasses.Field, missing: Any = dataclasses.MISSING) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else missing


def _option_kwargs(field: dataclasses.Field, hint: Any) -> dict[str, Any]:
    """``add_argument``'s keywords for a field of type ``hint`` (``HfArgumentParser``'s rules)."""
    kwargs = {key: value for key, value in field.metadata.items() if key in _ARGPARSE_KEYS and key != "aliases"}
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if str not in args and (len(args) != 2 or type(None) not in args):
            raise ValueError(f"field {field.name!r}: a Union may only be X | None (or X | str), got {hint}")
        if type(None) not in args:  # X | str: read as X
            hint = args[0] if args[1] is str else args[1]
        elif bool not in args:  # X | None: read as X (bool | None keeps its None)
            hint = args[0] if args[1] is type(None) else args[1]
    default, origin = _default(field), typing.get_origin(hint)
    if origin is typing.Literal or (isinstance(hint, type) and issubclass(hint, enum.Enum)):
        kwargs["choices"] = list(typing.get_args(hint)) if origin is typing.Literal else [x.value for x in hint]
        kwargs["type"] = _choice(kwargs["choices"])
        if field.default is dataclasses.MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = field.default
    elif _is_bool(hint):
        kwargs["type"] = _bool
        if hint is bool or (field.default is not None and field.default is not dataclasses.MISSING):
            # --x alone means true; --x false / --x no also work
            kwargs.update(default=False if field.default is dataclasses.MISSING else field.default, nargs="?",
                          const=True)
    elif isinstance(origin or hint, type) and issubclass(origin or hint, list):
        kwargs.update(type=typing.get_args(hint)[0], nargs="+")
        if field.default_factory is not dataclasses.MISSING:
            kwargs["default"] = field.default_factory()
        elif field.default is dataclasses.MISSING:
            kwargs["required"] = True
    else:
        kwargs["type"] = hint
        if default is dataclasses.MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = default
    return kwargs


class CommandParser(argparse.ArgumentParser):
    """An ``argparse`` parser of one or more settings dataclasses, with a ``--config FILE`` layer, JSON/YAML values
    for structured fields, and one-line errors (``<prog>: error: <message>``, exit status 2)."""

    def __init__(self, prog: str, dataclass_types, description: str | None = None):
        super().__init__(prog=prog, description=description, formatter_class=_HelpFormatter)
        self.dataclass_types = list(dataclass_types) if isinstance(dataclass_types, Sequence) else [dataclass_types]
        for dtype in self.dataclass_types:
            parser = self.add_argument_group(dtype._argument_group_name) if hasattr(
                dtype, "_argument_group_name") else self
            hints = typing.get_type_hints(dtype)
            for field in dataclasses.fields(dtype):
                if field.init:
                    field = copy.copy(field)  # the dataclass keeps its own Field, annotation and marks
                    field.type = hints[field.name]
                    self._parse_dataclass_field(parser, field)
        self.add_argument("--config", "-c", metavar="FILE", default=None,
                          help="a JSON or YAML file of settings; options given on the command line override it")

    def _parse_dataclass_field(self, parser, field: dataclasses.Field) -> None:
        """Add the option(s) of one field (``field.type`` resolved); a subclass may adjust what this adds."""
        hint = field.type
        if field.metadata.get("positional"):
            _add_positional(parser, field)
            return
        options = [f"--{field.name}"] + ([f"--{field.name.replace('_', '-')}"] if "_" in field.name else [])
        aliases = field.metadata.get("aliases") or []
        aliases = [aliases] if isinstance(aliases, str) else list(aliases)
        options += dict.fromkeys([*aliases, *(a.replace("_", "-") for a in aliases if a.startswith("--"))])
        if _structured(hint):
            parser.add_argument(*options, type=_yaml_value, default=_default(field, None), metavar="JSON",
                                help=field.metadata.get("help"))
            return
        kwargs = _option_kwargs(field, hint)
        action = parser.add_argument(*options, **kwargs)
        if _nullable_scalar(hint):  # `--max_time_minutes null` means None, as `null` does in a JSON/YAML file
            action.type = _or_null(action.type)
        if field.default is True and _is_bool(hint):  # after --x: the first of a destination's options sets it
            parser.add_argument(f"--no_{field.name}", f"--no-{field.name.replace('_', '-')}", action="store_false",
                                dest=field.name, default=False, help=f"the same as --{field.name} false")

    def error(self, message: str):  # argparse's hook: one line, not the usage block
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    def parse(self, argv: Sequence[str] | None = None):
        """Defaults <- ``--config FILE`` <- the command line, validated by the dataclasses' ``__post_init__``.
        Returns one instance, or a tuple when the parser has several dataclasses. A bad value exits with status 2
        and one line naming it."""
        argv = list(sys.argv[1:] if argv is None else argv)
        try:
            return self.parse_values(argv)
        except UsageError as err:
            self.error(str(err))

    def parse_values(self, argv: Sequence[str]):
        """As :meth:`parse`, but raising :class:`UsageError` instead of exiting (for callers and tests)."""
        known = {f.name for dtype in self.dataclass_types for f in dataclasses.fields(dtype) if f.init}
        first, _ = argparse_known(self, argv)
        if first.config is not None:
            # A file may spell a setting as any of its options does: max_seq_length, max-seq-length, an alias.
            names = {option.lstrip("-").replace("-", "_"): action.dest for action in self._actions
                     for option in action.option_strings
                     if action.dest in known and not isinstance(action, argparse._StoreFalseAction)}
            values = {names.get(str(key).replace("-", "_"), key): value
                      for key, value in load_settings_file(first.config).items()}
            unknown = sorted(set(values) - known)
            if unknown:
                raise UsageError(f"{first.config}: unknown setting(s) {unknown}; run `{self.prog} --help` for the list")
            hints = {name: hint for dtype in self.dataclass_types for name, hint in typing.get_type_hints(dtype).items()}
            values = {key: _file_value(first.config, key, value, hints.get(key)) for key, value in values.items()}
            self.set_defaults(**values)
            for action in self._actions:  # what the file gives, the command line need not repeat
                if action.dest in values and action.required:
                    action.required = False
                    if not action.option_strings:
                        action.nargs = "?"
        namespace = self.parse_args(list(argv))
        instances = []
        for dtype in self.dataclass_types:
            names = {f.name for f in dataclasses.fields(dtype) if f.init}
            try:
                instances.append(dtype(**{k: v for k, v in vars(namespace).items() if k in names}))
            except UsageError:
                raise
            except (TypeError, ValueError) as err:
                raise UsageError(str(err)) from None
        return instances[0] if len(instances) == 1 else tuple(instances)


_KINDS = {int: ("an integer", "integers"), float: ("a number", "numbers"), str: ("a string", "strings"),
          bool: ("true or false", "true/false values")}


def _file_value(path: str, key: str, value: Any, hint: Any) -> Any:
    """A setting read from a file, checked against the field's type (scalars and lists of scalars): the command
    line's own conversion never sees it, and a string where a number belongs would otherwise fail deep inside the
    job. A float written the way YAML reads as a string (``5e-5``) is converted."""
    if value is None or hint is None:
        return value  # None: the dataclass decides whether the setting may be unset
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    args = tuple(arg for arg in args if arg is not type(None))
    if len(args) != 1:
        return value
    hint = args[0]
    if typing.get_origin(hint) is list and typing.get_args(hint) and typing.get_args(hint)[0] in _KINDS:
        item = typing.get_args(hint)[0]
        try:  # one value where a list belongs is a list of one, as on the command line
            return [_file_value(path, key, v, item) for v in (value if isinstance(value, list) else [value])]
        except UsageError:
            raise UsageError(f"{path}: {key} must be a list of {_KINDS[item][1]}, got {value!r}") from None
    if hint not in _KINDS:
        return value
    if hint is float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    if hint is bool or isinstance(value, bool):
        ok = isinstance(value, bool) and hint is bool
    else:
        ok = isinstance(value, (int, float)) if hint is float else isinstance(value, hint)
    if not ok:
        raise UsageError(f"{path}: {key} must be {_KINDS[hint][0]}, got {value!r}")
    return value


def settings_from(dataclass_types: Sequence[type], values: Mapping[str, Any], source: str = "settings") -> tuple:
    """Instances of ``dataclass_types`` built from a mapping of settings, as :meth:`CommandParser.parse_values` builds
    them from a ``--config`` file, for callers that hold the values already (no command line).

    Args:
        dataclass_types: the settings dataclasses; a key goes to every one that has the field (its dashed spelling
            and its aliases work too).
        values: setting name -> value, checked against the field's type (a float written as YAML reads it as a
            string, ``5e-5``, is converted).
        source: what the values are, for the error message.

    Returns:
        One instance per dataclass, in order.

    Raises:
        UsageError: a key no dataclass has, a value of the wrong type, or one that a ``__post_init__`` refuses.
    """
    fields = {dtype: {f.name: f for f in dataclasses.fields(dtype) if f.init} for dtype in dataclass_types}
    spelled = {}
    for named in fields.values():
        for name, f in named.items():
            for alias in [name, *f.metadata.get("aliases", ())]:
                spelled[alias.lstrip("-").replace("-", "_")] = name
    given = {spelled.get(str(key).replace("-", "_"), key): value for key, value in values.items()}
    unknown = sorted(set(given) - set(spelled.values()))
    if unknown:
        raise UsageError(f"{source}: unknown setting(s) {unknown}")
    instances = []
    for dtype, named in fields.items():
        hints = typing.get_type_hints(dtype)
        kwargs = {key: _typed(source, key, value, hints.get(key)) for key, value in given.items() if key in named}
        try:
            instances.append(dtype(**kwargs))
        except UsageError:
            raise
        except (TypeError, ValueError) as err:
            raise UsageError(f"{source}: {err}") from None
    return tuple(instances)


def _typed(source: str, key: str, value: Any, hint: Any) -> Any:
    """:func:`_file_value`, and an int given for a float field made a float, as the command line reads it."""
    value = _file_value(source, key, value, hint)
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if float in args and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _add_positional(parser, field) -> None:
    """An argument without ``--`` (``metadata={"positional": True}``); optional when the field has a default."""
    hint = field.type
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    kwargs: dict[str, Any] = {"type": hint, "help": field.metadata.get("help"),
                              "metavar": field.metadata.get("metavar", field.name.upper())}
    if field.default is not dataclasses.MISSING:
        kwargs.update(nargs="?", default=field.default)
    parser.add_argument(field.name, **kwargs)


def argparse_known(parser: CommandParser, argv: Sequence[str]):
    """Only ``--config``, read before the rest so that the file's values become defaults."""
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--config", "-c", default=None)
    return probe.parse_known_args(list(argv))


def run_command(prog: str, body: Callable[[], int | None], errors: tuple[type[BaseException], ...] = ()) -> int:
    """Run a command's body; :class:`UsageError` (and ``errors``) become ``<prog>: error: <message>``, status 2."""
    try:
        return int(body() or 0)
    except (UsageError, *errors) as err:
        message = str(err).strip().splitlines() or [type(err).__name__]
        print(f"{prog}: error: {' '.join(line.strip() for line in message)}", file=sys.stderr)
        return 2
