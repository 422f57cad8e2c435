"""Step time of the IPA (chunk-level) objective vs token-level GRPO, side by side,
and of IPA with and without the shared prompt prefix.

The trainers are set up on the same synthetic trajectories (real Parquet, token
ids from the model's vocabulary, μ from the model itself; every episode starts
with the same ``--prefix-tokens`` "system prompt"), and their optimizer steps
are interleaved (IPA, token, IPA without prefix sharing, ...) so machine load
hits all alike. Prints the median and minimum step time of each, the ratio
IPA / token (target ≤ 1.05), the median of the per-step paired ratios, the
same ratio for the loss functions alone, and the step-time ratio with / without
prefix sharing (``share_prompt_prefix``).

    python bench/train.py                        # tiny model (built on the fly)
    python bench/train.py --model DIR --episodes 4 --chunks 8
    python bench/train.py --model ~/.cache/termrl/models/SmolLM2-135M-Instruct --chunks 1 --prefix-tokens 309
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import click
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from components.train.config import TrainConfig  # noqa: E402
from components.train.loss import ipa_loss, token_level_loss  # noqa: E402
from components.train.modeling import init_distributed  # noqa: E402
from components.train.trainer import set_up  # noqa: E402
from termrl.artifacts.trajectories import write_trajectories  # noqa: E402


def synthetic_trajectories(
    path: Path,
    model_dir: Path,
    episodes: int,
    chunks: int,
    tokens: int,
    seed: int,
    prefix_tokens: int = 0,
) -> None:
    """``episodes`` episodes in groups of 4 with alternating rewards; random prompt/response ids,
    every episode's first prompt starting with the same ``prefix_tokens`` ids."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    system = torch.randint(3, vocab, (prefix_tokens,), generator=g).tolist()
    rows = []
    for e in range(episodes):
        parts = [
            (
                torch.randint(3, vocab, (tokens // 2,), generator=g).tolist(),
                torch.randint(3, vocab, (tokens,), generator=g).tolist(),
            )
            for _ in range(chunks)
        ]
        parts[0] = (system + parts[0][0], parts[0][1])
        ids = [t for p, r in parts for t in p + r]
        with torch.no_grad():
            logp = model(torch.tensor([ids])).logits[0].log_softmax(-1)
        position, mu = 0, []
        for p, r in parts:
            position += len(p)
            mu.append([logp[position + i - 1, t].item() for i, t in enumerate(r)])
            position += len(r)
        for c, ((p, r), lp) in enumerate(zip(parts, mu, strict=True)):
            rows.append(
                {
                    "episode_id": f"e{e:03d}",
                    "group_id": f"g{e // 4}",
                    "task_id": "bench",
                    "policy_version": 0,
                    "chunk_index": c,
                    "prompt_ids": p,
                    "response_ids": r,
                    "response_logprobs": lp,
                    "reward": float(e % 2 == 0),
                    "success": e % 2 == 0,
                    "stop_reason": "done",
                    "masked": False,
                    "drop": False,
                    "placeholder": False,
                    "trainable": True,
                }
            )
    write_trajectories(path, rows)


def loss_only_ratio(tokens: int, chunks: int, repeats: int) -> tuple[float, float]:
    """Median seconds of forward+backward of each loss alone on [tokens] inputs."""
    g = torch.Generator().manual_seed(0)
    token_chunk = torch.sort(torch.randint(0, chunks, (tokens,), generator=g)).values
    args = dict(
        old_logp=-torch.rand(tokens, generator=g) * 3,
        token_chunk=token_chunk,
        advantages=torch.randn(chunks, generator=g),
        loss_mask=torch.rand(chunks, generator=g) > 0.1,
    )
    weights = torch.full((chunks,), 1.0 / chunks)
    times: dict[str, list[float]] = {"ipa": [], "token": []}
    for _ in range(repeats):
        for name, fn in (("ipa", ipa_loss), ("token", token_level_loss)):
            logp = (args["old_logp"] + 0.01 * torch.randn(tokens, generator=g)).requires_grad_()
            start = time.perf_counter()
            loss, _ = fn(
                logp,
                args["old_logp"],
                args["token_chunk"],
                args["advantages"],
                args["loss_mask"],
                normalisation=weights,
                eps_low=0.2,
                eps_high=0.2,
            )
            loss.backward()
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["ipa"]), statistics.median(times["token"])


@click.command()
@click.option(
    "--model",
    "model_dir",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="HF model folder (default: the tiny test model, built in a temp dir).",
)
@click.option("--episodes", default=8, show_default=True, help="Episodes per optimizer step.")
@click.option("--chunks", default=8, show_default=True, help="Chunks per episode.")
@click.option("--chunk-tokens", default=64, show_default=True, help="Response tokens per chunk.")
@click.option(
    "--prefix-tokens",
    default=256,
    show_default=True,
    help="Tokens every episode starts with (the shared system prompt).",
)
@click.option(
    "--steps", default=6, show_default=True, help="Measured steps per objective (after 1 warm-up)."
)
@click.option("--finetune", type=click.Choice(["lora", "full"]), default="lora", show_default=True)
@click.option(
    "--threads",
    type=int,
    default=1,
    show_default=True,
    help="torch threads. 1 by default: on a shared, oversubscribed CPU, OpenMP workers get "
    "descheduled and small element-wise ops stall for milliseconds, which drowns the "
    "difference being measured. 0 keeps torch's default.",
)
def main(
    model_dir: str | None,
    episodes: int,
    chunks: int,
    chunk_tokens: int,
    prefix_tokens: int,
    steps: int,
    finetune: str,
    threads: int,
) -> None:
    torch.manual_seed(0)
    if threads:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        if model_dir is None:
            from termrl.llm.models import build_tiny_model

            model_dir = str(build_tiny_model(tmp_path / "tiny", seed=0))
        traj = tmp_path / "bench.parquet"
        synthetic_trajectories(
            traj,
            Path(model_dir),
            episodes,
            chunks,
            chunk_tokens,
            seed=0,
            prefix_tokens=prefix_tokens,
        )
        runners = {}
        # name: (objective, share_prompt_prefix)
        for name, (objective, share) in {
            "ipa": ("ipa", True),
            "token": ("token", True),
            "ipa-unshared": ("ipa", False),
        }.items():
            config = TrainConfig(
                trajectories=str(traj),
                model=model_dir,
                out=str(tmp_path / name),
                mode="full",
                objective=objective,
                finetune=finetune,
                micro_batch_size=1,
                grad_accum_steps=episodes,
                epochs=steps + 1,
                progress=False,
                save_every_steps=0,
                share_prompt_prefix=share,
            )
            config.validate()
            derived = config.resolved()
            runners[name] = set_up(config, derived, init_distributed(derived["distributed"]))
        times: dict[str, list[float]] = {name: [] for name in runners}
        names = list(runners)
        for index in range(steps + 1):
            order = (
                names[index % len(names) :] + names[: index % len(names)]
            )  # rotate who goes first
            for name in order:
                start = time.perf_counter()
                runners[name].step(index)
                if index > 0:  # the first step of each pays one-off allocation costs
                    times[name].append(time.perf_counter() - start)
    ipa, token = statistics.median(times["ipa"]), statistics.median(times["token"])
    # the minimum is the least disturbed by other processes on a shared machine (timeit's advice)
    ipa_min, token_min = min(times["ipa"]), min(times["token"])
    paired = statistics.median(a / b for a, b in zip(times["ipa"], times["token"], strict=True))
    tokens = episodes * chunks * chunk_tokens
    loss_ipa, loss_token = loss_only_ratio(tokens, episodes * chunks, repeats=50)
    print(
        f"model {model_dir}  finetune {finetune}  threads {torch.get_num_threads()}  {episodes} episodes x {chunks} chunks x "
        f"{chunk_tokens} response tokens per step"
    )
    print(
        f"step time   ipa {ipa * 1000:8.1f} ms   token {token * 1000:8.1f} ms   "
        f"ratio ipa/token {ipa / token:.3f}  (medians; target <= 1.05)"
    )
    print(
        f"            ipa {ipa_min * 1000:8.1f} ms   token {token_min * 1000:8.1f} ms   "
        f"ratio ipa/token {ipa_min / token_min:.3f}  (minimums)   median of paired ratios {paired:.3f}"
    )
    print(
        f"loss only   ipa {loss_ipa * 1e6:8.1f} us   token {loss_token * 1e6:8.1f} us   "
        f"ratio ipa/token {loss_ipa / loss_token:.3f}"
    )
    shared, unshared = statistics.median(times["ipa"]), statistics.median(times["ipa-unshared"])
    paired = statistics.median(
        a / b for a, b in zip(times["ipa"], times["ipa-unshared"], strict=True)
    )
    print(
        f"prefix      shared {shared * 1000:8.1f} ms   full forward {unshared * 1000:8.1f} ms   "
        f"ratio shared/full {shared / unshared:.3f}  (medians; {prefix_tokens} shared tokens; "
        f"median of paired ratios {paired:.3f})"
    )


if __name__ == "__main__":
    main()
