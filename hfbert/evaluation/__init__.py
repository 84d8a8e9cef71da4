"""``hfbert evaluate``: what a pretrained model is worth downstream.

* :mod:`~hfbert.evaluation.suites` -- the suite files (the packaged ``glue`` and ``local`` suites, or your own) and
  their schema; :mod:`~hfbert.evaluation.suite_checks` -- their data checked before any training;
  :mod:`~hfbert.evaluation.task_files` -- the rows each task's recipe reads;
* :mod:`~hfbert.evaluation.run` -- the runs (every task once per seed, resumable) and ``hfbert pretrain
  --evaluate_suite`` (:func:`evaluate_exported`);
* :mod:`~hfbert.evaluation.report` -- the mean and spread over seeds, the table, the figure, the card's
  ``model-index``.
"""

from .report import METRIC_TYPES, eval_results, plot_results, results_table, summarize, write_results_card
from .run import (
    PLOT_FILE,
    RESULT_FILE,
    RESULTS_FILE,
    EvaluateArguments,
    EvaluationError,
    check_settings,
    evaluate,
    evaluate_during_training,
    evaluate_exported,
    evaluation_dir,
    main,
    recipe_arguments,
)
from .suite_checks import check_suite
from .suites import (
    SUITE_DIR,
    TASK_TYPES,
    Suite,
    SuiteTask,
    TaskType,
    find_suite,
    known_metrics,
    load_suite,
    packaged_suites,
)
from .task_files import TaskFiles, write_task_files

__all__ = [
    "METRIC_TYPES", "PLOT_FILE", "RESULTS_FILE", "RESULT_FILE", "SUITE_DIR", "TASK_TYPES", "EvaluateArguments",
    "EvaluationError", "Suite", "SuiteTask", "TaskFiles", "TaskType", "check_settings", "check_suite",
    "eval_results", "evaluate", "evaluate_during_training", "evaluate_exported", "evaluation_dir", "find_suite",
    "known_metrics", "load_suite", "main", "packaged_suites", "plot_results", "recipe_arguments", "results_table",
    "summarize", "write_results_card", "write_task_files",
]
