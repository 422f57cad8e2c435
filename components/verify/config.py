"""The verify stage's one configuration: every knob, its default and why.

``validate()`` reports every problem at once (``ConfigError``) before any
sandbox starts. ``judge_endpoints()`` is the one place a judge spec becomes a
litellm model name and endpoint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from termrl.errors import ConfigError
from termrl.sandbox.settings import SandboxSettings

__all__ = ["AGGREGATIONS", "CHECKS", "JudgeEndpoint", "VerifyConfig"]

CHECKS = ("flakiness", "ground_truth", "noop", "ablation", "state_replay", "judges")
"""Every check, in the order a rejection names the first failed one. Flakiness
comes first: a flaky task's ground truth also fails now and then, and
"flakiness" is the reason that tells the author what to fix."""

AGGREGATIONS = ("any-flag", "majority")

LOCAL_JUDGE = "local"


@dataclass(frozen=True)
class JudgeEndpoint:
    """Where one judge is asked: a litellm model name and, for local servers, its base URL."""

    spec: str
    model: str
    api_base: str | None


@dataclass
class VerifyConfig:
    """Everything the verify stage needs. Paths first, then the checks, then the judges."""

    tasks: str = ""
    """The tasks artifact (Parquet) to verify."""
    out: str = ""
    """Where to write the verdicts artifact: one row per task, every check and the decision."""
    admitted: str = ""
    """Where to write the admitted tasks: a tasks artifact holding only the tasks that passed."""

    repeats: int = 3
    """K: how many fresh sandboxes run the ground truth and the no-op each. Results that
    disagree across the K runs mark the task flaky. K=1 skips the flakiness check."""
    require: tuple[str, ...] = ("flakiness", "ground_truth", "noop", "ablation", "state_replay")
    """Checks that must pass for admission. Ablation and the state replay run only when
    required (they cost the most sandboxes); the others always run. The judges are not
    required by default: the embedded local judge is a 135M model whose verdicts are
    recorded (and feed ``false_positive_risk``) but are too weak to gate on; add ``judges``
    when the panel holds capable models."""
    concurrency: int = 2
    """Sandboxes alive at once across all tasks (small: a verify on a laptop-sized machine)."""
    max_ablation_steps: int = 24
    """Ablate at most this many steps per solution (one fresh sandbox each); later steps are
    not probed and the ablation outcome says so."""
    inert_step_patterns: tuple[str, ...] = (
        r"^(set|shopt|cd|pushd|popd|export|unset|alias|umask|trap|source|\.)\b",
        r"^[A-Za-z_][A-Za-z0-9_]*=(?!.*(\$\(|`))\S*$",
        r"^(echo|printf|true|:|sleep|ls|pwd|cat|head|tail|wc|which|type|wait|exit|return)\b(?!.*(\$\(|`))[^>|]*$",
        r"^(function\s+)?[\w.:-]+\s*\(\s*\)|^function\s",
    )
    """Steps not ablated (regexes on a step's text): they change only the shell's own state
    (cd, export, set, a function definition) or print, so no test could observe them
    directly; whether later steps depend on them shows when those steps are ablated.
    A command substitution or redirection makes a step count (it may do real work)."""
    process_patterns: tuple[str, ...] = (
        r"\b(service|daemon|server|systemd|supervisor)\b",
        r"\b(periodic(ally)?|every \d*\s*seconds?)\b",
        r"\b(background|keeps? running|listen(s|ing)? on|on (tcp |udp )?port \d+|watch(es|er)?)\b",
    )
    """An instruction matching one of these (case-insensitive) asks for a *process*. When
    the state-replay probe passes on such a task, its tests check only final file state,
    which a copied file satisfies without the process ever running: a false-positive risk.
    A scheduled job (cron, ``every 15 minutes``) is not such a process: what the agent
    makes is a crontab or cron.d file that the system's cron daemon reads, so file state
    is the whole outcome and the tests can only read the entry and run its command as cron
    would; these words would reject every correct cron task. A git hook is the same: a file
    that git runs. Anything every few seconds is below cron's one-minute grain, so it must be
    a live loop and stays a process. A port is a process's only "on port N" (listening, served
    on): "database port 5410" is a setting. Words in names of data (`server.version`, the
    [server] section, /etc/server.conf) are not matched (``checks.process_match``)."""
    replay_exclude: tuple[str, ...] = (
        "/proc",
        "/sys",
        "/dev",
        "/tmp",
        "/run",
        "/logs",
        "/solution",
        "/tests",
    )
    """Paths the state-replay probe never copies: kernel views, scratch space and the
    harness's own folders."""
    replay_max_mb: int = 512
    """Largest archive of solution changes the state-replay probe moves between sandboxes."""
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    """Sandbox backend and its options (``termrl.sandbox.settings``); flat, as ``sandbox_backend``,
    ``sandbox_namespace``, ... on the command line, in ``--set`` and in KFP parameters."""

    judges: tuple[str, ...] = (LOCAL_JUDGE,)
    """The LLM-judge panel: litellm model names (``openai/gpt-4o``, ``anthropic/...``), each
    optionally ``MODEL@BASE_URL`` for an OpenAI-compatible server; ``local`` is the
    policy model served by termrl's ModelProxy at ``model_proxy_url``. Empty: no judges."""
    judge_aggregation: str = "any-flag"
    """``any-flag``: one flag flags the task; ``majority``: more than half of the judges
    that answered must flag. Judges that errored do not vote."""
    judge_timeout_sec: float = 300.0
    """Per judge request; a slower judge is recorded as an error. Generous because the
    local judge runs on CPU: 256 tokens take ~25 s at ~10 tok/s, minutes on a busy machine."""
    judge_max_tokens: int = 256
    """Room for the JSON verdict and its rationale."""
    judge_concurrency: int = 4
    """Judge requests in flight at once across all tasks."""
    judge_max_test_chars: int = 12000
    """How much of the test files a judge reads (longer files are cut, marked as cut)."""
    model_proxy_url: str | None = None
    """A running ModelProxy (``http://host:port/v1``) to ask as the ``local`` judge. None:
    the stage starts one in-process for the run, serving ``local_judge_model``."""
    local_judge_model: str | None = None
    """The Hugging Face folder the in-process ModelProxy serves; None is the embedded
    default policy (SmolLM2-135M-Instruct, prepared once and cached)."""
    model_proxy_model: str = "policy"
    """The model name sent to the ModelProxy (it serves one model and ignores the name)."""
    progress: bool = True
    """Show a progress bar over tasks."""

    def judge_endpoints(self) -> list[JudgeEndpoint]:
        """Each judge spec as a litellm model and endpoint."""
        endpoints = []
        for spec in self.judges:
            if spec == LOCAL_JUDGE:
                endpoints.append(
                    JudgeEndpoint(spec, f"openai/{self.model_proxy_model}", self.model_proxy_url)
                )
                continue
            model, sep, base = spec.partition("@")
            endpoints.append(JudgeEndpoint(spec, model, base if sep else None))
        return endpoints

    def validate(self, *, check_inputs: bool = True) -> None:
        """Raise ``ConfigError`` listing every problem, or return quietly."""
        problems: list[str] = self.sandbox.problems()
        for name in ("tasks", "out", "admitted"):
            if not getattr(self, name):
                problems.append(f"{name}: a path is required")
        if check_inputs and self.tasks and not Path(self.tasks).is_file():
            problems.append(f"tasks: no such file {self.tasks!r}")
        if self.out and self.out == self.admitted:
            problems.append("out and admitted must be different files")
        if self.repeats < 1:
            problems.append(f"repeats must be >= 1, not {self.repeats}")
        unknown = [c for c in self.require if c not in CHECKS]
        if unknown:
            problems.append(
                f"require: unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECKS)}"
            )
        if "judges" in self.require and not self.judges:
            problems.append("require names judges but the judge panel is empty")
        for name in (
            "concurrency",
            "judge_concurrency",
            "max_ablation_steps",
            "judge_max_tokens",
            "judge_max_test_chars",
            "replay_max_mb",
        ):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, not {getattr(self, name)}")
        if self.judge_timeout_sec <= 0:
            problems.append(f"judge_timeout_sec must be positive, not {self.judge_timeout_sec}")
        if self.judge_aggregation not in AGGREGATIONS:
            problems.append(
                f"judge_aggregation must be one of {', '.join(AGGREGATIONS)}, not {self.judge_aggregation!r}"
            )
        for endpoint in self.judge_endpoints():
            if not endpoint.model:
                problems.append(f"judges: {endpoint.spec!r} names no model")
            if endpoint.api_base and not re.match(r"^https?://", endpoint.api_base):
                problems.append(
                    f"judges: {endpoint.spec!r}: the base URL must start with http:// or https://"
                )
        for name in ("inert_step_patterns", "process_patterns"):
            for pattern in getattr(self, name):
                try:
                    re.compile(pattern)
                except re.error as exc:
                    problems.append(f"{name}: {pattern!r} is not a regex ({exc})")
        if problems:
            raise ConfigError(problems)
