"""termrl: train LLM agents that work in terminals with agentic RL."""

__version__ = "0.1.0"
