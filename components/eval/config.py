"""The eval stage's one configuration: every knob, its default and why.

``EvalConfig`` is filled by the command line (``components.eval.cli``) or by
the KFP component; ``validate()`` reports every problem at once, before any
sandbox starts. Values derived from other values live in methods here
(``is_api_model``, ``label``, ``parts_dir``), nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from termrl.agent.loop import AgentConfig
from termrl.errors import ConfigError
from termrl.llm.engines import policy_engine_problems
from termrl.sandbox.settings import SandboxSettings

__all__ = ["AGENTS", "API_PREFIX", "EvalConfig"]

AGENTS = ("policy", "oracle", "nop")
API_PREFIX = "litellm:"


@dataclass
class EvalConfig:
    """Everything the eval stage needs. Inputs and outputs first, then the agent, then limits."""

    tasks: str = ""
    """A tasks artifact (Parquet), or a folder of Terminal-Bench task folders (Harbor or
    legacy layout, or one task folder) — imported on the fly, nothing written back."""
    out: str = ""
    """The eval-results artifact to write (Parquet, one row per task and trial)."""
    report: str | None = None
    """The self-contained HTML report to write; None writes none."""
    agent: str = "policy"
    """``policy`` (the training agent driving ``model``), ``oracle`` (runs each task's
    reference solution: must score 100 %) or ``nop`` (does nothing: must score 0 %).
    The last two check the harness and the tasks, not a model."""
    model: str | None = None
    """For the policy agent: a Hugging Face model folder (transformers engine) or
    ``litellm:MODEL`` (any API or OpenAI-compatible endpoint through litellm)."""
    api_base: str | None = None
    """Endpoint for a ``litellm:`` model (e.g. a vLLM server); None uses litellm's default."""
    trials: int = 1
    """Independent trials per task; pass@k is reported for k up to this."""
    task_ids: list[str] = field(default_factory=list)
    """Evaluate only these task ids (empty: all tasks)."""
    concurrency: int = 2
    """Sandboxes alive at once. On a machine with a core or two a small number keeps command
    timings honest; raise it on a cluster."""
    build_concurrency: int = 1
    """Image builds at once before the trials start (each task's image is built once)."""
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    """Sandbox backend and its options (``termrl.sandbox.settings``); flat, as ``sandbox_backend``,
    ``sandbox_namespace``, ... on the command line, in ``--set`` and in KFP parameters."""
    max_turns: int = AgentConfig.max_turns
    """Assistant turns before an episode stops with ``max-turns`` (the agent's own limit)."""
    max_new_tokens: int = AgentConfig.max_new_tokens
    """Response budget per turn (the agent's own)."""
    context_window: int | None = None
    """Tokens of prompt + response an episode may use; None takes the engine's."""
    temperature: float = 0.0
    """Decoding temperature of the policy agent. 0 is greedy: each step takes the most likely
    token, so two policies are compared on their best guess, not on sampling noise, and a
    rerun decodes the same (up to the numerics of how requests were batched). Trials of one
    task then repeat one another: keep ``trials`` at 1, or raise the temperature (and set a
    seed) to measure pass@k."""
    seed: int | None = None
    """Above temperature 0: None samples fresh randomness; a seed makes trial t sample with
    ``seed + t`` (reproducible, and the same draws for every policy compared). Greedy decoding
    needs none."""
    prompt_style: str = AgentConfig.prompt_style
    """The agent's system prompt (``termrl.llm.toolcalls.PROMPTS``): the one the policy was
    trained with (rollout and demonstrations use the same knob)."""
    max_batch_size: int = 32
    """Largest batch the local engine generates at once (concurrent episodes merge)."""
    engine: str = "auto"
    """What serves the policy's turns, the same knob as rollout's: ``continuous`` (the CPU engine;
    each turn reuses the KV cache of the trial's earlier turns), ``batching`` (whole-batch CPU
    calls), ``vllm``, or ``auto``: vllm where it is installed and a GPU is visible, else
    continuous (``termrl.llm.engines.POLICY_ENGINES``)."""
    weights_dtype: str = "float32"
    """The decode weights (``termrl.llm.engines.WEIGHTS_DTYPES``, the same knob as rollout's). float32 by default so that a measurement repeats: two greedy evals of
    one policy on 66 tasks ran the same 66 trials in float32 and differed in 18 with bfloat16
    weights (bf16 rounds the running batch's tiny float differences into other tokens). bf16
    took 26 % less time then; since the decode step's matrices are packed for oneDNN, its
    step, with the attention kernel, is 17-23 % faster than float32's at batch 8 to 32
    (docs/experiments.md). ``auto`` (bfloat16
    where the CPU has bf16 units) trades repeatability for that."""
    run_id: str | None = None
    """Name of this run in the results and the report; None derives one from agent and model."""
    progress: bool = True
    """Show a progress bar over trials."""
    parts: str = ""
    """The resume folder; '' is beside ``out`` (``out`` + ``.parts``). The component puts it where
    a retried pod finds it (``components.progress``)."""

    def parts_dir(self) -> Path:
        """Sidecar folder of the finished trials' rows, the resume state (``components.eval.resume``)."""
        return (
            Path(self.parts)
            if self.parts
            else Path(self.out).with_name(Path(self.out).name + ".parts")
        )

    def is_api_model(self) -> bool:
        return bool(self.model) and str(self.model).startswith(API_PREFIX)

    def label(self) -> str:
        """How this run is named in the results and the report."""
        if self.run_id:
            return self.run_id
        if self.agent != "policy":
            return self.agent
        model = str(self.model or "")
        return model if self.is_api_model() else f"policy:{Path(model).name}"

    def validate(self) -> None:
        """Check everything that can be checked before work starts; raise one ConfigError."""
        problems: list[str] = []
        if not self.tasks:
            problems.append("tasks: give a tasks artifact (Parquet) or a folder of task folders")
        elif not Path(self.tasks).exists():
            problems.append(f"tasks: {self.tasks} does not exist")
        if not self.out:
            problems.append("out: give the eval-results file to write")
        problems += policy_engine_problems(self.engine, self.weights_dtype)
        if self.out and Path(self.out).is_dir():
            problems.append(f"out: {self.out} is a folder, expected a Parquet file path")
        if self.report is not None and Path(self.report).is_dir():
            problems.append(f"report: {self.report} is a folder, expected an HTML file path")
        if self.agent not in AGENTS:
            problems.append(f"agent must be one of {', '.join(AGENTS)}, not {self.agent!r}")
        if self.agent == "policy":
            if not self.model:
                problems.append("model: the policy agent needs a model folder or litellm:MODEL")
            elif self.is_api_model():
                if not str(self.model)[len(API_PREFIX) :]:
                    problems.append("model: litellm: needs a model name after the prefix")
            elif not Path(self.model).is_dir():
                problems.append(
                    f"model: {self.model} is not a folder (termrl never downloads weights)"
                )
        elif self.model:
            problems.append(f"model: the {self.agent} agent runs no model; leave --model out")
        problems += self.sandbox.problems()
        for name in (
            "trials",
            "concurrency",
            "build_concurrency",
            "max_turns",
            "max_new_tokens",
            "max_batch_size",
        ):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.context_window is not None and self.context_window <= self.max_new_tokens:
            problems.append("context_window must be larger than max_new_tokens")
        if self.temperature < 0:
            problems.append(f"temperature must be >= 0, not {self.temperature}")
        if problems:
            raise ConfigError(problems)
