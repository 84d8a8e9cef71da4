"""Start-up of ``hfbert pretrain --help``: hfbert's own parser (hfbert.arguments) against transformers'
``HfArgumentParser`` reading the same settings.

Answered in docs/ecosystem.md (the settings parser).

    python benchmarks/ecosystem_argparse.py [--repeats 5]

Each case is a fresh process, timed from its start to its end (the help printed to a pipe); the cases take turns,
``--repeats`` times, and the median of each is printed with the modules the case loaded and whether torch was among
them. ``HfArgumentParser`` is given hfbert's pretraining settings (``PretrainConfig``) with only their help kept in
the metadata: it passes every metadata entry to argparse, which refuses hfbert's others (aliases, positional, ...).
The ``python -c`` cases run with ``HFBERT_LAZY_IMPORT=1``: the package imported as the ``hfbert`` command imports
it, without registering the Auto classes (which loads torch).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HFBERT = str(Path(sys.executable).with_name("hfbert"))
REPORT = "import sys; print(len(sys.modules), 'torch' in sys.modules, file=sys.stderr)"
HF_ARGUMENT_PARSER = f"""
import dataclasses, sys, typing
from transformers import HfArgumentParser
from hfbert.pretrain.config import PretrainConfig
hints = typing.get_type_hints(PretrainConfig)
fields = []
for f in dataclasses.fields(PretrainConfig):
    kept = {{"metadata": {{"help": f.metadata.get("help", "").replace("%", "%%")}}}}
    if f.default is not dataclasses.MISSING:
        kept["default"] = f.default
    elif f.default_factory is not dataclasses.MISSING:
        kept["default_factory"] = f.default_factory
    fields.append((f.name, hints[f.name], dataclasses.field(**kept)))
parser = HfArgumentParser(dataclasses.make_dataclass("PretrainConfig", fields), prog="hfbert pretrain")
print(parser.format_help())
{REPORT}
"""
OURS = f"""
import sys
from hfbert.cli import main
try:
    main(["pretrain", "--help"])
except SystemExit:
    pass
{REPORT}
"""
# The hfbert command imports the package without registering the Auto classes (which loads torch); a python -c
# process does so with this variable, as the command's own process would.
ENV = {**os.environ, "HFBERT_LAZY_IMPORT": "1"}
CASES = {
    "python -c pass": [sys.executable, "-c", REPORT],
    "hfbert pretrain --help (console script, hfbert.arguments)": [HFBERT, "pretrain", "--help"],
    "hfbert.arguments, in python -c (modules counted)": [sys.executable, "-c", OURS],
    "HfArgumentParser(PretrainConfig), help printed": [sys.executable, "-c", HF_ARGUMENT_PARSER],
    "import transformers.hf_argparser": [sys.executable, "-c", f"import transformers.hf_argparser\n{REPORT}"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {name: [] for name in CASES}
    loaded: dict[str, str] = {}
    for _ in range(args.repeats):
        for name, command in CASES.items():
            began = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, check=True, env=ENV)
            seconds[name].append(time.perf_counter() - began)
            loaded[name] = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    print(json.dumps({name: {"median_seconds": round(statistics.median(times), 3),
                             "seconds": [round(t, 3) for t in times], "modules_and_torch": loaded[name]}
                      for name, times in seconds.items()}, indent=1))


if __name__ == "__main__":
    main()
