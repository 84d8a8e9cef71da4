"""The training process's host memory: blocks larger than a training step's go back to the system when freed.

glibc's ``malloc`` serves a block below its mmap threshold from its heap, and a freed heap block stays in the
process unless it lies at the heap's top. The threshold starts at 128 KiB, but glibc raises it to the size of each
mapped block that is freed, up to 32 MiB. In a CPU run the held-out evaluation's batches (``--eval_batch_size``, 64
rows, against the 16 rows of a length-128 training batch) allocate blocks of 4-40 MiB; under a raised threshold
they come from the heap, a small block allocated meanwhile pins the heap's top above them, and the gaps they leave
stay resident: the process's anonymous memory climbs by a step at each evaluation while the memory in use does not.
:func:`return_large_blocks` fixes the threshold at :data:`LARGE_BLOCK`, above the blocks of a small model's training
step (which keep coming from the heap, without a page fault each step) and below an evaluation's, which are then
mapped when allocated and unmapped when freed. Measured in docs/pretraining.md (Memory).

The setting holds for the whole process, for good: glibc has no call that reads the threshold back, and once it is
set, none that brings back glibc's own rising threshold. So ``hfbert pretrain``, which owns its process, sets it
before the job; :func:`~hfbert.pretrain.pretrain` leaves the allocator of its caller's process alone.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["LARGE_BLOCK", "return_large_blocks"]

#: Blocks of this many bytes or more are mapped, and unmapped when freed.
LARGE_BLOCK = 16 << 20
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def return_large_blocks(threshold: int = LARGE_BLOCK) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for the rest of this process (it cannot be undone, see the
    module docstring); False where the C library is not glibc (another allocator keeps its own policy)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # only glibc has it: musl's mallopt does nothing
        return libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(threshold)) == 1
    except (OSError, AttributeError):
        return False
