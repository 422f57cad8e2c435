"""The LLM-judge panel: several models review each instruction–test pair for false positives.

Each judge gets the same rubric (``RUBRIC``) and the task's instruction,
solution and test files, and must answer with one JSON object:

    {"verdict": "ok" | "flag", "flags": ["incomplete-tests", ...], "rationale": "..."}

Judges are asked through litellm (``termrl.llm.LiteLLMEngine``), so any
hosted model or OpenAI-compatible server works; the ``local`` judge is the
policy model behind termrl's ModelProxy. A judge that fails — endpoint down,
HTTP error, timeout, a reply that is not the JSON above — is recorded as
``verdict="error"`` with the reason and never stops the stage. The panel's
decision aggregates the judges that answered (``aggregate``): ``any-flag`` or
``majority``; no answer at all makes the check an ``error``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from components.verify.config import JudgeEndpoint
from components.verify.outcomes import CheckOutcome
from termrl.artifacts.tasks import Task, TaskFile
from termrl.llm.engine import SamplingParams
from termrl.llm.litellm_engine import LiteLLMEngine

__all__ = [
    "FLAGS",
    "RUBRIC",
    "JudgePanel",
    "JudgeVerdict",
    "aggregate",
    "judge_messages",
    "parse_verdict",
]

FLAGS = ("incomplete-tests", "shortcut", "ambiguous-instruction", "wrong-tests")

RUBRIC = """You review tasks used to train terminal agents with reinforcement learning. An agent \
gets the INSTRUCTION, works in a Linux sandbox, and is rewarded when the TESTS pass. A task is \
a false positive when the tests can pass although the agent did not do what was asked.

Answer three questions about the task below:
1. Do the tests check everything the instruction asks for? (if not: flag "incomplete-tests")
2. Could the tests pass without doing the task, e.g. by writing an expected file by hand, \
doing nothing, or exploiting how the tests read the result? (if so: flag "shortcut")
3. Is the instruction ambiguous, so that a correct solution could fail the tests? \
(if so: flag "ambiguous-instruction"; tests that contradict the instruction: "wrong-tests")

Reply with exactly one JSON object and nothing else:
{"verdict": "ok" or "flag", "flags": [zero or more of "incomplete-tests", "shortcut", \
"ambiguous-instruction", "wrong-tests"], "rationale": "one or two sentences"}
Use "flag" when any flag applies, "ok" otherwise."""


@dataclass
class JudgeVerdict:
    """One judge's answer (or why it gave none), as stored in the verdicts' ``judges`` column."""

    model: str
    verdict: str  # ok | flag | error
    flags: list[str] = field(default_factory=list)
    rationale: str = ""
    error: str = ""
    seconds: float = 0.0

    def to_row(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "verdict": self.verdict,
            "flags": self.flags,
            "rationale": self.rationale,
            "error": self.error,
        }


def _text_files(files: list[TaskFile], budget: int) -> str:
    parts = []
    for f in sorted(files, key=lambda f: f.path):
        try:
            text = f.data.decode()
        except UnicodeDecodeError:
            parts.append(f"--- {f.path} (binary, {len(f.data)} bytes, not shown) ---")
            continue
        if len(text) > budget:
            text = text[:budget] + f"\n[... cut: {len(f.data) - budget} more bytes ...]"
        budget = max(budget - len(text), 200)
        parts.append(f"--- {f.path} ---\n{text}")
    return "\n".join(parts) or "(none)"


def judge_messages(task: Task, max_test_chars: int) -> list[dict[str, str]]:
    """The chat the judges see: the rubric, then the task."""
    solution = task.solution_command or "(steps in solution.yaml)"
    body = (
        f"INSTRUCTION:\n{task.instruction.strip()}\n\n"
        f"TEST COMMAND: {task.test_command}\nTESTS:\n{_text_files(task.test_files, max_test_chars)}\n\n"
        f"REFERENCE SOLUTION (run as `{solution}`):\n{_text_files(task.solution_files, max_test_chars // 2)}"
    )
    return [{"role": "system", "content": RUBRIC}, {"role": "user", "content": body}]


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_verdict(text: str) -> tuple[str, list[str], str]:
    """(verdict, flags, rationale) from a judge's reply; ``ValueError`` if it is not one."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for start in (i for i, c in enumerate(candidate) if c == "{"):
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and "verdict" in value:
                return _checked(value)
    raise ValueError(f"no JSON verdict object in the reply: {text[:200]!r}")


def _checked(value: dict[str, Any]) -> tuple[str, list[str], str]:
    verdict = str(value.get("verdict", "")).strip().lower()
    if verdict not in ("ok", "flag"):
        raise ValueError(f"verdict must be 'ok' or 'flag', not {value.get('verdict')!r}")
    flags = value.get("flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise ValueError(f"flags must be a list of strings, not {flags!r}")
    rationale = value.get("rationale", "")
    if not isinstance(rationale, str):
        raise ValueError(f"rationale must be a string, not {rationale!r}")
    return verdict, [f.strip() for f in flags if f.strip()], rationale.strip()


def aggregate(verdicts: list[JudgeVerdict], rule: str) -> CheckOutcome:
    """The panel's decision (``any-flag`` or ``majority`` of the judges that answered)."""
    answered = [v for v in verdicts if v.verdict != "error"]
    flagged = [v for v in answered if v.verdict == "flag"]
    detail = {"judges": [v.to_row() for v in verdicts], "aggregation": rule}
    seconds = max((v.seconds for v in verdicts), default=0.0)
    if not verdicts:
        return CheckOutcome("judges", "skipped", "no judges configured", detail=detail)
    if not answered:
        errors = "; ".join(f"{v.model}: {v.error}" for v in verdicts)
        return CheckOutcome(
            "judges", "error", f"no judge answered ({errors})", seconds, detail=detail
        )
    flagging = len(flagged) > len(answered) / 2 if rule == "majority" else bool(flagged)
    tally = f"{len(flagged)} of {len(answered)} answering judges flagged"
    if flagging:
        flags = sorted({f for v in flagged for f in v.flags})
        why = f"{tally} ({', '.join(flags) or 'no flag named'}): {flagged[0].rationale}"
        return CheckOutcome("judges", "fail", why, seconds, detail=detail)
    return CheckOutcome("judges", "pass", tally, seconds, detail=detail)


class JudgePanel:
    """Asks every judge about a task, at most ``concurrency`` requests in flight overall."""

    def __init__(
        self,
        endpoints: list[JudgeEndpoint],
        *,
        rule: str,
        timeout_sec: float,
        max_tokens: int,
        max_test_chars: int,
        concurrency: int,
    ):
        self.endpoints = endpoints
        self.rule = rule
        self.max_test_chars = max_test_chars
        self.params = SamplingParams(max_new_tokens=max_tokens, temperature=0.0, stop=())
        self._slots = asyncio.Semaphore(concurrency)
        self._engines = [
            LiteLLMEngine(
                e.model,
                api_base=e.api_base,
                # OpenAI-compatible local servers ignore the key but litellm wants one;
                # hosted models read theirs from the provider's environment variable.
                api_key="termrl-verify" if e.api_base else None,
                timeout_sec=timeout_sec,
                request_token_ids=False,
            )
            for e in endpoints
        ]
        import litellm  # after the engines: they set litellm's offline options first

        # A judge error is recorded in the verdicts; litellm's help banner on every one is noise.
        litellm.suppress_debug_info = True

    async def review(self, task: Task) -> CheckOutcome:
        """Every judge's verdict on ``task`` and the panel's decision."""
        messages = judge_messages(task, self.max_test_chars)
        verdicts = await asyncio.gather(
            *(
                self._ask(endpoint, engine, messages)
                for endpoint, engine in zip(self.endpoints, self._engines, strict=True)
            )
        )
        return aggregate(list(verdicts), self.rule)

    async def _ask(
        self, endpoint: JudgeEndpoint, engine: LiteLLMEngine, messages: list[dict[str, str]]
    ) -> JudgeVerdict:
        started = time.monotonic()
        async with self._slots:
            try:
                generation = (await engine.generate([messages], self.params))[0]
            # A judge error is recorded, never fatal: whatever the endpoint or litellm
            # raises (NetworkError, ModelError, a provider's own exception types).
            except Exception as exc:  # noqa: BLE001
                return JudgeVerdict(
                    endpoint.spec,
                    "error",
                    error=f"{type(exc).__name__}: {exc}"[:2000],
                    seconds=time.monotonic() - started,
                )
        seconds = time.monotonic() - started
        try:
            verdict, flags, rationale = parse_verdict(generation.text)
        except ValueError as exc:
            return JudgeVerdict(
                endpoint.spec, "error", error=f"malformed verdict: {exc}", seconds=seconds
            )
        return JudgeVerdict(endpoint.spec, verdict, flags, rationale, seconds=seconds)
