"""The sandbox checks of one task, each in fresh sandboxes, each returning a ``CheckOutcome``.

    ground truth    run the solution, then the tests: they must pass (K runs)
    no-op           run only the tests: they must fail (K runs)
    flakiness       the K ground-truth runs agree and the K no-op runs agree
    ablation        drop one solution step at a time: the tests must then fail;
                    a step they pass without is named in ``unchecked_steps``
    state replay    copy the files the solution changed into a fresh sandbox
                    without running any of its commands, then run the tests:
                    if they pass, they check only final file state — a
                    false-positive risk when the instruction asks for a process

Scoring goes through ``termrl.taskrun`` (``run_solution``/``run_tests``), the
one place every stage runs and scores a task. Each run gets a fresh sandbox
from ``termrl.taskrun.TaskSandboxes`` (the task's image built once, set-up
leftovers removed: any solution or tests in it are the ones uploaded here);
how many are alive at once is the sandbox manager's ``max_sessions``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from components.verify.outcomes import CheckOutcome
from components.verify.readonly import reads_only
from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import TermrlError
from termrl.multistep import run_steps
from termrl.sandbox.session import Session
from termrl.shellsteps import split_steps, without_step
from termrl.taskrun import (
    SOLUTION_DIR,
    TaskSandboxes,
    TestOutcome,
    run_solution,
    run_tests,
    solution_steps,
)

__all__ = [
    "AblationPlan",
    "ablation_plan",
    "check_ablation",
    "check_flakiness",
    "check_ground_truth",
    "check_noop",
    "check_state_replay",
    "process_match",
]

REPLAY_DIR = "/tmp/.termrl-replay"


@dataclass
class _Run:
    passed: bool | None  # None: the run errored
    note: str


def _tail(text: str, limit: int = 600) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


async def _guarded(run: Callable[[], Awaitable[TestOutcome]]) -> _Run:
    """One scored run; sandbox and reward failures become an errored run, not an exception."""
    try:
        outcome = await run()
    except (TermrlError, OSError) as exc:
        return _Run(None, f"{type(exc).__name__}: {_tail(str(exc))}")
    if outcome.tampering:
        # Rollout masks such episodes and eval fails them: the task could never be passed cleanly.
        return _Run(False, f"the run changed what scoring runs: {'; '.join(outcome.tampering)}")
    timed = " (tests timed out)" if outcome.timed_out else ""
    return _Run(outcome.passed, f"reward {outcome.reward:g}{timed}: {_tail(outcome.output, 300)}")


async def _repeat(repeats: int, run: Callable[[], Awaitable[TestOutcome]]) -> list[_Run]:
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(_guarded(run)) for _ in range(repeats)]
    return [t.result() for t in tasks]


async def _solved_then_tested(sandboxes: TaskSandboxes, task: Task) -> TestOutcome:
    async with sandboxes.open(task) as session:
        return (await run_steps(session, task, lambda step: run_solution(session, step))).outcome


async def _nothing(step: Task) -> None:
    return None


async def _tested_only(sandboxes: TaskSandboxes, task: Task) -> TestOutcome:
    async with sandboxes.open(task) as session:
        return (await run_steps(session, task, _nothing)).outcome


def _runs_outcome(
    name: str, runs: list[_Run], want: bool, started: float, what: str
) -> CheckOutcome:
    results = [r.passed for r in runs]
    errored = [r for r in runs if r.passed is None]
    wrong = [r for r in runs if r.passed is not None and r.passed != want]
    seconds = time.monotonic() - started
    if wrong:
        verb = "failed" if want else "passed"
        reason = f"{what}: the tests {verb} in {len(wrong)}/{len(runs)} runs; {wrong[0].note}"
        return CheckOutcome(name, "fail", reason, seconds, results)
    if errored:
        return CheckOutcome(
            name,
            "error",
            f"{len(errored)}/{len(runs)} runs errored: {errored[0].note}",
            seconds,
            results,
        )
    verb = "passed" if want else "failed"
    return CheckOutcome(
        name, "pass", f"{what}: the tests {verb} in {len(runs)}/{len(runs)} runs", seconds, results
    )


async def check_ground_truth(sandboxes: TaskSandboxes, task: Task, repeats: int) -> CheckOutcome:
    """The reference solution passes the tests, in each of ``repeats`` fresh sandboxes."""
    started = time.monotonic()
    runs = await _repeat(repeats, lambda: _solved_then_tested(sandboxes, task))
    return _runs_outcome("ground_truth", runs, True, started, "with the reference solution")


async def check_noop(sandboxes: TaskSandboxes, task: Task, repeats: int) -> CheckOutcome:
    """Doing nothing fails the tests, in each of ``repeats`` fresh sandboxes."""
    started = time.monotonic()
    runs = await _repeat(repeats, lambda: _tested_only(sandboxes, task))
    return _runs_outcome("noop", runs, False, started, "with no solution")


def check_flakiness(ground_truth: CheckOutcome, noop: CheckOutcome) -> CheckOutcome:
    """The repeated runs agree with each other (the same state must give the same verdict)."""
    findings = []
    for check in (ground_truth, noop):
        seen = {r for r in check.runs if r is not None}
        if len(seen) > 1:
            passed = sum(1 for r in check.runs if r)
            findings.append(
                f"{check.name}: tests passed in {passed}/{len(check.runs)} identical runs"
            )
    measured = min(len([r for r in c.runs if r is not None]) for c in (ground_truth, noop))
    if findings:
        return CheckOutcome("flakiness", "fail", "; ".join(findings))
    if measured < 2:
        return CheckOutcome(
            "flakiness", "skipped", "fewer than 2 comparable runs (repeats=1 or errored runs)"
        )
    return CheckOutcome("flakiness", "pass", f"results agree across {measured} runs each")


@dataclass
class AblationPlan:
    """A solution's steps and how to build the task with one of them removed."""

    steps: list[str]
    without: Callable[[int], Task]
    source: str  # which file the steps come from


def ablation_plan(task: Task) -> AblationPlan | None:
    """How to ablate ``task``'s solution, or None when it has no script termrl can split.

    The solution is the shell script its command runs (``bash /solution/solve.sh``)
    or, for a legacy ``solution.yaml``, that file's list of commands.
    """
    if not task.solution_command:
        entries = solution_steps(task)
        if not entries:
            return None
        spec = next(f for f in task.solution_files if f.path == "solution.yaml")
        raw = yaml.safe_load(spec.data.decode())

        def without_entry(i: int) -> Task:
            data = yaml.safe_dump(raw[:i] + raw[i + 1 :], sort_keys=False).encode()
            return _with_file(task, dataclasses.replace(spec, data=data))

        return AblationPlan(entries, without_entry, spec.path)
    script = _script_of(task)
    if script is None:
        return None
    try:
        text = script.data.decode()
    except UnicodeDecodeError:
        return None
    steps = split_steps(text)

    def without_line_step(i: int) -> Task:
        return _with_file(
            task, dataclasses.replace(script, data=without_step(text, steps[i]).encode())
        )

    return AblationPlan([s.text for s in steps], without_line_step, script.path)


def _script_of(task: Task) -> TaskFile | None:
    try:
        words = shlex.split(task.solution_command or "")
    except ValueError:
        return None
    for word in words:
        path = PurePosixPath(word)
        if path.is_relative_to(SOLUTION_DIR):
            relative = str(path.relative_to(SOLUTION_DIR))
            return next((f for f in task.solution_files if f.path == relative), None)
    return None


def _with_file(task: Task, replacement: TaskFile) -> Task:
    files = [replacement if f.path == replacement.path else f for f in task.solution_files]
    return dataclasses.replace(task, solution_files=files)


async def check_ablation(
    sandboxes: TaskSandboxes, task: Task, *, inert_patterns: list[re.Pattern[str]], max_steps: int
) -> CheckOutcome:
    """Rerun the solution without each step; the tests must notice every missing step."""
    started = time.monotonic()
    plan = ablation_plan(task)
    if plan is None:
        return CheckOutcome("ablation", "skipped", "no solution script to split into steps")
    # A step that only reads cannot be noticed missing: probing it would reject a solution
    # for looking before it acts (components.verify.readonly).
    probed = [
        i
        for i, step in enumerate(plan.steps)
        if not any(p.match(step.strip()) for p in inert_patterns) and not reads_only(step)
    ]
    if len(plan.steps) < 2 or not probed:
        why = (
            "one step, which the no-op check covers"
            if len(plan.steps) < 2
            else "only steps that change shell state, print or read"
        )
        return CheckOutcome(
            "ablation",
            "skipped",
            f"nothing to ablate in {plan.source}: {why}",
            detail={"steps": plan.steps},
        )
    left_out = probed[max_steps:]
    probed = probed[:max_steps]
    async with asyncio.TaskGroup() as group:
        probes = {
            i: group.create_task(
                _guarded(lambda i=i: _solved_then_tested(sandboxes, plan.without(i)))
            )
            for i in probed
        }
    rows = [
        {"step_index": i, "step": plan.steps[i], "tests_passed": probes[i].result().passed}
        for i in probed
    ]
    unchecked = [row for row in rows if row["tests_passed"]]
    errored = [i for i in probed if probes[i].result().passed is None]
    detail: dict[str, Any] = {
        "probes": rows,
        "steps": len(plan.steps),
        "source": plan.source,
        "not_probed": left_out,
    }
    seconds = time.monotonic() - started
    if unchecked:
        named = "; ".join(f"step {r['step_index']} `{_one_line(r['step'])}`" for r in unchecked)
        return CheckOutcome(
            "ablation", "fail", f"the tests still pass without {named}", seconds, detail=detail
        )
    if errored:
        note = probes[errored[0]].result().note
        return CheckOutcome(
            "ablation", "error", f"{len(errored)} probe(s) errored: {note}", seconds, detail=detail
        )
    more = f" ({len(left_out)} later steps not probed)" if left_out else ""
    return CheckOutcome(
        "ablation",
        "pass",
        f"the tests fail without each of {len(rows)} steps{more}",
        seconds,
        detail=detail,
    )


def _one_line(step: str, limit: int = 80) -> str:
    line = " ".join(step.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# Names of data, not requests: a one-word code span (`server`, `server.version`), a path,
# file name or dotted key (/etc/server.conf, server.port), an INI section header ([server]),
# and a word naming a part of a file (the server section, the service key).
_DATA_NAMES = re.compile(
    r"`[^`\s]+`"
    r"|\S*\w[./]\w\S*"
    r"|\[[\w.-]+\]"
    r"|\b\w+(?=\s+(?:section|key|field|setting|entry|table|column|property|attribute|"
    r"variable|value)s?\b)",
    re.IGNORECASE,
)


def process_match(instruction: str, patterns: list[re.Pattern[str]]) -> str | None:
    """The words of ``instruction`` that ask for a process (service, daemon, background...), if
    any. Words inside names of data do not count: "the `version` of the `server` section" asks
    for a value, "/etc/server.conf" is a file."""
    prose = _DATA_NAMES.sub(lambda m: " " * len(m.group(0)), instruction)
    for pattern in patterns:
        found = pattern.search(prose)
        if found:
            return found.group(0)
    return None


def _find_command(exclude: tuple[str, ...], tail: str) -> str:
    prune = " -o ".join(f"-path {shlex.quote(p)}" for p in exclude)
    return f"find / -xdev -mindepth 1 \\( {prune} \\) -prune -o {tail}"


async def check_state_replay(
    sandboxes: TaskSandboxes,
    task: Task,
    *,
    exclude: tuple[str, ...],
    process_patterns: list[re.Pattern[str]],
    max_bytes: int,
) -> CheckOutcome:
    """Do the tests pass on the solution's files alone, with none of its commands run?

    The solution runs in one sandbox between two file listings; the paths whose
    inode changed after a marker (ctime: extraction and ``cp -p`` cannot fake it)
    are packed with tar, and the paths that vanished are listed. A fresh sandbox
    gets the archive extracted at ``/`` and the vanished paths removed, then the
    tests run. Passing means the tests read only final file state.
    """
    started = time.monotonic()
    asks_for = process_match(task.instruction, process_patterns)
    try:
        async with sandboxes.open(task) as session:
            changes = await _record_solution_changes(
                session, task, exclude=exclude, max_bytes=max_bytes
            )
        async with sandboxes.open(task) as session:
            tests = await _replay_and_test(session, task, changes)
    except _ReplayFailed as exc:
        return CheckOutcome("state_replay", "error", str(exc), time.monotonic() - started)
    except (TermrlError, OSError, ValueError) as exc:
        return CheckOutcome(
            "state_replay",
            "error",
            f"{type(exc).__name__}: {_tail(str(exc))}",
            time.monotonic() - started,
        )
    return _replay_verdict(tests, changes, asks_for, time.monotonic() - started)


class _ReplayFailed(Exception):
    """A step of the state replay could not be done; the message is the check's reason."""


@dataclass
class _SolutionChanges:
    """What the solution did to the file system, packed for replay."""

    archive: bytes
    """A tar of every path whose inode changed."""
    deleted: bytes
    """The paths that vanished, NUL-separated."""
    paths: list[str]
    """The first 50 changed paths, for the report."""


async def _record_solution_changes(
    session: Session, task: Task, *, exclude: tuple[str, ...], max_bytes: int
) -> _SolutionChanges:
    """Run the solution between two file listings and pack what it changed."""
    listing = _find_command(exclude, "-print0")
    changed = _find_command(exclude, f"-cnewer {REPLAY_DIR}/marker -print0")
    before = await session.exec(
        f"mkdir -p {REPLAY_DIR} && {listing} | sort -z > {REPLAY_DIR}/before && touch {REPLAY_DIR}/marker && sleep 0.05",
        timeout=300,
    )
    if not before.ok:
        raise _ReplayFailed(f"cannot list files: {_tail(before.output)}")
    await run_solution(session, task)
    # tar exits 1 when a file changed while it was read (a service still writing):
    # the archive is still complete enough to replay.
    pack = await session.exec(
        f"cd / && {listing} | sort -z > {REPLAY_DIR}/after"
        f" && comm -z -23 {REPLAY_DIR}/before {REPLAY_DIR}/after > {REPLAY_DIR}/deleted"
        f" && {changed} > {REPLAY_DIR}/changed"
        f" && {{ tar --null --no-recursion --ignore-failed-read -cpf {REPLAY_DIR}/changes.tar"
        f" -T {REPLAY_DIR}/changed 2>{REPLAY_DIR}/tar.log; [ $? -le 1 ]; }}"
        f" && echo REPLAY_BYTES $(stat -c %s {REPLAY_DIR}/changes.tar)"
        f" && tr '\\0' '\\n' < {REPLAY_DIR}/changed | head -50 | sed 's/^/REPLAY_PATH /'",
        timeout=600,
    )
    if not pack.ok:
        raise _ReplayFailed(f"cannot pack the changes: {_tail(pack.output)}")
    lines = pack.output.splitlines()
    # A StopIteration would not leave this coroutine as itself (PEP 479): hence the default.
    size = next((int(line.split()[1]) for line in lines if line.startswith("REPLAY_BYTES ")), None)
    if size is None:
        raise _ReplayFailed(f"cannot pack the changes: no archive size in {_tail(pack.output)}")
    paths = [line[len("REPLAY_PATH ") :] for line in lines if line.startswith("REPLAY_PATH ")]
    if size > max_bytes:
        raise _ReplayFailed(f"the solution changed {size} bytes of files, over the limit")
    return _SolutionChanges(
        archive=await session.download(f"{REPLAY_DIR}/changes.tar"),
        deleted=await session.download(f"{REPLAY_DIR}/deleted"),
        paths=paths,
    )


async def _replay_and_test(session: Session, task: Task, changes: _SolutionChanges) -> TestOutcome:
    """Apply the solution's changes to a fresh sandbox, none of its commands, then run the tests."""
    await session.upload(changes.archive, f"{REPLAY_DIR}/changes.tar")
    await session.upload(changes.deleted, f"{REPLAY_DIR}/deleted")
    applied = await session.exec(
        f"tar -xpf {REPLAY_DIR}/changes.tar -C / && (cd / && xargs -0 -r rm -rf -- < {REPLAY_DIR}/deleted)"
        f" && rm -rf {REPLAY_DIR}",
        timeout=600,
    )
    if not applied.ok:
        raise _ReplayFailed(f"cannot apply the changes: {_tail(applied.output)}")
    return await run_tests(session, task)


def _replay_verdict(
    tests: TestOutcome, changes: _SolutionChanges, asks_for: str | None, seconds: float
) -> CheckOutcome:
    """Tests that pass on the files alone fail the check only when the instruction asks for a
    process: then they cannot tell whether it was set up."""
    detail = {
        "tests_passed": tests.passed,
        "changed_paths": changes.paths,
        "deleted_paths": len([p for p in changes.deleted.split(b"\0") if p]),
        "archive_bytes": len(changes.archive),
        "process_words": asks_for,
    }
    if not tests.passed:
        return CheckOutcome(
            "state_replay",
            "pass",
            "the tests fail on the copied files alone: they check what the solution's commands did",
            seconds,
            detail=detail,
        )
    if asks_for:
        reason = (
            f"the tests pass on the solution's files alone, but the instruction asks for a process "
            f"({asks_for!r}): they check only final file state"
        )
        return CheckOutcome("state_replay", "fail", reason, seconds, detail=detail)
    return CheckOutcome(
        "state_replay",
        "pass",
        "the tests check final file state; the instruction asks for no process",
        seconds,
        detail=detail,
    )
