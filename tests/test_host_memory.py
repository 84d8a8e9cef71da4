"""The training process gives large freed blocks back to the system (hfbert.pretrain.host_memory)."""

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from hfbert.pretrain.host_memory import return_large_blocks

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


@pytest.mark.skipif(not GLIBC, reason="the setting is glibc's; other C libraries keep their own policy")
def test_a_large_block_is_mapped_and_unmapped_even_after_a_larger_one_was_freed():
    # During the large block, after it is freed, and with a small block alive (small blocks still use the heap).
    assert _mapped_blocks("set") == [1, 0, 0]
    assert _mapped_blocks("default") == [0, 0, 0]  # glibc's own policy kept it in the heap


def test_it_says_when_it_cannot(monkeypatch):
    monkeypatch.setattr("sys.platform", "darwin")
    assert return_large_blocks() is False
