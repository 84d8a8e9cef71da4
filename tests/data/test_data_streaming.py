"""Streaming mode keeps peak memory flat: a 4x larger corpus must not raise the peak by more than 20%.

Measured in a fresh interpreter (so other tests' allocations do not count) with tracemalloc, which sees every
Python object and numpy buffer the pipeline allocates; ru_maxrss is reported too.  As a control, the same
measurement with a single pool spanning the whole corpus must grow with it, so the probe can see growth at all.
"""

import json
import subprocess
import sys

import pytest

PROBE = r"""
import json, resource, sys, tracemalloc
from pathlib import Path
from datasets.utils.logging import disable_progress_bar
from transformers import BertTokenizerFast
from hfbert.data import build_pretraining_dataset
disable_progress_bar()
austen, model, tmp = sys.argv[1:4]
paragraphs = [line for line in Path(austen).read_text(encoding="utf-8").splitlines()[200:1700] if line.strip()]
tokenizer = BertTokenizerFast.from_pretrained(model)

def corpus(name, n_paragraphs):
    # Documents of 5 paragraphs, one paragraph per line, a blank line between documents.
    chosen = (paragraphs * 8)[:n_paragraphs]
    text = "\n\n".join("\n".join(chosen[i:i + 5]) for i in range(0, len(chosen), 5))
    path = Path(tmp) / name
    path.write_text(text + "\n", encoding="utf-8")
    return path

def peak(path, pool_size=8):
    tracemalloc.reset_peak()
    dataset = build_pretraining_dataset(path, tokenizer, input_layout="paragraphs", masking="dynamic",
                                        pool_size=pool_size, streaming=True)
    rows = sum(1 for _ in dataset)
    return tracemalloc.get_traced_memory()[1], rows, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

tracemalloc.start()
peak(corpus("warm.txt", 80))  # one-time allocations (lazy imports, tokenizer copies) happen here
one, four = corpus("one.txt", 500), corpus("four.txt", 2000)
result = {"stream_1x": peak(one), "stream_4x": peak(four),
          "one_pool_1x": peak(one, 10**6), "one_pool_4x": peak(four, 10**6)}
print(json.dumps(result))
"""


@pytest.mark.slow
def test_streaming_peak_memory_is_flat(shared_data, minilm_path, tmp_path):
    done = subprocess.run([sys.executable, "-c", PROBE, str(shared_data / "en_austen_6novels.txt"), str(minilm_path),
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    (peak_1x, rows_1x, rss_1x), (peak_4x, rows_4x, rss_4x) = result["stream_1x"], result["stream_4x"]
    assert rows_4x > 3.5 * rows_1x > 0  # the 4x corpus really is ~4x the work
    assert peak_4x <= 1.2 * peak_1x, result
    assert rss_4x <= 1.2 * rss_1x, result
    # Control: with one pool holding the whole corpus the same probe does see memory grow with the corpus.
    assert result["one_pool_4x"][0] > 1.5 * result["one_pool_1x"][0], result
