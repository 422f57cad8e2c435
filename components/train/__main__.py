"""``python -m components.train``: the same command as ``termrl stage train``."""

from components.train.cli import train

if __name__ == "__main__":
    train(prog_name="python -m components.train")
