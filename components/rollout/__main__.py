"""``python -m components.rollout``: the same command as ``termrl stage rollout``."""

from components.rollout.cli import rollout

if __name__ == "__main__":
    rollout(prog_name="python -m components.rollout")
