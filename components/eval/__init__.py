"""The eval stage: Terminal-Bench-style evaluation with the training agent.

cli.py       the ``eval`` and ``report`` click commands (``python -m components.eval``)
config.py    EvalConfig: every knob with its default and why
stage.py     main(config): validate → load tasks → run trials → write results → report
trials.py    tasks × K trials in sandboxes (agent phase, tests, one row each)
agents.py    policy (termrl.agent.run_episode), oracle and nop agents
resume.py    finished trials written at once (<out>.parts/), a rerun skips them
taxonomy.py  failure-mode rules and tool-call statistics
passk.py     the unbiased pass@k estimator
stats.py     Wilson intervals of pass rates, paired differences between policies
summary.py   accuracy, pass@k, family/difficulty/task tables, KFP metric names
compare.py   the table of several policies on the same tasks (vs the first, per family)
report.py    the self-contained HTML report (one run or a comparison)
"""

__all__: list[str] = []
