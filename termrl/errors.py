"""The exception tree of termrl.

Every error termrl raises on purpose derives from ``TermrlError``. Rollout's
mask & filter reads the *type* of an episode's failure, so backend errors
(podman, bubblewrap, Kubernetes, HTTP engines) are translated into these types
at one boundary each and never escape raw.

    TermrlError
    ├── ConfigError                 bad configuration; lists every problem at once
    ├── ArtifactError               an artifact file cannot be used
    │   └── SchemaMismatch          missing/mistyped column or newer major version
    ├── TaskFormatError             a task folder is invalid (one line per folder)
    ├── ModelError                  a model cannot be found, converted or loaded
    │   ├── EngineUnavailable       an inference engine cannot run here (no vllm, no GPU)
    │   └── UnsupportedModel        an engine cannot serve this model's architecture
    └── EpisodeError                something went wrong inside one episode
        ├── UnrecoverableError      → placeholder sample, zero mask, zero advantage
        │   ├── EnvInitFailed       image build or sandbox start failed
        │   ├── SandboxUnavailable  the backend cannot give a sandbox right now
        │   ├── ResetFailed         the environment could not be reset for an episode
        │   └── RewardFailed        the tests/reward script could not produce a reward
        │       └── SandboxUnscorable   scoring's own set-up cannot run in the sandbox the agent
        │                               left (run_tests scores it a failure, never raises it)
        └── TransientError          → the whole group is dropped (within a global ratio)
            ├── ExecTimeout         a tool call ran past its timeout
            ├── SandboxDied         the sandbox vanished mid-episode
            └── NetworkError        a slow or failing network call (engine, API)
"""

from __future__ import annotations

__all__ = [
    "ArtifactError",
    "ConfigError",
    "EngineUnavailable",
    "EnvInitFailed",
    "EpisodeError",
    "ExecTimeout",
    "ModelError",
    "NetworkError",
    "ResetFailed",
    "RewardFailed",
    "SandboxDied",
    "SandboxUnscorable",
    "UnsupportedModel",
    "SandboxUnavailable",
    "SchemaMismatch",
    "TaskFormatError",
    "TermrlError",
    "TransientError",
    "UnrecoverableError",
    "failure_type",
]


class TermrlError(Exception):
    """Base of every error termrl raises on purpose."""


class ConfigError(TermrlError):
    """A configuration is invalid. Carries every problem found, not just the first."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in self.problems))


class ArtifactError(TermrlError):
    """An artifact file cannot be read or written."""


class SchemaMismatch(ArtifactError):
    """An artifact's columns or schema version do not match what this code expects."""


class TaskFormatError(TermrlError):
    """A task folder is not a valid Terminal-Bench task. The message is one line."""

    def __init__(self, folder: str, problem: str):
        self.folder = folder
        self.problem = problem
        super().__init__(f"{folder}: {problem}")


class ModelError(TermrlError):
    """A model cannot be found, converted or loaded."""


class EngineUnavailable(ModelError):
    """An inference engine cannot run on this machine (missing package or device)."""


class UnsupportedModel(ModelError):
    """An engine cannot serve this model's architecture (another engine may)."""


class EpisodeError(TermrlError):
    """A failure inside one episode; its class decides how mask & filter treat it."""

    def __init__(self, message: str = "", *, log_tail: str = ""):
        self.log_tail = log_tail
        super().__init__(message + (f"\n--- log tail ---\n{log_tail}" if log_tail else ""))


class UnrecoverableError(EpisodeError):
    """The episode cannot produce a sample: keep a zero-mask placeholder."""


class EnvInitFailed(UnrecoverableError):
    """Building the image or starting the sandbox failed."""


class SandboxUnavailable(UnrecoverableError):
    """The sandbox backend cannot provide a sandbox (not installed, out of capacity)."""


class ResetFailed(UnrecoverableError):
    """The environment could not be brought to the task's start state."""


class RewardFailed(UnrecoverableError):
    """The reward could not be computed (tests crashed, reward file unreadable)."""


class SandboxUnscorable(RewardFailed):
    """Scoring's own set-up (making /tests and /logs/verifier, the test kit's mount points) failed in
    the sandbox as the agent left it: its bash, rm or mkdir gone, a library they load moved.

    The sandbox ran bash and rm when it was handed out (``remove_leftovers``) and a dead sandbox
    raises ``SandboxDied``, so the agent broke it. ``run_tests`` turns this into a failed outcome
    with reward 0 (``TestOutcome.unscorable``): masking it would let a policy escape a failing
    score by breaking its sandbox. Anywhere else it is the RewardFailed it derives from.
    """


class TransientError(EpisodeError):
    """A failure that may not recur: the episode's whole group is dropped."""


class ExecTimeout(TransientError):
    """A command ran past its timeout."""


class SandboxDied(TransientError):
    """The sandbox disappeared while the episode was running."""


class NetworkError(TransientError):
    """A network call (engine server, API model) failed or was too slow."""


def failure_type(error: BaseException) -> str:
    """The name stored in the trajectories' ``failure_type`` column for ``error``."""
    return type(error).__name__ if isinstance(error, TermrlError) else "UnexpectedError"
