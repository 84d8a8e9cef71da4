"""``hfbert prepare``: build pretraining examples from text files into an Arrow dataset plus its health report.

    hfbert prepare --input corpus.txt --tokenizer DIR --output DIR --max-seq-length 128 --dupe-factor 10 \
        --masking static --num-proc 2 [--whole-word-mask] [--seed 12345]

The dataset is written with ``Dataset.save_to_disk`` (load it with ``datasets.load_from_disk``); ``report.json``
and ``report.txt`` are written into the same directory.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from .documents import CHAPTER_HEADING, read_people_daily
from .pipeline import DEFAULT_POOL_SIZE

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hfbert prepare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", nargs="+", required=True, help="text file(s)")
    parser.add_argument("--tokenizer", required=True, help="directory of a fast BERT tokenizer (from_pretrained)")
    parser.add_argument("--output", required=True, help="directory for the Arrow dataset and the report")
    parser.add_argument("--layout", choices=("sentences", "paragraphs", "people-daily"), default="sentences",
                        help="sentences: one sentence per line, blank line between documents (the original); "
                             "paragraphs: one paragraph per line; people-daily: segmented, POS-tagged Chinese")
    parser.add_argument("--boundary", default=None,
                        help="regex for heading lines that start a document; 'chapter' = CHAPTER I / Chapter 9")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--short-seq-prob", type=float, default=0.1)
    parser.add_argument("--dupe-factor", type=int, default=None,
                        help="passes over the corpus (default: 10 for static masking, 1 for dynamic)")
    parser.add_argument("--masking", choices=("static", "dynamic"), default="static")
    parser.add_argument("--masked-lm-prob", type=float, default=0.15)
    parser.add_argument("--max-predictions-per-seq", type=int, default=20)
    parser.add_argument("--selection", choices=("fixed", "bernoulli"), default="fixed")
    parser.add_argument("--whole-word-mask", action="store_true")
    parser.add_argument("--segmenter", choices=("none", "presegmented", "jieba"), default="none",
                        help="Chinese word segmenter for whole-word masking (people-daily implies presegmented)")
    parser.add_argument("--random-token-ids", choices=("non_special", "any"), default="non_special")
    parser.add_argument("--pool-size", type=int, default=DEFAULT_POOL_SIZE, help="documents per random-next pool")
    parser.add_argument("--num-proc", type=int, default=1)
    parser.add_argument("--seed", type=int, default=12345)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from transformers import AutoTokenizer

    from .pipeline import build_pretraining_dataset
    from .report import render_report, write_report
    from .segmenters import JiebaSegmenter, PreSegmented

    tokenizer_dir = Path(args.tokenizer)
    if not tokenizer_dir.is_dir():
        raise FileNotFoundError(f"tokenizer directory not found: {tokenizer_dir}")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    segmenter_name = "presegmented" if args.layout == "people-daily" and args.segmenter == "none" else args.segmenter
    segmenter = {"none": None, "presegmented": PreSegmented(), "jieba": JiebaSegmenter()}[segmenter_name]
    if args.layout == "people-daily":
        source = [doc for path in args.input for doc in read_people_daily(path)]
        layout = "sentences"
    else:
        source, layout = args.input, args.layout
    boundary = CHAPTER_HEADING if args.boundary == "chapter" else args.boundary
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset, report = build_pretraining_dataset(
            source, tokenizer, max_seq_length=args.max_seq_length, short_seq_prob=args.short_seq_prob,
            dupe_factor=args.dupe_factor, masking=args.masking, masked_lm_prob=args.masked_lm_prob,
            max_predictions_per_seq=args.max_predictions_per_seq, selection=args.selection,
            whole_word_mask=args.whole_word_mask, word_segmenter=segmenter if args.whole_word_mask else None,
            random_token_ids=args.random_token_ids, pool_size=args.pool_size, num_proc=args.num_proc,
            seed=args.seed, input_layout=layout, document_boundary=boundary, return_report=True)
    report["warnings"] = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    output = Path(args.output)
    dataset.save_to_disk(str(output))
    write_report(report, output)
    print(render_report(report), end="")
    for message in report["warnings"]:
        print(f"warning: {message}")
    print(f"wrote {len(dataset)} examples to {output}")
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
