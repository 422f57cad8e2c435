"""The `termrl` command line. Each command is a thin call into the library."""

from __future__ import annotations

import click

from termrl import __version__
from termrl.sandbox.commands import sandbox
from termrl.taskfolders.commands import tasks


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="termrl")
def main() -> None:
    """Train terminal agents with agentic RL: tasks, sandboxes, rollouts, IPA training, eval."""


main.add_command(tasks)
main.add_command(sandbox)

if __name__ == "__main__":
    main()
