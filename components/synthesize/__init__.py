"""The synthesize stage: reproducible terminal tasks from procedural families and, optionally, an LLM.

cli.py       the `synthesize` click command (`python -m components.synthesize`)
config.py    SynthesizeConfig, every knob with its default
stage.py     main(config): validate → generate → LLM → write → summary
generate.py  the seeded plan over family x difficulty; make_task(family, difficulty, seed)
families/    one module per task family, registered in families.FAMILIES
draft.py     Draft → Task: Dockerfile on termrl/base:bookworm, solve.sh, tests/test.sh
perturb.py   deliberate environment perturbations (tool removed, dead pip index, ...)
dedup.py     near-duplicate instructions by shingled Jaccard similarity
llm.py       tasks written by any litellm model, parsed and validated
report.py    the run's counts and the printed summary table
"""
