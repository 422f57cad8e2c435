"""The train stage: IPA (chunk-level) policy optimisation on a trajectories artifact.

cli.py         the ``train`` click command (``python -m components.train``)
config.py      TrainConfig: every knob with its default and why
data.py        trajectories artifact -> episodes (token streams, chunk ids, μ, exclusions)
advantages.py  group advantages, chunk returns, modes, mismatch, normalisation weights
loss.py        the IPA loss, the token-level GRPO baseline, the imitation loss (pure functions)
modeling.py    policy loading (full / LoRA), FSDP2 sharding, per-token log-probs
prefix.py      the step's shared prompt prefix, run once without gradients
steps.py       the optimizer-step loop, metrics rows, checkpoint cadence
checkpoint.py  HF folder + optimizer/scheduler/RNG state; exact resume
trainer.py     train(config): set-up and the top-level flow
"""

__all__: list[str] = []
