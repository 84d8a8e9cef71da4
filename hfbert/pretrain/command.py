"""``hfbert pretrain`` on the command line: the settings, the job, and every way it can fail said in one line with
its exit status."""

from __future__ import annotations

import os
import sys

from ..arguments import UsageError, run_command
from ..evaluation import EvaluationError
from ..hub import HubPushError
from .checkpointing import DiskFullError
from .config import command_parser
from .host_memory import return_large_blocks
from . import loop  # the job is looked up there when the command runs (a caller may wrap loop.pretrain)
from .loop import CORPUS_ERRORS, PretrainResult, StepDataError, StoppedByAnotherProcess, TrainingDivergedError

__all__ = ["main"]



def _summary(result: PretrainResult) -> str:
    m = result.metrics
    lines = [
        f"done: {m['step']} steps ({m['stopped_by']}), {m['train_seconds']:.0f} s of training",
        f"held-out MLM accuracy {m['eval_mlm_accuracy']:.3f} (most-frequent-token baseline "
        f"{m.get('eval_mlm_baseline_most_frequent_token', float('nan')):.3f}), "
        + ("NSP not trained (MLM only)" if m.get("next_sentence_prediction") is False else
           f"NSP accuracy {m['eval_nsp_accuracy']:.3f} (majority baseline "
           f"{m.get('eval_nsp_baseline_majority_class', float('nan')):.3f}"
           + "".join(f"; stopped at step {c['step']}" for c in m.get("nsp_checks", ()) if c["stopped"]) + ")"),
        f"Hub-format model in {result.output_dir}",
    ]
    for example in result.fill_mask:
        lines.append(f"fill-mask: {example['text']}")
        lines.append("  " + ", ".join(f"{r['token']} {r['score']:.3f}" for r in example["answers"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``hfbert pretrain [--config FILE] [--key value ...]``; exit status 2 for bad settings (one line naming the
    setting, before any work), 1 for a divergence or a full disk (one line, from the main process only) or a remote
    read that failed for good (one line, from the process that read)."""
    parser = command_parser()

    def run() -> int:
        try:
            config = parser.parse_values(sys.argv[1:] if argv is None else argv)
            # The command owns its process, so it may set the allocator for good (pretrain() leaves it alone):
            # blocks larger than a training step's go back to the system when freed (host_memory.py).
            return_large_blocks()
            result = loop.pretrain(config)
        except UsageError:
            if not _first_on_this_machine():  # every process checks the same settings; one of them says so
                return 2
            raise
        except StoppedByAnotherProcess:
            return 1
        except (HubPushError, EvaluationError) as err:  # the model is exported; the upload or the evaluation failed
            print(f"{parser.prog}: error: {' '.join(str(err).split())}", file=sys.stderr)
            return 1
        except (TrainingDivergedError, DiskFullError, StepDataError, *CORPUS_ERRORS) as err:
            # A divergence and a full disk are said by the main process; a failed read during training by the
            # first process that had it; one before training (every process opens the same files) by the first
            # process of each machine.
            if isinstance(err, (TrainingDivergedError, DiskFullError)):
                speaks = _is_main_process()
            else:
                speaks = isinstance(err, StepDataError) or _first_on_this_machine()
            if speaks:
                if isinstance(err, TrainingDivergedError):  # what happened, then the command that recovers
                    print(f"{parser.prog}: {err}", file=sys.stderr)
                else:
                    print(f"{parser.prog}: error: {' '.join(str(err).split())}", file=sys.stderr)
            return 1
        if result.fill_mask:  # the main process
            print(_summary(result))
        return 0

    return run_command(parser.prog, run)


def _first_on_this_machine() -> bool:
    """Whether this is the first process of its machine (the launchers set LOCAL_RANK; a lone process is)."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def _is_main_process() -> bool:
    from accelerate import PartialState

    return PartialState().is_main_process
