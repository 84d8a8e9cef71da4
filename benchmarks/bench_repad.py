"""What re-padding packed rows for attention costs per training step (the eager and sdpa backends).

Answered in benchmarks/results/bench.md.

    python benchmarks/bench_repad.py BATCH LENGTH HEADS HEAD_SIZE LAYERS

One layer's re-padding is what ``PackedRows.attention`` adds around the attention product: query, key and value
scattered from (R', N, H) packed rows into the padded (B, N, T, H) layout, and the context gathered back, forward
and backward. It is timed against the same autograd work with the attention product replaced by a sum and no
re-padding, on a batch where 80% of the rows are full and the rest have lengths drawn from [T/2, T]; the difference
times LAYERS is the cost per step. The best of three rounds of 20 calls each is reported.
"""

from __future__ import annotations

import argparse
import time

import torch

from hfbert.unpadding_hfbert import PackedRows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("batch", "length", "heads", "head_size", "layers"):
        parser.add_argument(name, type=int)
    args = parser.parse_args(argv)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(args.length // 2, args.length + 1, (args.batch,), generator=g)
    lengths[: args.batch * 4 // 5] = args.length
    rows = PackedRows.from_mask((torch.arange(args.length) < lengths[:, None]).long())
    shape = (len(rows.indices), args.heads, args.head_size)
    query, key, value = (torch.randn(shape, requires_grad=True) for _ in range(3))
    context_grad = torch.randn(shape)

    def repadded():
        padded = [rows.unpack(x).transpose(1, 2) for x in (query, key, value)]  # (B, N, T, H)
        rows.pack(sum(padded).transpose(1, 2)).backward(context_grad)  # the sum stands for attention

    def packed():
        (query + key + value).backward(context_grad)

    best = {}
    for run in (repadded, packed):
        run()
    for _ in range(3):
        for run in (repadded, packed):
            started = time.perf_counter()
            for _ in range(20):
                run()
            best[run] = min(best.get(run, float("inf")), (time.perf_counter() - started) / 20)
    per_layer = best[repadded] - best[packed]
    print(f"batch {args.batch} x {args.length}, {args.heads} heads of {args.head_size}, {shape[0]} packed rows: "
          f"re-padding {per_layer * 1e3:.2f} ms per layer, {per_layer * args.layers * 1e3:.1f} ms per step "
          f"({args.layers} layers)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
