"""The training process gives large freed blocks back to the system (hfbert.pretrain.host_memory): ``hfbert
pretrain`` sets that for its process, ``pretrain()`` leaves its caller's allocator alone."""

import ctypes
import os
import platform
import subprocess
import sys
import textwrap

import pytest

import hfbert.pretrain.loop
from hfbert.pretrain import PretrainConfig, pretrain
from hfbert.pretrain.command import main
from hfbert.pretrain.host_memory import _M_MMAP_THRESHOLD, LARGE_BLOCK, return_large_blocks
from hfbert.pretrain.loop import PretrainResult

from helpers.pretraining import settings

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# Run in a fresh process: glibc serves a request from a free gap of its heap before it asks the system for memory,
# so in a process whose heap already has large gaps (this one, after other tests) no block needs mapping.
PROBE = textwrap.dedent("""
    import ctypes, sys
    import torch
    from hfbert.pretrain.host_memory import LARGE_BLOCK, return_large_blocks

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    mapped = lambda: libc.mallinfo2().hblks
    if sys.argv[1] == "set":
        assert return_large_blocks()
    # Left to itself, glibc now raises its threshold to 24 MiB and serves the next blocks from the heap.
    torch.empty(24 << 20, dtype=torch.uint8).fill_(1)
    before = mapped()
    block = torch.empty(LARGE_BLOCK + (1 << 20), dtype=torch.uint8).fill_(1)
    during = mapped() - before
    del block
    after = mapped() - before
    small = torch.empty(LARGE_BLOCK // 4, dtype=torch.uint8)
    print(during, after, mapped() - before)
""")


def _mapped_blocks(mode: str) -> list[int]:
    # glibc's own policy, whatever this process was given: a MALLOC_*_ variable (Dask sets MALLOC_TRIM_THRESHOLD_
    # when it is imported) or a tunable fixes the threshold too.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    run = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    return [int(n) for n in run.stdout.split()]


@pytest.mark.slow
@pytest.mark.skipif(not GLIBC, reason="the setting is glibc's; other C libraries keep their own policy")
def test_a_large_block_is_mapped_and_unmapped_even_after_a_larger_one_was_freed():
    # During the large block, after it is freed, and with a small block alive (small blocks still use the heap).
    assert _mapped_blocks("set") == [1, 0, 0]
    assert _mapped_blocks("default") == [0, 0, 0]  # glibc's own policy kept it in the heap


def test_it_says_when_it_cannot(monkeypatch):
    monkeypatch.setattr("sys.platform", "darwin")
    assert return_large_blocks() is False


class MalloptCalls(list):
    """The C library's ``mallopt`` calls made through ctypes, recorded and not made."""

    def __init__(self, monkeypatch):
        super().__init__()
        load = ctypes.CDLL
        monkeypatch.setattr(ctypes, "CDLL", lambda name, *args, **kwargs: (
            self._Libc(load(name, *args, **kwargs), self) if name is None else load(name, *args, **kwargs)))

    class _Libc:
        def __init__(self, libc, calls):
            self._libc, self._calls = libc, calls

        def __getattr__(self, name):
            if name == "mallopt":
                return lambda parameter, value: self._calls.append((parameter, value.value)) or 1
            return getattr(self._libc, name)


@pytest.mark.slow
def test_pretrain_leaves_the_allocator_of_its_process_alone(prepared, tmp_path, monkeypatch):
    calls = MalloptCalls(monkeypatch)
    pretrain(PretrainConfig.from_dict(settings([prepared[64]], tmp_path / "out", max_steps=2, eval_steps=2,
                                               save_steps=2, max_eval_examples=8)))
    assert calls == []


@pytest.mark.skipif(not GLIBC, reason="the setting is glibc's; other C libraries keep their own policy")
def test_the_command_sets_it_for_its_process(tmp_path, monkeypatch):
    calls = MalloptCalls(monkeypatch)
    ran = []

    def job(config):
        ran.append(list(calls))  # what was set before the job
        return PretrainResult(tmp_path, {})

    monkeypatch.setattr(hfbert.pretrain.loop, "pretrain", job)
    assert main(["--output_dir", str(tmp_path / "out")]) == 0
    assert ran == [[(_M_MMAP_THRESHOLD, LARGE_BLOCK)]]
