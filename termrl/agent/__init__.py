"""The terminal agent shared by rollout and eval: episodes, demonstrations, a reference CLI.

``termrl.agent.loop.run_episode`` is the one harness (its result: ``AgentEpisode``); the tools and the
Hermes tool-call format it speaks are ``termrl.llm.toolcalls`` (the ModelProxy
parses them too); ``reference_cli`` is an HTTP-only agent CLI.
"""

__all__: list[str] = []
