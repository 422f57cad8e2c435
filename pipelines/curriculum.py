"""The curriculum pipeline (KFP v2): imitation, then positive-only RL, then full-signal RL.

    prepare-model ─┬──────────────────────────────────────────────────────────► eval · base ──────┐
    synthesize ─► verify ─► curate ─┬─ imitation pool ─► demonstrate ─► train (imitation) ─► eval ─┤
       (training families)          │                         │ expert trajectories (IL term)      │
                                    ├─ phase-1 pool ─► demonstrate ─┐ (anchors)                    │
                                    │   [rollout (anchored) ─► train (IL + positive-only RL)       │
                                    │                      ─► health] × N             ─► eval ─────┤
                                    └─ expert pool ─► [rollout ─► train (full signal) ─► health] × M
                                                                           ─► eval · final ────────┤
    synthesize ─► verify (held-out tasks: other seeds, plus the left-out families) ──────────────►┴► compare

Phase 1 starts from demonstrations: each task's golden solution replayed as
agent turns (the demonstrate stage). An imitation step trains on the
imitation pool's demonstrations alone (the policy earns no reward before it).
Each phase-1 round then rolls out on the other training tasks, which the
policy was never shown (on imitated tasks every episode succeeds, and a group
of equal rewards carries no signal), with chunk-initialized resampling
(groups start at anchors inside those tasks' demonstrations), and trains on
λ_IL · imitation + positive-only IPA, λ_IL = il_weight · il_decay ** round.
Phase 2 trains on full signal on the expert pool (taken from the phase-1
pool). After every round a health step (``components/health``) reads the
round's rollout and train metrics: healthy, mitigate (the next rounds get
settings such as tighter clipping, a length mask or a lower learning rate) or
roll back (the next round starts again from the last policy a rollout measured
without a collapse, with culprit tasks quarantined: a ``dsl.If``/``dsl.Else`` on
the verdict, ``branch_on_verdict``); the report shows each
verdict with its reasons. Every policy is evaluated on the same held-out tasks (greedy
decoding), and the compare step reports each pass rate with its interval and
the paired difference vs base, and each slice apart: the training families' held-out
tasks by difficulty (same templates, other seeds, never a training task nor a
near-duplicate of one) and the families left out of training (``heldout_families``,
never trained on: how far learning reaches).

The iteration counts N and M shape the graph, so they are compile-time choices
(``CurriculumShape``); everything a run may change is a pipeline parameter
(``CurriculumParams``, each with its doc), whose default is its stage config's
unless the ``CPU_CURRICULUM`` preset names it (``pipelines.presets``). The steps
are built by ``CurriculumSteps`` (``pipelines.curriculum_steps``); each task's
placement is ``pipelines.shape``'s. Every stage takes ``code_version`` (part of
each cache key), is cached, and carries a display name and resource requests; the stages that talk
to sandboxes retry on failure; rollout and train (and eval) request the
accelerator named by the ``accelerator_type``/``accelerator_count`` parameters.
Optional Kubernetes settings (``kfp-kubernetes``): a PVC mounted as the model
cache (``TERMRL_CACHE``), API keys from a secret as environment variables,
image pull secrets on every task, and tolerations and node selectors that put
rollout, train and eval on GPU nodes.

The preset sizes the run for ``termrl run`` on a small CPU-only machine
(SmolLM2-135M): 72 easy and medium procedural training tasks from 20 families, 16
groups of 4 episodes of 3 turns of at most 128 tokens, 66 held-out tasks (48 from
the training families, easy and medium, 18 from the 3 left-out families), phase 1
sampling at 0.7; its entries give the measurements behind each value. Raise them on
a cluster.
"""

from collections.abc import Callable

from kfp import dsl

from pipelines.curriculum_params import CurriculumParams
from pipelines.curriculum_steps import CurriculumSteps, RoundState, branch_on_verdict, rounds
from pipelines.parameters import pipeline_function
from pipelines.presets import CPU_CURRICULUM
from pipelines.shape import RESOURCES, RETRIED, CurriculumShape, apply_platform, make_ops

__all__ = [
    "EVAL_BASE",
    "EVAL_FINAL",
    "EVAL_IMITATION",
    "EVAL_PHASE1",
    "REPORT",
    "RESOURCES",
    "RETRIED",
    "CurriculumParams",
    "CurriculumShape",
    "apply_platform",
    "branch_on_verdict",
    "build_curriculum",
    "make_ops",
]

EVAL_BASE = "eval · base policy"
EVAL_IMITATION = "eval · after imitation"
EVAL_PHASE1 = "eval · after phase 1"
EVAL_FINAL = "eval · final policy"
REPORT = "report · policies"
"""Display names the local runner's summary looks up."""


def build_curriculum(shape: CurriculumShape | None = None) -> Callable[..., object]:
    """The curriculum pipeline for ``shape`` (a ``@dsl.pipeline`` function, ready to compile or run)."""
    shape = shape or CurriculumShape()
    shape.validate()
    ops = make_ops(shape.cpu_image, shape.gpu_image)
    n1, n2 = shape.phase1_iterations, shape.phase2_iterations

    def curriculum(p: CurriculumParams) -> None:
        steps = CurriculumSteps(ops, shape, p)
        base = steps.prepare_model().outputs["model"]
        synthesized = steps.training_tasks()
        training = steps.verified(synthesized, base, "training", p.verify_require)
        pools = steps.curate(training)
        # Other seeds, plus the families left out of training: those appear only here.
        heldout = steps.verified(
            steps.heldout_tasks(synthesized), base, "held-out", p.heldout_verify_require
        )
        heldout = heldout.outputs["admitted"]
        demos = steps.demonstrate(
            pools, base, "imitation_pool", "demonstrate · imitation pool", to_imitate=True
        )
        anchors = (
            steps.demonstrate(
                pools, base, "train_pool", "demonstrate · phase-1 pool", to_imitate=False
            )
            if n1
            else None
        )

        evals = {"base": steps.evaluate(heldout, base, "base", EVAL_BASE)}
        policy = steps.imitation(demos, base)
        evals["imitation"] = steps.evaluate(heldout, policy, "imitation", EVAL_IMITATION)

        state = RoundState(policy, policy, None, p.rollout_options, p.train_options)
        for rnd in rounds(n1, n2):
            state = steps.rl_round(rnd, state, pools, demos, anchors)
            if rnd.phase == 1 and rnd.index == n1 and n2 > 0:  # with no phase 2, "final" is this
                evals["phase1"] = steps.evaluate(heldout, state.policy, "phase1", EVAL_PHASE1)
        evals["final"] = steps.evaluate(heldout, state.policy, "final", EVAL_FINAL)
        steps.compare(evals, state.report, REPORT)

    return dsl.pipeline(
        name="termrl-curriculum",
        description="synthesize → verify → demonstrate → imitation → anchored positive-only rollout/train × N "
        "→ full-signal rollout/train × M → eval of every policy on held-out tasks",
    )(
        pipeline_function(
            CurriculumParams,
            curriculum,
            name="termrl-curriculum",
            summary="The curriculum.",
            preset=CPU_CURRICULUM,
            given=shape.given(),
        )
    )
