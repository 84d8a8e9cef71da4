"""Sentence vectors from token vectors: the [CLS] vector or a mean over valid, non-special tokens.

Mean pooling and [CLS] pooling are different read-out functions and should be
compared on the task, not assumed equivalent; a mean over "plain text" must exclude the control tokens
([CLS], [SEP]) and padding and divide by the number of tokens actually averaged. Neither gives a good
similarity space without training for it (all-MiniLM-L6-v2 was trained contrastively with mean pooling).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

POOLING_STRATEGIES = ("cls", "mean")


def special_tokens_mask(input_ids: torch.Tensor, special_ids: Sequence[int]) -> torch.Tensor:
    """(B, T) bool: True at [CLS]/[SEP]/[PAD]/... positions."""
    return torch.isin(input_ids, torch.as_tensor(list(special_ids), device=input_ids.device))


def pool(
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor,
    strategy: str = "cls",
    special_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, T, D) token vectors -> (B, D) sentence vectors.

    ``cls``: the vector at position 0 (the raw [CLS] state, not the tanh pooler). ``mean``: average over
    positions with ``attention_mask == 1`` and, if ``special_mask`` is given, not special. A row with
    nothing left to average raises ValueError instead of returning a silent zero/NaN vector.
    """
    if strategy not in POOLING_STRATEGIES:
        raise ValueError(f"pooling strategy must be one of {POOLING_STRATEGIES}, got {strategy!r}")
    if hidden_states.dim() != 3 or attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError(
            f"expected hidden states (B, T, D) and a (B, T) mask, got {tuple(hidden_states.shape)} "
            f"and {tuple(attention_mask.shape)}"
        )
    if strategy == "cls":
        return hidden_states[:, 0]
    keep = attention_mask.bool()
    if special_mask is not None:
        keep = keep & ~special_mask.bool()
    counts = keep.sum(dim=1)  # (B,)
    if (counts == 0).any():
        rows = torch.nonzero(counts == 0).flatten().tolist()
        raise ValueError(f"rows {rows} have no valid non-special token to average")
    summed = (hidden_states * keep.unsqueeze(-1).to(hidden_states.dtype)).sum(dim=1)  # (B, D)
    return summed / counts.unsqueeze(-1).to(hidden_states.dtype)


@torch.no_grad()
def encode_sentences(
    model, tokenizer, sentences: Sequence[str], strategy: str = "mean", batch_size: int = 32,
    max_length: int = 512,
) -> torch.Tensor:
    """(N, D) pooled vectors of ``sentences`` from a base model (``model(...).last_hidden_state``).

    Texts longer than ``max_length`` tokens raise ValueError: a sentence vector of a silently cut text
    would look valid but describe a different text.
    """
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings, not one string")
    model.eval()
    special_ids = tokenizer.all_special_ids
    out = []
    for i in range(0, len(sentences), batch_size):
        batch = list(sentences[i:i + batch_size])
        lengths = [len(ids) for ids in tokenizer(batch)["input_ids"]]
        too_long = [i + k for k, n in enumerate(lengths) if n > max_length]
        if too_long:
            raise ValueError(f"sentences {too_long[:5]} are longer than max_length={max_length} tokens")
        enc = tokenizer(batch, padding=True, return_tensors="pt").to(model.device)
        hidden = model(**enc).last_hidden_state
        out.append(pool(hidden, enc["attention_mask"], strategy, special_tokens_mask(enc["input_ids"], special_ids)))
    return torch.cat(out) if out else torch.empty(0)
