"""``python -m components.health``: the same command as ``termrl stage health``."""

from components.health.cli import health

if __name__ == "__main__":
    health(prog_name="python -m components.health")
