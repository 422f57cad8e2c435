"""``python -m components.demonstrate``: the same command as ``termrl stage demonstrate``."""

from components.demonstrate.cli import demonstrate

if __name__ == "__main__":
    demonstrate(prog_name="python -m components.demonstrate")
