"""The `termrl` command line: the root command group. Each command is a thin call into its layer.

It gathers the library's commands (``termrl tasks``, ``sandbox``, ``model``,
``tbcompat``), the stage commands (``termrl stage <name>`` = ``python -m
components.<name>``) and the pipeline commands. It lives in ``pipelines``, the
top layer, because it imports all three: imports flow pipelines → components →
termrl, never back (``tests/test_layers.py``).
"""

from __future__ import annotations

import click

from components.demonstrate.cli import demonstrate
from components.eval.cli import eval_command, report_command
from components.health.cli import health
from components.rollout.cli import rollout
from components.synthesize.cli import synthesize
from components.train.cli import train
from components.verify.cli import verify
from pipelines.cluster_cli import cluster, schedule
from pipelines.images_cli import images_group
from pipelines.pipeline_cli import compile_command, rerun, run
from pipelines.tbcompat_cli import tbcompat
from termrl import __version__
from termrl.llm.cli import model
from termrl.sandbox.cli import sandbox
from termrl.taskfolders.cli import tasks


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="termrl")
def main() -> None:
    """Train terminal agents with agentic RL: tasks, sandboxes, rollouts, IPA training, eval."""


main.add_command(tasks)
main.add_command(sandbox)
main.add_command(model)
main.add_command(tbcompat)


@main.group()
def stage() -> None:
    """Run one pipeline stage by hand (the same code the pipeline runs)."""


stage.add_command(synthesize)
stage.add_command(verify)
stage.add_command(demonstrate)
stage.add_command(rollout)
stage.add_command(train)
stage.add_command(eval_command)
stage.add_command(health)
main.add_command(report_command)
main.add_command(run)
main.add_command(compile_command)
main.add_command(rerun)
main.add_command(schedule)
main.add_command(cluster)
main.add_command(images_group)

if __name__ == "__main__":
    main()
