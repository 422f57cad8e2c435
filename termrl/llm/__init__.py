"""Inference: engines behind one interface, the batching front, models, the tool-call format, the ModelProxy.

Import the submodules directly (``termrl.llm.hf_engine``, ``termrl.llm.proxy``,
...): this package does not import torch or aiohttp on its own.
"""

__all__: list[str] = []
