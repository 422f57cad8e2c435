"""The rollout stage's one configuration: every knob, its default and why.

``RolloutConfig`` is filled by the command line (``cli.py``) or by the KFP
wrapper; ``validate()`` reports every problem at once. Values derived from
other values (the sidecar folder of finished episodes, the sandbox lifetime,
the agent's config) are computed in one place each, as properties.

The batch a rollout produces is ``groups × group_size`` episodes: one group
per task draw (GRPO-style, every episode of a group works on the same task),
``groups + redundancy`` groups started, the first ``groups`` complete kept
(with ``dynamic_sampling``, up to that many more, and groups with signal first).
Quarantined tasks (``quarantine``, set by the health check between iterations)
are left out before the groups are planned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from components.rollout.behaviour import Penalties
from termrl.agent.loop import AgentConfig
from termrl.errors import ConfigError
from termrl.llm.engine import SamplingParams
from termrl.llm.engines import policy_engine_problems
from termrl.presets import ROLLOUT_EPISODES
from termrl.sandbox.settings import SandboxSettings

__all__ = ["ANCHORINGS", "MODES", "RolloutConfig"]

MODES = ("roll-managed", "cli-native")
ANCHORINGS = ("none", "parallel", "rollback")


@dataclass
class RolloutConfig:
    """Everything the rollout stage needs. Paths first, then the batch, then the episode."""

    tasks: Path = Path("admitted.parquet")
    """Tasks artifact to roll out on (normally verify's ``admitted.parquet``)."""
    out: Path = Path("trajectories.parquet")
    """Trajectories artifact to write (one row per chunk)."""
    metrics_out: Path | None = None
    """Rollout metrics artifact (long format); None puts ``rollout_metrics.parquet`` beside ``out``."""
    model: str | None = None
    """Policy: a Hugging Face folder; None uses the embedded default (SmolLM2, prepared once)."""
    mode: str = "roll-managed"
    """``roll-managed``: termrl's agent loop drives the episode. ``cli-native``: the reference
    agent CLI drives it through the ModelProxy, whose recorded chunks become the trajectory."""
    engine: str = "auto"
    """What serves the episodes' turns: ``continuous`` (the CPU engine; each turn reuses the KV
    cache of the episode's earlier turns), ``batching`` (whole-batch CPU calls), ``vllm`` (the GPU
    image), or ``auto``: vllm where it is installed and a GPU is visible, else continuous; see
    ``termrl.llm.engines.POLICY_ENGINES`` and the README's measurements."""
    weights_dtype: str = "auto"
    """The decode weights: ``auto`` (continuous: bfloat16 where the CPU has bf16 units,
    AVX512-BF16 or AMX, 1.2 to 1.5 times the decode rate, log μ ~0.01 nats a chunk from the
    trainer's fp32 π; vLLM: the checkpoint's type), ``float32`` or ``bfloat16``; see
    ``termrl.llm.engines.WEIGHTS_DTYPES``."""
    policy_version: int = 0
    """Stored on every row so the trainer can tell how stale a sample is."""

    group_size: int = 4
    """Episodes per group (G): the group's rewards form the advantage baseline."""
    groups: int = 4
    """Groups kept in the batch (N)."""
    redundancy: int = 1
    """Extra groups started (R): the first N groups to complete are kept, so a few slow or
    stuck environments never hold the batch up (the seed's redundant parallel environments)."""
    dynamic_sampling: int = 0
    """Extra groups (beyond N + R) that may be started to replace groups whose episodes all
    earned the same reward (zero advantage: no signal). With it on, only groups whose rewards
    differ count towards the N kept, and a task that gave a uniform group is not started again
    (``env_manager.py``). 0: off, the first N complete groups are kept whatever their rewards."""
    seed: int = 0
    """Which tasks the groups draw: group i takes task (seed + i) mod #tasks (after quarantine)."""
    quarantine: tuple[str, ...] = ()
    """Task ids left out of this rollout's groups: the health check quarantines the tasks that
    drove a collapse or a hacking pattern (``components/health``). Ids not in the tasks artifact
    are ignored; excluding every task is an error."""
    concurrency: int = 8
    """Episodes (sandboxes) alive at once; their turns share one CPU engine, so more only
    helps while sandbox time dominates (the README's measured figures)."""
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    """Sandbox backend and its options (``termrl.sandbox.settings``); flat, as ``sandbox_backend``,
    ``sandbox_namespace``, ... on the command line, in ``--set`` and in KFP parameters."""

    demonstrations: Path | None = None
    """Expert trajectories (the demonstrate stage's artifact) to start groups from; see anchors.py."""
    anchoring: str = "none"
    """Chunk-initialized resampling: ``none`` (every episode from scratch), ``parallel`` (each
    group draws an anchor in its task's demonstration) or ``rollback`` (per task, the anchor
    moves earlier once the policy succeeds from it)."""
    anchor_state: Path | None = None
    """rollback: the state the previous iteration wrote (task id → anchor); None starts fresh."""
    anchor_state_out: Path | None = None
    """rollback: where to write the next state; None puts ``anchors.json`` beside ``out``."""
    rollback_threshold: float = 0.5
    """rollback: success rate from the current anchor at which it moves one chunk earlier."""
    recoveries_per_task: int = 0
    """Recovery demonstrations (``recovery.py``): per task, up to this many failed episodes whose
    first sampled command exited non-zero are replayed with the expert's solution after the
    mistake and, where that passes, written beside the episodes as demonstrations (train
    imitates them). Needs ``demonstrations`` and roll-managed mode. 0: none."""

    max_turns: int = ROLLOUT_EPISODES["rollout.max_turns"]
    """Assistant turns per episode (T); shorter than eval's, see ``termrl.presets``."""
    max_new_tokens: int = ROLLOUT_EPISODES["rollout.max_new_tokens"]
    """Response budget per turn."""
    context_window: int | None = ROLLOUT_EPISODES["rollout.context_window"]
    """Tokens of prompt + response an episode may use; None takes the model's."""
    prompt_style: str = AgentConfig.prompt_style
    """The agent's system prompt (``termrl.llm.toolcalls.PROMPTS``); the same in demonstrations
    and eval."""
    temperature: float = SamplingParams.temperature
    """Sampling temperature: on-policy RL samples at 1.0 (the engine's default) so μ matches the
    trained π. Recorded in the trajectories, where train reads it."""
    exec_timeout_sec: float = 30.0
    """Timeout of a bash call that gives none; a call that runs past its timeout marks the
    episode with the drop flag (a transient failure, per the seed)."""
    max_exec_timeout_sec: float = 120.0
    """Cap on the timeout a bash call may ask for."""
    episode_lifetime_sec: float = 600.0
    """Wall-clock limit of one episode's agent phase (stop reason ``lifetime``)."""
    verifier_timeout_sec: float | None = None
    """Timeout of the tests; None takes the task's ``verifier_timeout_sec``."""
    cli_agent_command: tuple[str, ...] | None = None
    """cli-native mode: the agent CLI to run (argv); None runs termrl's reference agent CLI."""

    drop_ratio_limit: float = 0.5
    """Most groups the transient-failure filter may drop, as a fraction of the batch."""
    max_failed_response_tokens: int = 20000
    """A failed episode with more response tokens than this is masked (the seed's 20k)."""
    mask_max_turns: bool = True
    """Mask failed episodes that stopped at max turns (the seed's max-turn mask); a
    max-turn episode that passed its tests is kept as a positive."""

    loop_repeats: int = 3
    """The same command with the same failing result this many times in a row counts as a
    retry loop (``behaviour.py``)."""
    loop_penalty: float = 0.0
    """Behaviour shaping: subtracted from an episode's return when it fell into a retry loop.
    All penalties are off (0) by default, so the outcome reward is the only signal; the health
    check turns one on (0.1 against an outcome of 1) when its pattern spikes. The shaping is
    stored in the trajectories' ``shaping`` column, apart from ``reward``; eval never sees it."""
    destructive_penalty: float = 0.0
    """Behaviour shaping: subtracted when the episode ran a destructive command."""
    test_access_penalty: float = 0.0
    """Behaviour shaping: subtracted when the episode touched the tests' or solution's paths."""
    warn_destructive_rate: float = 0.0
    """Warn when more than this fraction of episodes ran a destructive command."""
    warn_test_access_rate: float = 0.0
    """Warn when more than this fraction of episodes tried to read test or solution paths."""
    warn_loop_rate: float = 0.25
    """Warn when more than this fraction of episodes fell into a repeated-command loop."""
    warn_failure_rate: float = 0.2
    """Warn when more than this fraction of episodes failed (unrecoverable or transient)."""
    keep_parts: bool = False
    """Keep the sidecar folder of per-episode part files after the final merge."""
    parts: Path | None = None
    """The sidecar folder; None: beside ``out`` (``out`` + ``.parts``). The component puts it where
    a retried pod finds it (``components.progress``)."""

    @property
    def parts_dir(self) -> Path:
        """Sidecar folder holding one Parquet part per finished episode (the resume state)."""
        return (
            Path(self.parts)
            if self.parts is not None
            else self.out.with_name(self.out.name + ".parts")
        )

    @property
    def metrics_path(self) -> Path:
        return self.metrics_out or self.out.with_name("rollout_metrics.parquet")

    @property
    def anchor_state_path(self) -> Path:
        return self.anchor_state_out or self.out.with_name("anchors.json")

    @property
    def groups_started(self) -> int:
        return self.groups + self.redundancy + self.dynamic_sampling

    @property
    def agent(self) -> AgentConfig:
        """The agent's config (shared with eval) for this rollout."""
        return AgentConfig(
            max_turns=self.max_turns,
            max_new_tokens=self.max_new_tokens,
            context_window=self.context_window,
            prompt_style=self.prompt_style,
            sampling=SamplingParams(temperature=self.temperature),
            default_timeout_sec=self.exec_timeout_sec,
            max_timeout_sec=self.max_exec_timeout_sec,
            lifetime_sec=self.episode_lifetime_sec,
        )

    @property
    def penalties(self) -> Penalties:
        """The behaviour-shaping weights of this rollout."""
        return Penalties(self.loop_penalty, self.destructive_penalty, self.test_access_penalty)

    def sandbox_lifetime_sec(self, verifier_timeout_sec: float) -> float:
        """A sandbox outlives its episode by the tests' time plus a margin, never longer."""
        return self.episode_lifetime_sec + self.max_exec_timeout_sec + verifier_timeout_sec + 60.0

    def validate(self) -> None:
        """Raise one ``ConfigError`` listing every problem."""
        problems: list[str] = self.sandbox.problems()
        if self.mode not in MODES:
            problems.append(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        problems += policy_engine_problems(self.engine, self.weights_dtype)
        for name in (
            "group_size",
            "groups",
            "concurrency",
            "max_turns",
            "max_new_tokens",
            "loop_repeats",
        ):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be at least 1, not {getattr(self, name)}")
        for name in (
            "redundancy",
            "dynamic_sampling",
            "policy_version",
            "max_failed_response_tokens",
            "recoveries_per_task",
        ):
            if getattr(self, name) < 0:
                problems.append(f"{name} must not be negative, not {getattr(self, name)}")
        for name in ("exec_timeout_sec", "max_exec_timeout_sec", "episode_lifetime_sec"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive, not {getattr(self, name)}")
        for name in ("loop_penalty", "destructive_penalty", "test_access_penalty"):
            if getattr(self, name) < 0:
                problems.append(
                    f"{name} must not be negative (it is subtracted), not {getattr(self, name)}"
                )
        if any(not task_id for task_id in self.quarantine):
            problems.append("quarantine must hold task ids, not empty strings")
        if self.verifier_timeout_sec is not None and self.verifier_timeout_sec <= 0:
            problems.append("verifier_timeout_sec must be positive when given")
        if self.context_window is not None and self.context_window <= self.max_new_tokens:
            problems.append("context_window must be larger than max_new_tokens")
        if self.temperature < 0:
            problems.append("temperature must not be negative")
        if not 0.0 <= self.drop_ratio_limit <= 1.0:
            problems.append("drop_ratio_limit must be within [0, 1]")
        for name in (
            "warn_destructive_rate",
            "warn_test_access_rate",
            "warn_loop_rate",
            "warn_failure_rate",
        ):
            if not 0.0 <= getattr(self, name) <= 1.0:
                problems.append(f"{name} must be within [0, 1]")
        if self.cli_agent_command is not None and not self.cli_agent_command:
            problems.append("cli_agent_command must not be empty when given")
        if self.anchoring not in ANCHORINGS:
            problems.append(f"anchoring must be none, parallel or rollback, not {self.anchoring!r}")
        if self.anchoring != "none" and (
            self.demonstrations is None or not self.demonstrations.is_file()
        ):
            problems.append(f"anchoring {self.anchoring!r} needs a demonstrations artifact")
        if self.recoveries_per_task > 0 and (
            self.demonstrations is None or not self.demonstrations.is_file()
        ):
            problems.append("recoveries_per_task needs a demonstrations artifact")
        if self.recoveries_per_task > 0 and self.mode != "roll-managed":
            problems.append(
                "recoveries_per_task needs roll-managed mode (it replays termrl's agent)"
            )
        if not 0.0 < self.rollback_threshold <= 1.0:
            problems.append("rollback_threshold must be within (0, 1]")
        if self.out.suffix != ".parquet":
            problems.append(f"out must be a .parquet file, not {str(self.out)!r}")
        if not self.tasks.is_file():
            problems.append(f"tasks artifact {str(self.tasks)!r} does not exist")
        if problems:
            raise ConfigError(problems)
