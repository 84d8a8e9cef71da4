"""The checks every ``hfbert`` setting goes through, and the error a user can fix.

:class:`UsageError` is bad input a user can fix; :func:`check_types` checks a settings dataclass's values against
its annotations; :func:`setting` declares a settings field with its help text and what else the code needs to know
of it.  :mod:`hfbert.arguments` builds the command line on top; this module needs no transformers, so the
processes that build a prepared corpus import it alone.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

import yaml

__all__ = ["UsageError", "check_types", "fits_type", "load_settings_file", "setting", "settings_marked"]


def setting(default: Any = None, help: str = "", *, factory: Any = None, **marks: Any) -> Any:
    """A settings dataclass field: ``help`` is its ``--help`` line, ``factory`` makes a mutable default, and each
    keyword of ``marks`` says something the code derives from the field (``neutral=True``: changing it leaves the
    trajectory unchanged; ``card=True``: the model card shows it; ...), so a new setting is declared in one place."""
    metadata = {"help": help, **marks}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def settings_marked(settings: Any, mark: str) -> tuple[str, ...]:
    """The names of the fields of a settings dataclass (class or instance) that carry ``mark=True``, in order."""
    return tuple(f.name for f in dataclasses.fields(settings) if f.metadata.get(mark))


class UsageError(ValueError):
    """Bad input a user can fix (a setting, a file, a data line); the message names it."""


def load_settings_file(path: str | Path) -> dict[str, Any]:
    """A JSON or YAML mapping of settings."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"config file not found: {path}")
    text = path.read_text(encoding="utf-8")
    try:
        values = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise UsageError(f"cannot parse {path}: {err}") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise UsageError(f"{path} must hold a mapping of settings, got {type(values).__name__}")
    return values


_TYPE_NAMES = {bool: "true or false", int: "an int", float: "a number", str: "a string", list: "a list",
               dict: "a mapping"}


def fits_type(hint: Any, value: Any) -> bool:
    """``value`` is of the (simple) type ``hint``: a scalar, a ``Literal``, ``list[str]``, ``list[dict]``, ``dict``."""
    kind = typing.get_origin(hint) or hint
    if kind is typing.Literal:
        return value in typing.get_args(hint)
    if kind in (int, float) and isinstance(value, bool):
        return False  # bools are ints to Python, never to a user
    if not isinstance(value, (int, float) if kind is float else kind):
        return False
    item = (typing.get_args(hint) or (Any,))[0] if kind is list else Any
    return item is not str or all(isinstance(element, str) for element in value)


def check_types(settings: Any, error: type[Exception] = UsageError) -> None:
    """Check every field of a settings dataclass against its annotation, as the command line would type it (values
    from a file or from Python are not): ``error("batch_size must be an int, got 'many'")``. A float field given an
    int keeps the float, so a dump of the settings is the same whichever way they were written."""
    names = {f.name for f in dataclasses.fields(settings)}
    for name, hint in typing.get_type_hints(type(settings)).items():
        if name not in names:
            continue
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        base = next(a for a in typing.get_args(hint) if a is not type(None)) if union else hint
        value = getattr(settings, name)
        if value is None and union:
            continue
        if not fits_type(base, value):
            if typing.get_origin(base) is typing.Literal:
                kind = "one of " + ", ".join(map(repr, typing.get_args(base)))
            else:
                kind = _TYPE_NAMES[typing.get_origin(base) or base]
            raise error(f"{name} must be {kind}{' (or null)' if union else ''}, got {value!r}")
        if base is float:
            setattr(settings, name, float(value))
