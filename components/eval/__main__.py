"""``python -m components.eval``: the same command as ``termrl stage eval``."""

from components.eval.cli import eval_command

if __name__ == "__main__":
    eval_command(prog_name="python -m components.eval")
