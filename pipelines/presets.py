"""The pipelines' named presets: every value that deliberately differs from a stage config's default.

A stage config (``components/<stage>/config.py``) is the one place a setting's
default lives. A pipeline parameter that sets a stage field takes that default
(``pipelines.parameters``), unless its pipeline's preset names it here, with
the reason. ``tests/pipelines/test_parameter_defaults.py`` fails on any other
difference, and on a preset value equal to the default it claims to differ from.

    CPU_CURRICULUM   the curriculum as ``termrl run`` runs it: SmolLM2-135M on a small CPU-only machine
    NIGHTLY_EVAL     the scheduled eval of one policy on a small fixed task set
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components.rollout.config import RolloutConfig

__all__ = ["CPU_CURRICULUM", "NIGHTLY_EVAL", "Chosen", "Preset"]


@dataclass(frozen=True)
class Chosen:
    """One parameter's value in a preset, and why it differs from the stage's default."""

    value: Any
    why: str


@dataclass(frozen=True)
class Preset:
    """Parameter values for one context (``name``: how the docs and errors call it)."""

    name: str
    context: str
    values: Mapping[str, Chosen]


SHORT_EPISODE_TURNS = 3
"""Turns of the curriculum's rollout and eval episodes (``max_turns``, ``eval_max_turns``)."""

CPU_CURRICULUM = Preset(
    "cpu-curriculum",
    "the curriculum on a small CPU-only machine (SmolLM2-135M, `termrl run`): short episodes, "
    "few easy training tasks (easy and medium held-out ones), full fine-tuning; raise the sizes on a cluster",
    {
        "synth_count": Chosen(
            72,
            "at 48 training tasks the final policy passed 60 % of the held-out tasks and the RL "
            "rounds added 4 points over imitation alone; at 72, 76 % and 8 points (more distinct "
            "tasks per family, in both the imitation and the RL pools)",
        ),
        "synth_families": Chosen(
            "text-processing,files-permissions,archives,log-analysis,csv-json,git,python-bugfix,"
            "shell-scripting,service,environment-repair,sql-sqlite,checksums,find-xargs,"
            "config-edit,diff-patch,date-time,users-groups,compression,regex-rename,disk-usage,"
            "shell-env,process-control,set-operations,text-utils",
            "every family but scheduled-jobs (the held-out families are left out of training by "
            "heldout_families); verify admits scheduled-jobs again (a cron job is file state, not "
            "a process), and it joins once measured in a run. Adding text-utils cost nothing "
            "measurable: its final policy passed 72 % of its run's easy held-out tasks and 75 % "
            "of the previous run's (60 % and 67 % for the previous policy), 68 % of 120 fresh "
            "easy tasks of the other families (72 %), and 3 of 24 text-utils tasks (none)",
        ),
        "synth_difficulties": Chosen(
            "easy",
            "easy tasks are where this policy earns its first reward. Trained on easy and medium "
            "tasks of 20 families (1.8 tasks per family and difficulty at synth_count 72), it "
            "passed 26 % of the easy held-out tasks after phase 1 and no medium one (a run "
            "of 11 families on easy tasks only: 80 % easy, bce867f); medium tasks are measured (heldout_difficulties) "
            "and can be trained with easy,medium and a larger synth_count",
        ),
        "heldout_count": Chosen(
            48,
            "two slices of the training families' held-out tasks, easy and medium, of 24 tasks "
            "each (one or two per family and difficulty): four policies are evaluated on them per "
            "run, so each slice is as large as a CPU run affords",
        ),
        "heldout_seed": Chosen(
            1000,
            "other seeds than the training tasks' (synth_seed), so no held-out task is trained on",
        ),
        "heldout_difficulties": Chosen(
            "easy,medium",
            "the difficulties the policies are trained on, each reported as its own slice",
        ),
        "heldout_families": Chosen(
            "config-edit,find-xargs,users-groups",
            "three families never trained on measure how far learning reaches (DESIGN.md: Reach). "
            "Each is solved with tools the training families use (sed and grep, as in "
            "text-processing; find, wc and xargs, as in files-permissions and disk-usage; awk, "
            "sort and tr on flat files, as in log-analysis and set-operations) but in situations "
            "no training template has: ini/env/yaml edits, find pipelines over sizes and ages, "
            "passwd and group files. A family with a tool of its own (checksums: sha256sum; "
            "date-time: date; sql-sqlite: sqlite3) would measure the tool, not the reach",
        ),
        "heldout_family_count": Chosen(
            18,
            "three tasks per left-out family and difficulty: at least 12 after verification, so "
            "the reach slice has an interval narrower than the two tasks of earlier runs (a 95 % "
            "interval of about ±25 points rather than ±50)",
        ),
        "verify_repeats": Chosen(
            1,
            "the procedural families are deterministic; every repeat runs the ground truth and the "
            "no-op again in fresh sandboxes, tripling verify's time at the default 3",
        ),
        "heldout_verify_require": Chosen(
            "flakiness,ground_truth,noop",
            "the held-out tasks are measured on, never trained on: a task whose solution passes "
            "and whose no-op fails measures a policy; the two probes (ablation, state replay: a "
            "sandbox per probed step) took 58 % of the held-out verify's sandbox time (27 min)",
        ),
        "verify_judges": Chosen(
            "",
            "no judge: the only local judge is the 135M policy itself, judges are not among the "
            "checks a task must pass (VerifyConfig.require), and each costs a model call per task",
        ),
        "imitation_learning_rate": Chosen(
            1e-4,
            "full fine-tuning at 1e-4 on easy demonstrations takes the base policy from none of the "
            "held-out tasks to half of the easy ones (DESIGN.md: Models); it was first measured "
            "with three epochs over one phrasing, as many steps as one epoch over each task's "
            "three phrasings (imitation_epochs says why three)",
        ),
        "imitation_epochs": Chosen(
            3,
            "each pass over the imitation pool's demonstrations (30 steps, ~3 min on 2 cores) "
            "gained easy held-out tasks: 9 of 24 after one epoch, 12 after two, 14 after three; "
            "at three the run's final policy passed 16 (14 at two), the RL rounds starting "
            "from there",
        ),
        "anchoring": Chosen(
            "parallel",
            "phase 1 rolls out on tasks the policy was never shown: groups that start inside their "
            "demonstrations reach a success even where the policy alone earns none",
        ),
        "groups": Chosen(
            16,
            "this policy's success on a task is close to all or nothing: with 8 groups, phase 1's "
            "rollout had no group with differing rewards and so no RL loss",
        ),
        "redundancy": Chosen(
            0,
            "a spare group costs a group of CPU episodes, and on one machine no group is slower "
            "than the others for a reason a spare would hide (a straggling node)",
        ),
        "max_turns": Chosen(
            SHORT_EPISODE_TURNS,
            "a demonstration is one bash call, then done: three turns leave room for a look and a "
            "retry, and decoding is what a CPU run spends its time on (~35-45 tok/s batched)",
        ),
        "max_new_tokens": Chosen(
            128, "a turn is one short shell command in a tool call; decoding is the run's cost"
        ),
        "rollout_temperature": Chosen(
            0.7,
            "at 1.0 the imitated policy solved 6 % of unseen training tasks, at 0.7 16 %: more "
            "groups with a success to learn from (phase 2 samples at the default 1.0: after phase "
            "1, at 0.7, 1 of 16 groups had differing rewards, at 1.0 8 of 16)",
        ),
        "finetune": Chosen(
            "full",
            "LoRA is no faster than full fine-tuning on CPU (it saves memory: 6.0 vs 7.6 GB) and "
            "the imitation recipe was measured with full fine-tuning",
        ),
        "learning_rate": Chosen(
            1e-5, "the RL rounds refine the imitated policy: a tenth of the imitation step's rate"
        ),
        "eval_max_turns": Chosen(
            SHORT_EPISODE_TURNS, "each policy is measured at the episode length it was trained for"
        ),
        "eval_concurrency": Chosen(
            16,
            "episodes decode in one batch: ~10 tok/s for a single stream on this CPU, ~35-45 at "
            "batch 8, ~75-85 at 32 (DESIGN.md: Models); the held-out set is 66 tasks, so 16 at "
            "once keeps each of the four evals to about four batches",
        ),
    },
)

NIGHTLY_EVAL = Preset(
    "nightly-eval",
    "the scheduled eval: one policy, on a small fixed set of freshly verified tasks, every night",
    {
        "task_count": Chosen(
            12, "the set is synthesized and verified again every night before the eval: kept small"
        ),
        "task_seed": Chosen(
            1000,
            "the curriculum's held-out seed: the nightly measures on tasks no curriculum trains on, "
            "and on the same tasks every night",
        ),
        "verify_repeats": Chosen(1, "the procedural families are deterministic (CPU_CURRICULUM)"),
        "verify_judges": Chosen(
            "", "no judge: the tasks are procedural and verified by their ground truth and no-op"
        ),
        "max_turns": Chosen(
            RolloutConfig.max_turns, "the episode length the policy is trained with (RolloutConfig)"
        ),
        "max_new_tokens": Chosen(
            RolloutConfig.max_new_tokens,
            "the per-turn budget the policy is trained with (RolloutConfig)",
        ),
    },
)
