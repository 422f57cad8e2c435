"""The verify stage: the admission gate that keeps false-positive tasks out of training.

cli.py         the ``verify`` click command (``python -m components.verify``)
config.py      VerifyConfig: every knob with its default and why
stage.py       main(config): tasks artifact -> verdicts + admitted tasks
runner.py      all tasks in parallel under a sandbox bound; per-task check flow
checks.py      ground truth, no-op, flakiness, solution ablation, state replay
ablation.py    a solution script split into top-level steps
judges.py      the LLM-judge panel (litellm; structured JSON verdicts)
admission.py   required checks -> admitted/reason; verdict rows; the summary
outcomes.py    CheckOutcome: what one check found
"""

__all__: list[str] = []
