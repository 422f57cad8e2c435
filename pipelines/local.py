"""Run a pipeline on kfp's local runner, with progress per stage and a run record.

    run_dir/
      run.json     RunRecord: pipeline, shape, arguments, each task's state, time and outputs
      run.log      everything kfp and the stages printed
      artifacts/   kfp's pipeline root: <pipeline>-<timestamp>/<task>/<output>
    cache_dir/     kfp's local cache (shared by runs, so a second run reuses the first's outputs)

kfp.local runs every task as a subprocess of this interpreter
(``SubprocessRunner(use_venv=False)``), or, given kfp's ``DockerRunner``
(``pipelines.docker_runner``), in a container of the task's image, and reports
through its log lines. The
runner reads those lines from stdout (kfp writes its log there, and the
stages' streamed output), keeps them all in ``run.log`` and turns them into
one line per stage; cache hits arrive as log records outside kfp's own
handler. A cached task's outputs are read from its cache entry, so the run
record names the outputs of every task, executed or not: ``rerun`` needs them.
A task in a ``dsl.If``/``dsl.Else`` branch that was not taken is recorded as
``skipped``.

kfp's local runner resolves a ``dsl.OneOf`` over parameters but refuses one
over artifacts ("Expected 1 artifact in ArtifactSelectorSpec"), which the
curriculum's rollback branch hands on. ``run_pipeline_locally`` resolves it the
same way for artifacts: the output of the one branch that ran
(``_artifact_one_of``, patched in for the run).

``summary_lines(record, report)`` is what ``termrl run`` prints at the end:
the compare task's report and its table of policies.
"""

import contextlib
import json
import logging
import os
import re
import resource
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from kfp import local
from kfp.local import executor_output_utils

from pipelines.run_sandboxes import reap_dead_owners_sandboxes, stages_stop_with_the_run
from pipelines.spec_tasks import leaf_tasks

__all__ = [
    "RunRecord",
    "TaskRecord",
    "pipeline_defaults",
    "run_pipeline_locally",
    "spec_defaults",
    "summary_lines",
]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXECUTING = re.compile(r"Executing task '([^']+)'")
_FINISHED = re.compile(r"Task '([^']+)' finished with status (SUCCESS|FAILURE)")
_OUTPUTS = re.compile(r"Task '([^']+)' outputs:")
_OUTPUT_KEY = re.compile(r"^\s{4}(\w+): \w+\( name=")
_OUTPUT_URI = re.compile(r"uri='(.*)',$")
_CACHE_HIT = re.compile(r"Task (\S+) cache hit \(key=([0-9a-f]+)\)")
_RETRY = re.compile(r"Task (\S+) failed \(attempt (\d+)/(\d+)\)")
_SKIPPED = re.compile(r"Skipping conditional task (\S+) ")
_NUMBER_INTEGER = 2  # pipeline_spec_pb2.ParameterType.NUMBER_INTEGER
_QUIET_WARNINGS = (r".*have no effect in the current local runner.*", r".*non-Python base image.*")


@dataclass
class TaskRecord:
    """One task of a local run."""

    name: str
    display_name: str
    state: str = "pending"  # pending | running | executed | cached | failed | imported | skipped
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    """CPU time of the stage's process tree (sandboxes run under podman, not counted)."""
    outputs: dict[str, str] = field(default_factory=dict)
    log_tail: list[str] = field(default_factory=list)


@dataclass
class RunRecord:
    """What ``run.json`` holds: enough to show, compare and rerun a run."""

    run_dir: str
    pipeline: str
    arguments: dict[str, Any]
    shape: dict[str, Any] = field(default_factory=dict)
    cache_dir: str = ""
    tasks: dict[str, TaskRecord] = field(default_factory=dict)
    ok: bool = False
    seconds: float = 0.0
    started: str = ""

    def executed(self) -> list[str]:
        return [t.name for t in self.tasks.values() if t.state == "executed"]

    def count(self, state: str) -> int:
        return sum(t.state == state for t in self.tasks.values())

    def save(self) -> Path:
        path = Path(self.run_dir) / "run.json"
        data = asdict(self)
        for task in data["tasks"].values():
            task.pop("log_tail")
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, run_dir: str | Path) -> "RunRecord":
        from termrl.errors import ConfigError

        path = Path(run_dir) / "run.json"
        if not path.is_file():
            raise ConfigError(
                f"{run_dir} is not a run folder (no run.json): give the folder `termrl run` printed"
            )
        data = json.loads(path.read_text())
        data["tasks"] = {name: TaskRecord(**task) for name, task in data["tasks"].items()}
        return cls(**data)


def pipeline_defaults(pipeline: Any) -> dict[str, Any]:
    """The pipeline's parameters with their defaults."""
    return spec_defaults(pipeline.pipeline_spec)


def spec_defaults(spec: Any) -> dict[str, Any]:
    """The parameters of a PipelineSpec (a compiled YAML's, ``read_compiled``) with their defaults."""
    params = spec.root.input_definitions.parameters
    values = {}
    for name, param in params.items():
        if not param.HasField("default_value"):  # an optional parameter left unset
            values[name] = None
            continue
        value = executor_output_utils.pb2_value_to_python(param.default_value)
        # protobuf numbers are doubles: give integer parameters their type back
        values[name] = (
            int(value) if param.parameter_type == _NUMBER_INTEGER and value is not None else value
        )
    return values


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (kfp waits for each stage)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class _Progress:
    """A stdout stand-in: every line goes to ``run.log``; kfp's lines update the record."""

    def __init__(
        self,
        record: RunRecord,
        log: TextIO,
        echo: Callable[[str], None],
        verbose: bool,
        cache_dir: Path,
        branches: dict[str, list[str]] | None = None,
    ):
        self.record, self.log, self.echo, self.verbose = record, log, echo, verbose
        self.cache_dir = cache_dir
        self.branches = branches or {}
        """A ``dsl.If``/``dsl.Else`` branch's condition task -> the tasks in it."""
        self.buffer = ""
        self.current: str | None = None
        self.outputs_of: str | None = None
        self.output_key: str | None = None
        self.started: dict[str, float] = {}
        self.cpu_started: dict[str, float] = {}

    # file protocol -----------------------------------------------------------------
    def write(self, text: str) -> int:
        self.log.write(text)
        self.buffer += text
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            self._line(_ANSI.sub("", line))
        return len(text)

    def flush(self) -> None:
        self.log.flush()

    def isatty(self) -> bool:
        return False

    # parsing ------------------------------------------------------------------------
    def _task(self, name: str) -> TaskRecord:
        if name not in self.record.tasks:
            self.record.tasks[name] = TaskRecord(name, name)
        return self.record.tasks[name]

    def _position(self, name: str) -> str:
        names = list(self.record.tasks)
        return f"[{names.index(name) + 1:>2}/{len(names)}]" if name in names else "[  ]"

    def _line(self, line: str) -> None:
        if self.verbose:
            self.echo(line)
        if match := _EXECUTING.search(line):
            task = self._task(match.group(1))
            task.state, self.current = "running", task.name
            self.started[task.name] = time.monotonic()
            self.cpu_started[task.name] = _children_cpu()
            if not self.verbose:
                self.echo(f"{self._position(task.name)} {task.display_name} ...")
        elif match := _FINISHED.search(line):
            task = self._task(match.group(1))
            task.seconds = time.monotonic() - self.started.get(task.name, time.monotonic())
            task.cpu_seconds = _children_cpu() - self.cpu_started.get(task.name, _children_cpu())
            if match.group(2) == "FAILURE":
                task.state = "failed"
            else:
                task.state = "imported" if task.name.startswith("importer") else "executed"
            self.current = None
            if not self.verbose:
                self.echo(
                    f"{self._position(task.name)} {task.display_name}: {task.state} in "
                    f"{task.seconds:.0f} s (cpu {task.cpu_seconds:.0f} s)"
                )
                if task.state == "failed":
                    self.echo("    " + "\n    ".join(task.log_tail[-40:]))
        elif match := _OUTPUTS.search(line):
            self.outputs_of, self.output_key = match.group(1), None
        elif self.outputs_of and (match := _OUTPUT_KEY.match(line)):
            self.output_key = match.group(1)
        elif self.outputs_of and self.output_key and (match := _OUTPUT_URI.search(line)):
            self._task(self.outputs_of).outputs[self.output_key] = match.group(1)
            self.output_key = None
        elif line.startswith("-----"):
            self.outputs_of = None
        elif self.current:
            tail = self._task(self.current).log_tail
            tail.append(line)
            del tail[:-200]

    def cache_hit(self, name: str, key: str) -> None:
        task = self._task(name)
        task.state = "cached"
        for entry in self.cache_dir.glob(f"{key}*.json"):
            outputs = json.loads(entry.read_text())
            task.outputs = {
                k: v["uri"] for k, v in outputs.items() if isinstance(v, dict) and "uri" in v
            }
        if not self.verbose:
            self.echo(f"{self._position(name)} {task.display_name}: cached (not executed)")

    def skipped(self, branch: str) -> None:
        for name in self.branches.get(branch, ()):
            task = self._task(name)
            task.state = "skipped"
            if not self.verbose:
                self.echo(f"{self._position(name)} {task.display_name}: skipped (branch not taken)")

    def retry(self, name: str, attempt: str, total: str) -> None:
        self.echo(
            f"{self._position(name)} {self._task(name).display_name}: attempt {attempt}/{total} "
            "failed, retrying"
        )


class _KfpRecords(logging.Handler):
    """kfp logs cache hits and retries outside its own log context: catch them here."""

    def __init__(self, progress: _Progress):
        super().__init__(logging.INFO)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.progress.log.write(message + "\n")
        if match := _CACHE_HIT.search(message):
            self.progress.cache_hit(match.group(1), match.group(2))
        elif match := _RETRY.search(message):
            self.progress.retry(*match.groups())
        elif match := _SKIPPED.search(message):
            self.progress.skipped(match.group(1))


@contextlib.contextmanager
def _captured(progress: _Progress) -> Iterator[None]:
    root = logging.getLogger()
    handler = _KfpRecords(progress)
    saved_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        with contextlib.redirect_stdout(progress), warnings.catch_warnings():  # type: ignore[type-var]
            for pattern in _QUIET_WARNINGS:
                warnings.filterwarnings("ignore", message=pattern)
            yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)


@contextlib.contextmanager
def _unbuffered_children() -> Iterator[None]:
    """Stages print through a pipe: unbuffered, their lines reach the log as they happen.

    (The local cache key reads the task's declared env, not this process's, so
    this changes no cache key.)
    """
    saved = os.environ.get("PYTHONUNBUFFERED")
    os.environ["PYTHONUNBUFFERED"] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONUNBUFFERED", None)
        else:
            os.environ["PYTHONUNBUFFERED"] = saved


def run_pipeline_locally(
    pipeline: Any,
    arguments: dict[str, Any],
    *,
    run_dir: str | Path,
    cache_dir: str | Path,
    shape: dict[str, Any] | None = None,
    echo: Callable[[str], None] | None = None,
    verbose: bool = False,
    runner: Any = None,
) -> RunRecord:
    """Run ``pipeline`` with kfp's local runner (subprocesses of this venv, caching on).

    ``runner``: a kfp local runner instead (``pipelines.docker_runner.docker_runner``:
    each stage in a container of its image); the caller sets up what it needs.

    Returns the record (also written to ``run_dir/run.json``); ``record.ok`` is
    False when a task failed, whose log tail was echoed. ``echo`` gets the
    progress lines; it must not write to ``sys.stdout`` as it is while the
    pipeline runs (that is the capture), so the default binds today's stdout.
    """
    if echo is None:
        stream = sys.stdout

        def echo(text: str) -> None:
            stream.write(text + "\n")
            stream.flush()

    run_dir, cache_dir = Path(run_dir).resolve(), Path(cache_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    leaves = leaf_tasks(pipeline.pipeline_spec)
    branches: dict[str, list[str]] = {}
    for leaf in leaves.values():
        for branch in leaf.branches:
            branches.setdefault(branch, []).append(leaf.name)
    record = RunRecord(
        run_dir=str(run_dir),
        pipeline=pipeline.name,
        arguments={**pipeline_defaults(pipeline), **arguments},
        shape=shape or {},
        cache_dir=str(cache_dir),
        tasks={n: TaskRecord(n, leaf.display_name) for n, leaf in leaves.items()},
        started=time.strftime("%Y-%m-%d %H:%M:%S"),
    )
    local.init(
        runner=runner if runner is not None else local.SubprocessRunner(use_venv=False),
        pipeline_root=str(run_dir / "artifacts"),
        raise_on_error=False,
        enable_caching=True,
        cache_root=str(cache_dir),
    )
    if runner is None:
        reap_dead_owners_sandboxes()
    began = time.monotonic()
    with (
        open(run_dir / "run.log", "a", buffering=1) as log,
        _unbuffered_children(),
        stages_stop_with_the_run(),
    ):
        progress = _Progress(record, log, echo, verbose, cache_dir, branches)
        with _captured(progress), _artifact_one_of(), _unset_parameters_left_out():
            pipeline(**arguments)
    record.seconds = time.monotonic() - began
    done = ("executed", "cached", "imported", "skipped")
    record.ok = all(t.state in done for t in record.tasks.values())
    record.save()
    return record


def _dag_output_artifacts(
    cls: Any, dag_outputs_spec: Any, io_store: Any
) -> dict[str, Any]:  # kfp calls it by these keywords
    """kfp's ``OrchestratorUtils.get_dag_output_artifacts``, with a ``dsl.OneOf`` over artifacts
    (several selectors) resolved as kfp resolves one over parameters: the one branch that ran."""
    outputs = {}
    for key, spec in dag_outputs_spec.artifacts.items():
        found = []
        for selector in spec.artifact_selectors:
            try:
                found.append(
                    io_store.get_task_output(
                        selector.producer_subtask, selector.output_artifact_key
                    )
                )
            except (KeyError, ValueError):  # a branch not taken produced nothing
                continue
        if len(found) != 1:
            raise ValueError(
                f"DAG output artifact {key!r}: {len(found)} of its {len(spec.artifact_selectors)} "
                "sources produced it, expected exactly one"
            )
        outputs[key] = found[0]
    return outputs


@contextlib.contextmanager
def _artifact_one_of() -> Iterator[None]:
    """kfp's local runner with ``_dag_output_artifacts`` for the block (see the module docstring)."""
    from kfp.local.orchestrator.orchestrator_utils import OrchestratorUtils

    saved = OrchestratorUtils.__dict__["get_dag_output_artifacts"]
    OrchestratorUtils.get_dag_output_artifacts = classmethod(_dag_output_artifacts)
    try:
        yield
    finally:
        OrchestratorUtils.get_dag_output_artifacts = saved


@contextlib.contextmanager
def _unset_parameters_left_out() -> Iterator[None]:
    """kfp's local runner with a component parameter left unset (an optional one with no default:
    None, so the stage config's default applies) left out of the executor input, as the cluster's
    driver does; kfp 2.x's local runner hands it on as null and fails casting it to an integer."""
    from kfp.local import executor_input_utils

    original = executor_input_utils.executor_input_to_dict

    def without_unset(executor_input: Any, component_spec: Any) -> dict[str, Any]:
        values = executor_input.inputs.parameter_values
        for name in [n for n, v in values.items() if v.WhichOneof("kind") in (None, "null_value")]:
            del values[name]
        return original(executor_input, component_spec)

    executor_input_utils.executor_input_to_dict = without_unset
    try:
        yield
    finally:
        executor_input_utils.executor_input_to_dict = original


def summary_lines(record: RunRecord, report: str) -> list[str]:
    """What ``termrl run`` prints at the end: the comparison report's path and its tables.

    ``report`` is the display name of the compare task. Its report is copied to
    ``run_dir/report.html`` (the HTML artifact has no extension); the tables are
    read back from its metrics (``components.eval.compare.table_from_metrics``), so
    they show what the report shows, for however many policies were compared: the
    counts, then each pass rate with its 95 % interval and n, the paired difference
    vs the first policy (base) and the pass rate on the held-out-only families.
    """
    from components.eval.compare import comparison_lines, table_from_metrics

    task = next((t for t in record.tasks.values() if t.display_name == report), None)
    if task is None or "report" not in task.outputs:
        return [f"no comparison: the run has no finished task {report!r}"]
    copy = Path(record.run_dir) / "report.html"
    shutil.copyfile(task.outputs["report"], copy)
    table = table_from_metrics(json.loads(Path(task.outputs["metrics"]).read_text()))
    if not table:
        return [
            f"report: {copy}",
            "(its metrics hold no comparison table: a compare task of an older termrl)",
        ]
    width = max(8, *(len(row.label) + 2 for row in table))
    lines = [
        f"report: {copy}",
        "",
        "held-out tasks: " + " vs ".join(row.label for row in table) + " policy",
        f"  {'policy':<{width}}{'tasks':>7}{'trials':>8}{'passed':>8}{'pass rate':>11}",
    ]
    for row in table:
        lines.append(
            f"  {row.label:<{width}}{row.tasks:>7}{row.rate.n:>8}{row.rate.passed:>8}"
            f"{row.rate.rate:>10.1%}"
        )
    lines += ["", *comparison_lines(table)]
    families = record.arguments.get("heldout_families")
    lines.append(
        "  Δ: mean over tasks of the per-task difference vs base, 95 % paired interval (Newcombe's for "
        "pass/fail tasks)"
        + (f"; left-out families (never trained on): {families}" if families else "")
    )
    return lines
