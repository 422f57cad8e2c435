"""The artifact contract between stages: one versioned Parquet schema per artifact.

    tasks            termrl.artifacts.tasks         (TASKS, Task, TaskFile)
    verdicts         termrl.artifacts.verdicts      (VERDICTS)
    trajectories     termrl.artifacts.trajectories  (TRAJECTORIES; one row per chunk)
    eval_results     termrl.artifacts.eval_results  (EVAL_RESULTS)
    train_metrics    termrl.artifacts.metrics       (TRAIN_METRICS)
    rollout_metrics  termrl.artifacts.metrics       (ROLLOUT_METRICS)
    checkpoint       termrl.artifacts.checkpoint    (CheckpointFolder: train's output folder,
                                                     a model folder with train_metrics and
                                                     training_state/ beside it)

Rules shared by all of them are in ``termrl.artifacts.contract``.
"""

from termrl.artifacts.checkpoint import CheckpointFolder, read_train_state
from termrl.artifacts.contract import ArtifactSchema, artifact_info, read_artifact, write_artifact
from termrl.artifacts.eval_results import EVAL_RESULTS, read_eval_results, write_eval_results
from termrl.artifacts.metrics import (
    ROLLOUT_METRICS,
    TRAIN_METRICS,
    read_rollout_metrics,
    read_train_metrics,
    write_rollout_metrics,
    write_train_metrics,
)
from termrl.artifacts.tasks import (
    TASKS,
    Task,
    TaskFile,
    load_tasks,
    read_tasks,
    save_tasks,
    write_tasks,
)
from termrl.artifacts.trajectories import TRAJECTORIES, read_trajectories, write_trajectories
from termrl.artifacts.verdicts import VERDICTS, read_verdicts, write_verdicts

__all__ = [
    "EVAL_RESULTS",
    "ROLLOUT_METRICS",
    "TASKS",
    "TRAIN_METRICS",
    "TRAJECTORIES",
    "VERDICTS",
    "ArtifactSchema",
    "CheckpointFolder",
    "Task",
    "TaskFile",
    "artifact_info",
    "load_tasks",
    "read_artifact",
    "read_eval_results",
    "read_rollout_metrics",
    "read_tasks",
    "read_train_metrics",
    "read_train_state",
    "read_trajectories",
    "read_verdicts",
    "save_tasks",
    "write_artifact",
    "write_eval_results",
    "write_rollout_metrics",
    "write_tasks",
    "write_train_metrics",
    "write_trajectories",
    "write_verdicts",
]
