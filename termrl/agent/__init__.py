"""The terminal agent shared by rollout and eval: tools, call format, episodes.

``termrl.agent.episode.run_episode`` is the one harness; ``toolcalls`` holds
the Hermes tool-call format; ``reference_cli`` is an HTTP-only agent CLI.
"""

__all__: list[str] = []
