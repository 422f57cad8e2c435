"""`python -m components.synthesize ...` runs the stage's command."""

from components.synthesize.cli import synthesize

synthesize()
