"""`python benchmarks/make_long_documents.py`: reviews labelled by the sign of their sentences' mean valence, built
from sentences split before grouping, so no held-out sentence is in a training review."""

import json
import random

import pytest

import make_long_documents


def _sentences(path, n):
    rng = random.Random(1)
    rows = [{"sentence": f"sentence {i} .", "valence": round(rng.uniform(-3, 3), 2)} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {r["sentence"]: r["valence"] for r in rows}


def test_reviews_are_labelled_by_their_mean_valence_and_held_out_sentences_stay_out(tmp_path):
    valence = _sentences(tmp_path / "s.jsonl", 400)
    make_long_documents.main(["--sentences", str(tmp_path / "s.jsonl"), "--output_dir", str(tmp_path / "out"),
                              "--per_review", "4", "--held_out_reviews", "10", "--margin", "0.2"])
    seen = {}
    for split in ("train", "validation", "test"):
        for review in map(json.loads, (tmp_path / "out" / f"{split}.jsonl").read_text().splitlines()):
            parts = [f"sentence {w} ." for w in review["text"].replace(".", "").split() if w.isdigit()]
            assert len(parts) == 4
            mean = sum(valence[p] for p in parts) / 4
            assert review["valence"] == pytest.approx(mean, abs=1e-4) and abs(mean) > 0.2
            assert review["label"] == ("pos" if mean > 0 else "neg")
            for p in parts:
                assert seen.setdefault(p, split) == split  # a sentence belongs to one split
    assert len(seen) > 300


def test_too_few_sentences_are_refused(tmp_path):
    _sentences(tmp_path / "s.jsonl", 30)
    with pytest.raises(SystemExit, match="30 sentences cannot make 10 validation and test reviews of 8"):
        make_long_documents.main(["--sentences", str(tmp_path / "s.jsonl"), "--output_dir", str(tmp_path / "o"),
                                  "--held_out_reviews", "10"])
