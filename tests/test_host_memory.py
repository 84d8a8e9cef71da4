"""The training process gives large freed blocks back to the system (hfbert.pretrain.host_memory)."""

import ctypes
import platform

import pytest
import torch

from hfbert.pretrain.host_memory import LARGE_BLOCK, return_large_blocks

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mapped_blocks() -> int:
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    return libc.mallinfo2().hblks


@pytest.mark.skipif(not GLIBC, reason="the setting is glibc's; other C libraries keep their own policy")
def test_a_large_block_is_mapped_and_unmapped_even_after_a_larger_one_was_freed():
    assert return_large_blocks()
    # Left to itself, glibc would now raise its threshold to 24 MiB and serve the next blocks from the heap.
    torch.empty(24 << 20, dtype=torch.uint8).fill_(1)
    before = _mapped_blocks()
    block = torch.empty(LARGE_BLOCK + (1 << 20), dtype=torch.uint8).fill_(1)
    assert _mapped_blocks() == before + 1
    del block
    assert _mapped_blocks() == before
    small = torch.empty(LARGE_BLOCK // 4, dtype=torch.uint8)  # small blocks still come from the heap
    assert _mapped_blocks() == before
    del small


def test_it_says_when_it_cannot(monkeypatch):
    monkeypatch.setattr("sys.platform", "darwin")
    assert return_large_blocks() is False
