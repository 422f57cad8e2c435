"""``python -m components.verify``: the same command as ``termrl stage verify``."""

from components.verify.cli import verify

if __name__ == "__main__":
    verify(prog_name="python -m components.verify")
