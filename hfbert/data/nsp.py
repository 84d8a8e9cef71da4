"""Next-sentence-prediction pairs from one document: ``create_instances_from_document`` of the original.

A pool of tokenized documents is one flat id array plus per-sentence ``[start, end)`` offsets; because the
sentences of a document are contiguous, every segment A or B is one slice, and truncation only moves slice ends.
The control flow *and the random draws* follow google-research/bert ``create_pretraining_data.py`` (a Python
``random.Random`` per document, as in the original):

* ``max_num_tokens = max_seq_length - 3``; with probability ``short_seq_prob`` the target length is drawn
  from ``[2, max_num_tokens]``, once per document per duplication pass ("short targets" in the report);
* sentences accumulate into a chunk until the target length is reached (or the document ends);
* A = the first ``a_end`` sentences of the chunk, ``a_end`` uniform in ``[1, len(chunk) - 1]``;
* with probability ``random_next_prob`` (the original: 0.5), or always when the chunk is one sentence, B is read
  from a random other document, starting at a random sentence, until ``target - len(A)`` tokens; the chunk's
  unused sentences are put back; otherwise B is the rest of the chunk;
* ``truncate_seq_pair``: while too long, drop a token from the longer side (B on ties), at the front or the
  back by a coin.

One deliberate difference, behind ``distinct_random_document`` (default True): the random document is drawn
uniformly among the *other* documents of the pool, where the original tried 10 times and could end up with the
same document.  With a single document in the pool there is no other one, and B comes from the same document
(the original's behaviour too); the pipeline warns about it.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

__all__ = ["Pool", "create_instances_from_document", "document_rng", "truncate_seq_pair"]


@dataclass
class Pool:
    """Tokenized documents: sentence ``s`` is ``ids[sent_start[s]:sent_end[s]]``; document ``d`` owns sentences
    ``doc_first[d] .. doc_last[d]`` (inclusive).  Only non-empty documents are stored.  The offsets are Python
    lists because the builder does scalar look-ups on them (``bisect`` on a list is much faster than on numpy)."""

    ids: np.ndarray
    sent_start: list[int]
    sent_end: list[int]
    doc_first: list[int]
    doc_last: list[int]

    @property
    def num_documents(self) -> int:
        return len(self.doc_first)


def document_rng(seed: int, dupe: int, document: int, stream: tuple[int, ...] = ()) -> random.Random:
    """The generator of one document in one duplication pass: a function of these numbers only, so the output
    never depends on how documents are spread over processes.  ``stream`` names the document's stream (a
    prepared corpus: its split and shard), so equal document indices of two streams draw different numbers."""
    state = np.random.SeedSequence([seed, *stream, dupe, document]).generate_state(4, dtype=np.uint64)
    return random.Random(int.from_bytes(state.tobytes(), "little"))


def truncate_seq_pair(len_a: int, len_b: int, max_num_tokens: int, rng: random.Random) -> tuple[int, int, int, int]:
    """Tokens to drop from (front of A, back of A, front of B, back of B).

    The original loop (while too long: trim the longer side, B on ties, from the front or the back by a fair
    coin) in closed form, with all coins drawn at once as the bits of one ``getrandbits`` call.

    Args:
        len_a (`int`):
            Tokens in segment A.
        len_b (`int`):
            Tokens in segment B.
        max_num_tokens (`int`):
            The most tokens A and B may hold together.
        rng (`random.Random`):
            The document's generator; one ``getrandbits`` call when anything is dropped, none otherwise.

    Returns:
        `tuple[int, int, int, int]`: tokens to drop from the front of A, the back of A, the front of B and the back
        of B; all 0 when the pair fits.
    """
    steps = len_a + len_b - max_num_tokens
    if steps <= 0:
        return 0, 0, 0, 0
    # The side of every step is known in advance: the longer side is trimmed until it is no longer longer
    # (B wins ties), then the two sides alternate.  One fair coin per step (bit set = from the front).
    coins = rng.getrandbits(steps)
    full = (1 << steps) - 1
    run = min(len_a - len_b if len_a > len_b else len_b - len_a + 1, steps)
    every_other = ((1 << (2 * ((steps - run + 1) // 2))) - 1) // 3 << run & full  # bits run, run + 2, ...
    # After a run on A the alternation starts with B; after a run on B it starts with A.
    a_mask = full ^ every_other if len_a > len_b else every_other
    b_mask = full ^ a_mask
    a_front, b_front = (coins & a_mask).bit_count(), (coins & b_mask).bit_count()
    return a_front, a_mask.bit_count() - a_front, b_front, b_mask.bit_count() - b_front


def create_instances_from_document(
    pool: Pool,
    document: int,
    rng: random.Random,
    *,
    max_seq_length: int,
    short_seq_prob: float,
    distinct_random_document: bool = True,
    random_next_prob: float = 0.5,
) -> tuple[list[tuple[int, int, int, int, bool, int]], bool]:
    """NSP instances of one document, following the original's control flow and random draws (module docstring).

    Args:
        pool (`Pool`):
            The tokenized documents.
        document (`int`):
            The index of the document in ``pool``.
        rng (`random.Random`):
            The document's generator for this duplication pass (:func:`document_rng`).
        max_seq_length (`int`):
            The longest example, [CLS] and both [SEP] included (``max_num_tokens = max_seq_length - 3``).
        short_seq_prob (`float`):
            The probability of drawing a short target length from ``[2, max_num_tokens]``.
        distinct_random_document (`bool`, *optional*, defaults to `True`):
            Draw a random B uniformly among the *other* documents; `False`: the original's 10 tries, which could end
            up with the same document.
        random_next_prob (`float`, *optional*, defaults to 0.5):
            The probability that B is read from a random document (always when the chunk is one sentence).

    Returns:
        `tuple[list[tuple[int, int, int, int, bool, int]], bool]`: the instances as ``(a_start, a_end, b_start,
        b_end, is_random_next, truncated)``: slices of ``pool.ids`` and the number of tokens truncated; and whether
        a short target length was drawn for this pass.
    """
    max_num_tokens = max_seq_length - 3
    target = max_num_tokens
    short = rng.random() < short_seq_prob
    if short:
        target = rng.randint(2, max_num_tokens)
    starts, ends = pool.sent_start, pool.sent_end
    first, last = pool.doc_first[document], pool.doc_last[document]
    instances = []
    i = first
    while i <= last:
        chunk_end = min(bisect_left(ends, starts[i] + target, i, last + 1), last)
        n_chunk = chunk_end - i + 1
        a_end = rng.randint(1, n_chunk - 1) if n_chunk >= 2 else 1
        a0, a1 = starts[i], ends[i + a_end - 1]
        if n_chunk == 1 or rng.random() < random_next_prob:
            b0, b1 = _random_segment(pool, document, target - (a1 - a0), rng, distinct_random_document)
            is_random_next = True
            i += a_end  # the chunk's unused sentences go back to the document
        else:
            b0, b1 = starts[i + a_end], ends[chunk_end]
            is_random_next = False
            i = chunk_end + 1
        af, ab, bf, bb = truncate_seq_pair(a1 - a0, b1 - b0, max_num_tokens, rng)
        instances.append((a0 + af, a1 - ab, b0 + bf, b1 - bb, is_random_next, af + ab + bf + bb))
    return instances, short


def _random_segment(pool: Pool, document: int, target_b: int, rng: random.Random, distinct: bool):
    n_docs = pool.num_documents
    if distinct and n_docs > 1:
        other = rng.randint(0, n_docs - 2)
        other += other >= document
    else:
        for _ in range(10):  # the original: up to 10 tries, then keep whatever was drawn
            other = rng.randint(0, n_docs - 1)
            if other != document:
                break
    first, last = pool.doc_first[other], pool.doc_last[other]
    start = rng.randint(first, last)
    end = min(bisect_left(pool.sent_end, pool.sent_start[start] + target_b, start, last + 1), last)
    return pool.sent_start[start], pool.sent_end[end]
