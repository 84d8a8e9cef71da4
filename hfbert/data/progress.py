"""Progress that reads well where it is written: a bar redrawn in place on a terminal, plain lines elsewhere.

A tqdm bar written to a file or a pipe is one line of carriage returns, one redraw per update: a long job's log
grows by thousands of redraws that a pager shows as one line. Where the stream is not a terminal, :class:`Progress`
writes a plain line now and then instead (transformers' ``Trainer`` does the same with its ``logging_steps``), unless
the caller asks for the bar explicitly (``show=True``).
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["Progress", "on_terminal"]


def on_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: stderr, where bars go) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class Progress:
    """The progress of ``total`` units of work (None: unknown), from ``initial``.

    ``show``: True draws a tqdm bar wherever the stream is, False shows nothing, None (the default) a bar on a
    terminal and plain lines elsewhere: one for each :meth:`note`, and with ``every`` one each ``every`` units and
    at the end. ``bar``: the tqdm class to draw with (datasets' follows its verbosity settings)."""

    def __init__(self, desc: str, total: int | None = None, *, initial: int = 0, unit: str = "it",
                 show: bool | None = None, every: int | None = None, stream: TextIO | None = None, bar=None,
                 **bar_options: Any):
        self.desc, self.total, self.count, self.unit, self.every = desc, total, initial, unit, every
        self.stream = sys.stderr if stream is None else stream
        self.plain = show is None and not on_terminal(self.stream)
        self.started = time.monotonic()
        self.bar = None
        if show or (show is None and not self.plain):
            if bar is None:
                from tqdm.auto import tqdm as bar
            self.bar = bar(total=total, initial=initial, desc=desc, unit=unit, file=self.stream, **bar_options)

    def update(self, n: int = 1) -> None:
        before, self.count = self.count, self.count + n
        if self.bar is not None:
            self.bar.update(n)
        elif self.plain and self.every and (self.count // self.every > before // self.every
                                            or self.count == self.total):
            self._line()

    def note(self, **values: Any) -> None:
        """The latest figures (``loss=...``): beside the bar, or a plain line of their own."""
        if self.bar is not None:
            self.bar.set_postfix(**values)
        elif self.plain:
            self._line(values)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _line(self, values: dict[str, Any] | None = None) -> None:
        done = (f"{self.count:,}" if self.total is None else f"{self.count:,}/{self.total:,}") + self.unit
        if self.total:
            done += f" ({self.count / self.total:.0%})"
        seconds = int(time.monotonic() - self.started)
        parts = [f"{self.desc}: {done}", *(f"{k} {v}" for k, v in (values or {}).items()),
                 f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d} elapsed"]
        print(", ".join(parts), file=self.stream, flush=True)
