"""The health stage: crash precursors judged between curriculum iterations.

history.py    IterationMetrics: one iteration's train and rollout metrics, as judged
detectors.py  one pure function per precursor the seed watched, thresholds in ``Thresholds``
verdict.py    verdict(history, thresholds): healthy, mitigate(settings) or rollback(target)
report.py     the JSON report: the verdict, its reasons, the options in force, the history
config.py     HealthConfig: every knob with its default and why
stage.py      main(config): read the iterations' artifacts → judge → write the report
cli.py        ``termrl stage health`` / ``python -m components.health``
component.py  the KFP component
"""

__all__: list[str] = []
