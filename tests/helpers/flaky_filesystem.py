"""``flaky://``: an in-memory fsspec filesystem whose shard reads misbehave as a test tells them to (importing this
module registers it, in this process or in a subprocess that imports it)."""

import threading
import time

import fsspec
from fsspec.implementations.memory import MemoryFileSystem


class FlakyFileSystem(MemoryFileSystem):
    """An in-memory filesystem whose ranged reads of shards misbehave as told: ``mode`` "hang" (no answer for
    ``hang_seconds``), "raise" (OSError) or "short" (one byte fewer than asked), ``failures`` times (None: always).
    Counts the reads of shards it served, and their bytes."""

    protocol = "flaky"
    mode: str | None = None
    failures: int | None = None
    hang_seconds = 30.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.released = threading.Event()  # ends the waits of "hang"
        self._counting = threading.Lock()
        self.reset()

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(path[len("flaky://"):] if path.startswith("flaky://") else path)

    def reset(self, mode=None, failures=None):
        self.mode, self.failures, self.failed, self.reads, self.bytes_read = mode, failures, 0, 0, 0
        self.in_flight = self.most_in_flight = 0
        self.released.clear()

    def cat_file(self, path, start=None, end=None, **kwargs):
        if self.mode == "slow" and path.endswith(".parquet"):  # every read takes a while: overlaps show
            with self._counting:
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
            time.sleep(0.2)
            with self._counting:
                self.in_flight -= 1
        data = super().cat_file(path, start=start, end=end, **kwargs)
        misbehaves = self.mode not in (None, "slow") and path.endswith(".parquet") and (self.failures is None or
                                                                  self.failed < self.failures)
        if misbehaves:
            self.failed += 1
            if self.mode == "hang":
                self.released.wait(self.hang_seconds)
            elif self.mode == "raise":
                raise OSError("connection reset by peer")
            elif self.mode == "short":
                return data[:-1]
        if path.endswith(".parquet"):
            self.reads += 1
            self.bytes_read += len(data)
        return data


fsspec.register_implementation("flaky", FlakyFileSystem, clobber=True)
