"""How fast the ``hfbert`` command starts: ``hfbert --help`` against huggingface_hub's ``hf --help``, each
``hfbert <command> --help``, and ``hfbert push`` to a Hub that never answers.

Answered in benchmarks/results/cli_start_2026-12-03.md.

Usage: python benchmarks/bench_cli.py [--repeats 7] [--hub_timeout 10] [--markdown FILE]

Every figure is the wall time of a whole process, from its start to its exit, with its peak resident memory.
``hfbert --help`` and ``hf --help`` run alternately (the median of --repeats runs each, and their ratio), so that a
machine whose load changes treats both alike. The push uploads a one-file folder to an endpoint on this machine that
accepts connections and never answers (``HF_ENDPOINT``), so it ends at its ``--hub_timeout``; what is timed is how
long after the process started it ends. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def timed(command: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> tuple[float, float, int, str]:
    """(seconds from start to exit, peak resident MB, exit status, stderr) of one process."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd,
                               text=True)
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return seconds, usage.ru_maxrss / 1024, process.returncode, stderr


class SilentEndpoint:
    """An HTTP endpoint on 127.0.0.1 that accepts every connection and never answers."""

    def __init__(self):
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._held: list[socket.socket] = []
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            self._held.append(connection)

    def close(self) -> None:
        self._socket.close()
        for connection in self._held:
            connection.close()


def machine() -> list[str]:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return [f"- date: {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
            f"- machine: {os.cpu_count()} logical CPUs, {platform.processor() or platform.machine()}, "
            f"Python {platform.python_version()}",
            f"- load average (1, 5, 15 min) at the start: {load}"]


def commands(hfbert: str) -> list[str]:
    """The subcommands ``hfbert --help`` lists (this script imports nothing of hfbert: that would load torch)."""
    shown = subprocess.run([hfbert, "--help"], capture_output=True, text=True, check=True).stdout
    listed = shown.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="runs of each command; the median counts")
    parser.add_argument("--hub_timeout", type=float, default=10.0,
                        help="--hub_timeout of the push to the silent endpoint")
    parser.add_argument("--markdown", help="also write the tables to this file")
    args = parser.parse_args()
    hfbert, hf = shutil.which("hfbert"), shutil.which("hf")
    if hfbert is None or hf is None:
        sys.exit("needs the hfbert and hf commands on PATH (pip install -e . installs both)")
    lines = ["# `hfbert` start-up", "", *machine(), ""]

    runs: dict[str, list[tuple[float, float]]] = {"hfbert --help": [], "hf --help": []}
    for _ in range(args.repeats):  # alternately, so that a change of load falls on both
        for name, command in (("hfbert --help", [hfbert, "--help"]), ("hf --help", [hf, "--help"])):
            seconds, megabytes, status, stderr = timed(command)
            if status != 0:
                sys.exit(f"{name} failed ({status}): {stderr[-500:]}")
            runs[name].append((seconds, megabytes))
    median = {name: statistics.median(s for s, _ in rows) for name, rows in runs.items()}
    lines += [f"`hfbert --help` against `hf --help`, {args.repeats} runs each, alternately:", "",
              "| command | median s | min s | max s | peak RSS MB |", "|---|---:|---:|---:|---:|"]
    for name, rows in runs.items():
        seconds = [s for s, _ in rows]
        lines.append(f"| `{name}` | {median[name]:.2f} | {min(seconds):.2f} | {max(seconds):.2f} | "
                     f"{max(m for _, m in rows):.0f} |")
    lines += ["", f"Ratio of the medians, hfbert / hf: **{median['hfbert --help'] / median['hf --help']:.2f}**", ""]

    lines += [f"Each command's help, median of {args.repeats} runs:", "",
              "| command | median s | peak RSS MB |", "|---|---:|---:|"]
    for name in commands(hfbert):
        rows = []
        for _ in range(args.repeats):
            seconds, megabytes, status, stderr = timed([hfbert, name, "--help"])
            if status != 0:
                sys.exit(f"hfbert {name} --help failed ({status}): {stderr[-500:]}")
            rows.append((seconds, megabytes))
        lines.append(f"| `hfbert {name} --help` | {statistics.median(s for s, _ in rows):.2f} | "
                     f"{max(m for _, m in rows):.0f} |")

    endpoint = SilentEndpoint()
    try:
        with tempfile.TemporaryDirectory(prefix="hfbert-bench-cli-") as scratch:
            (Path(scratch) / "OUT").mkdir()
            (Path(scratch) / "OUT" / "config.json").write_text('{"model_type": "hfbert"}\n')
            env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
            env.update(HF_ENDPOINT=endpoint.url, HF_TOKEN="hf_benchmark")
            command = [hfbert, "push", "OUT", "user/x", "--hub_timeout", f"{args.hub_timeout:g}"]
            seconds, megabytes, status, stderr = timed(command, env, cwd=scratch)
    finally:
        endpoint.close()
    lines += ["", f"`hfbert push OUT user/x --hub_timeout {args.hub_timeout:g}` to an endpoint that never answers:",
              "", f"- ended {seconds:.2f} s after the process started, exit status {status}, peak RSS "
              f"{megabytes:.0f} MB", f"- its message: `{stderr.strip()}`", ""]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
