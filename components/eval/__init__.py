"""The eval stage: Terminal-Bench-style evaluation with the training agent.

    cli.py       the ``eval`` and ``report`` click commands (``python -m components.eval``)
    config.py    EvalConfig: every knob with its default and why
    stage.py     main(config): validate → load tasks → run trials → write results → report
    trials.py    tasks × K trials in sandboxes (agent phase, tests, one row each)
    agents.py    policy (termrl.agent.run_episode), oracle and nop agents
    taxonomy.py  failure-mode rules and tool-call statistics
    passk.py     the unbiased pass@k estimator
    summary.py   accuracy, pass@k, family/difficulty/task tables, KFP metric names
    report.py    the self-contained HTML report (one run or a comparison)
"""

__all__: list[str] = []
