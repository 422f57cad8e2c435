"""The curriculum's builders: each adds one step (or one RL round) to the pipeline being defined.

    CurriculumSteps(ops, shape, params)
      .prepare_model()                      the starting policy
      .training_tasks() / .heldout_tasks()  synthesize (the held-out set avoids the training tasks)
      .verified(tasks, judge, which)        verify
      .curate(verified)                     imitation, phase-1 and phase-2 pools
      .demonstrate(pools, policy, pool)     golden solutions replayed as agent turns
      .evaluate(tasks, policy, label)       one policy on the held-out tasks
      .imitation(demos, policy)             the imitation step: train on the demonstrations
      .rl_round(round, state, ...)          rollout -> train -> health -> roll back | go on
                                            (colocate: rollout and train one task, one pod)
      .compare(evals, report)               the report over every evaluated policy

Every call passes the pipeline's parameters (``CurriculumParams``: kfp channels)
under the component's own keyword names, and places the task (``apply_platform``).
Tasks are created in the order the pipeline calls these, which fixes kfp's task names.
"""

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kfp import dsl
from kfp.dsl.pipeline_task import PipelineTask

from pipelines.curriculum_params import SANDBOX_PARAMETERS, CurriculumParams
from pipelines.shape import CurriculumShape, Ops, apply_platform

__all__ = ["CurriculumSteps", "Round", "RoundState", "branch_on_verdict", "rounds"]


@dataclass(frozen=True)
class Round:
    """One rollout -> train round: ``index`` of ``total`` in ``phase``; ``version`` counts rounds
    over both phases (the policy version, the seed and λ_IL's exponent)."""

    phase: int
    index: int
    total: int
    version: int

    @property
    def mode(self) -> str:
        """Phase 1 learns from successes only; phase 2 from every episode."""
        return "positive-only" if self.phase == 1 else "full"

    @property
    def pool(self) -> str:
        """Phase 1 rolls out on tasks the imitation step never saw; phase 2 on the expert pool."""
        return "train_pool" if self.phase == 1 else "expert_pool"

    def name(self, step: str) -> str:
        return f"phase {self.phase} · {step} {self.index}/{self.total}"


def rounds(phase1: int, phase2: int) -> list[Round]:
    """The schedule: ``phase1`` positive-only rounds, then ``phase2`` full-signal rounds."""
    schedule = [(1, i, phase1) for i in range(1, phase1 + 1)]
    schedule += [(2, j, phase2) for j in range(1, phase2 + 1)]
    return [Round(*step, version=v) for v, step in enumerate(schedule, start=1)]


@dataclass(frozen=True)
class RoundState:
    """What a round hands the next: the policy to start from, the rollback target (the last
    policy a rollout measured without a collapse), the last health report, and the options
    (the run's, plus every mitigation the health steps chose so far)."""

    policy: Any
    fallback: Any
    report: Any
    rollout_options: Any
    train_options: Any


def branch_on_verdict(
    continue_from: Callable[..., PipelineTask],
    place: Callable[[PipelineTask, str, str], PipelineTask],
    verdict: object,
    *,
    checkpoint: object,
    policy: object,
    fallback: object,
    names: tuple[str, str],
) -> tuple[object, object]:
    """The next round's policy and rollback target: a ``dsl.If``/``dsl.Else`` on a health verdict.

    On ``rollback`` both are ``fallback``, the last policy a rollout measured without a collapse;
    otherwise the round's new ``checkpoint``, and ``policy``, the one its rollout just measured.
    Each branch runs ``continue_from`` (which takes ``policy`` and ``fallback`` and hands them on);
    the results are ``dsl.OneOf`` the two branches' outputs. ``names``: the two tasks' display
    names (roll back, go on).
    """
    with dsl.If(verdict == "rollback", name="rollback"):
        back = place(continue_from(policy=fallback, fallback=fallback), "continue_from", names[0])
    with dsl.Else(name="go on"):
        on = place(continue_from(policy=checkpoint, fallback=policy), "continue_from", names[1])
    return (
        dsl.OneOf(back.outputs["next_policy"], on.outputs["next_policy"]),
        dsl.OneOf(back.outputs["next_fallback"], on.outputs["next_fallback"]),
    )


class CurriculumSteps:
    """Builders of the curriculum's steps, over one pipeline definition's parameters."""

    def __init__(self, ops: Ops, shape: CurriculumShape, params: CurriculumParams):
        self.ops, self.shape, self.p = ops, shape, params
        self.accelerator = (params.accelerator_type, params.accelerator_count)
        self.sandbox = {name: getattr(params, name) for name in SANDBOX_PARAMETERS}

    def place(self, task: PipelineTask, stage: str, name: str) -> PipelineTask:
        return apply_platform(task, stage, name, self.shape, self.accelerator)

    def prepare_model(self) -> PipelineTask:
        made = self.ops.prepare_model(code_version=self.p.code_version, source=self.p.base_model)
        return self.place(made, "prepare_model", "prepare base policy")

    def training_tasks(self) -> PipelineTask:
        """The training tasks: every synth family but the held-out ones (a synthesize task)."""
        p = self.p
        tasks = self.ops.synthesize(
            code_version=p.code_version,
            count=p.synth_count,
            seed=p.synth_seed,
            families=p.synth_families,
            exclude_families=p.heldout_families,
            difficulties=p.synth_difficulties,
            llm_model=p.synth_llm_model,
            options=p.synthesize_options,
        )
        return self.place(tasks, "synthesize", "synthesize training tasks")

    def heldout_tasks(self, training: PipelineTask) -> PipelineTask:
        """The held-out tasks (a synthesize task): heldout_count from the training families and
        heldout_family_count from the families left out of training, at heldout_difficulties,
        from heldout_seed, none of them a training task or a near-duplicate of one."""
        p = self.p
        tasks = self.ops.synthesize(
            code_version=p.code_version,
            count=p.heldout_count,
            seed=p.heldout_seed,
            families=p.synth_families,
            exclude_families=p.heldout_families,
            extra_families=p.heldout_families,
            extra_count=p.heldout_family_count,
            avoid=training.outputs["tasks"],
            difficulties=p.heldout_difficulties,
            llm_model=p.synth_llm_model,
            options=p.synthesize_options,
        )
        return self.place(tasks, "synthesize", "synthesize held-out tasks")

    def verified(
        self, tasks: PipelineTask, judge: Any, which: str, require: Any = None
    ) -> PipelineTask:
        """Verify the synthesize task ``tasks``: the verify task (``require``: None, the stage's
        default checks)."""
        p = self.p
        verified = self.ops.verify(
            code_version=p.code_version,
            tasks=tasks.outputs["tasks"],
            judge_model=judge,
            repeats=p.verify_repeats,
            judges=p.verify_judges,
            **({} if require is None else {"require": require}),
            sandbox_backend=p.sandbox_backend,
            **self.sandbox,
            options=p.verify_options,
        )
        return self.place(verified, "verify", f"verify {which} tasks")

    def curate(self, verified: PipelineTask) -> PipelineTask:
        pools = self.ops.curate(
            code_version=self.p.code_version,
            admitted=verified.outputs["admitted"],
            verdicts=verified.outputs["verdicts"],
            imitation_fraction=self.p.imitation_fraction,
            expert_tasks=self.p.expert_tasks,
            expert_count=self.p.expert_count,
            seed=self.p.synth_seed,
        )
        return self.place(pools, "curate", "curate pools")

    def demonstrate(
        self, pools: PipelineTask, policy: Any, pool: str, name: str, *, to_imitate: bool
    ) -> Any:
        """The demonstrations of ``pool``'s tasks, written for ``policy``'s tokenizer. Those
        ``to_imitate`` are written in every phrasing (demonstrate_every_phrasing); anchors only
        lend their responses to rollout groups, the same under any phrasing, so one each."""
        demos = self.ops.demonstrate(
            code_version=self.p.code_version,
            tasks=pools.outputs[pool],
            policy=policy,
            prompt_style=self.p.prompt_style,
            every_phrasing=self.p.demonstrate_every_phrasing if to_imitate else False,
            sandbox_backend=self.p.sandbox_backend,
            **self.sandbox,
        )
        return self.place(demos, "demonstrate", name).outputs["demonstrations"]

    def evaluate(self, tasks: Any, policy: Any, label: str, name: str) -> PipelineTask:
        p = self.p
        evaluated = self.ops.evaluate(
            code_version=p.code_version,
            tasks=tasks,
            policy=policy,
            run_id=label,
            trials=p.eval_trials,
            max_turns=p.eval_max_turns,
            max_new_tokens=p.max_new_tokens,
            concurrency=p.eval_concurrency,
            sandbox_backend=p.sandbox_backend,
            prompt_style=p.prompt_style,
            options=p.eval_options,
            **self.sandbox,
        )
        return self.place(evaluated, "evaluate", name)

    def imitation(self, demos: Any, policy: Any) -> Any:
        """The imitation step's checkpoint: ``policy`` trained on ``demos`` alone."""
        p = self.p
        trained = self.ops.train(
            code_version=p.code_version,
            trajectories=demos,
            policy=policy,
            mode="positive-only",
            finetune=p.finetune,
            learning_rate=p.imitation_learning_rate,
            epochs=p.imitation_epochs,
            seed=0,
            il_weight=1.0,
            iteration=0,  # imitation alone, whatever the RL rounds mix
            options=p.train_options,
        )
        return self.place(trained, "train", "imitation · train on demonstrations").outputs[
            "checkpoint"
        ]

    def _rollout_arguments(self, rnd: Round, pools: PipelineTask) -> dict[str, Any]:
        """What a round's rollout takes besides its policy, its options and its anchors: the
        same for the rollout task and the colocated round."""
        p = self.p
        return dict(
            code_version=p.code_version,
            tasks=pools.outputs[rnd.pool],
            policy_version=rnd.version,
            seed=rnd.version,
            group_size=p.group_size,
            groups=p.groups,
            redundancy=p.redundancy,
            dynamic_sampling=p.dynamic_sampling,
            concurrency=p.rollout_concurrency,
            max_turns=p.max_turns,
            max_new_tokens=p.max_new_tokens,
            temperature=self._temperature(rnd),
            sandbox_backend=p.sandbox_backend,
            prompt_style=p.prompt_style,
            **self.sandbox,
        )

    def _train_arguments(self, rnd: Round) -> dict[str, Any]:
        """What a round's train step takes besides its inputs and options (``seed`` is the
        rollout's too, the same round version)."""
        p = self.p
        return dict(
            mode=rnd.mode,
            finetune=p.finetune,
            learning_rate=p.learning_rate,
            epochs=p.train_epochs,
            seed=rnd.version,
            rl_weight=p.rl_weight,
            il_weight=p.il_weight,
            il_decay=p.il_decay,
            iteration=rnd.version,  # the sampling temperature: read from the trajectories
        )

    def _rollout(
        self, rnd: Round, state: RoundState, pools: PipelineTask, anchors: Any
    ) -> PipelineTask:
        # Phase 1 learns on tasks the imitation step never saw, starting groups inside their
        # demonstrations; phase 2 rolls out from scratch.
        anchored = {
            "demonstrations": anchors,
            "anchoring": self.p.anchoring,
            "recoveries_per_task": self.p.recoveries_per_task,
        }
        rolled = self.ops.rollout(
            **self._rollout_arguments(rnd, pools),
            policy=state.policy,
            options=state.rollout_options,
            **(anchored if rnd.phase == 1 else {}),
        )
        return self.place(rolled, "rollout", rnd.name("rollout"))

    def _temperature(self, rnd: Round) -> Any:
        return self.p.rollout_temperature if rnd.phase == 1 else self.p.phase2_temperature

    def _train(
        self, rnd: Round, state: RoundState, rolled: PipelineTask, demos: Any
    ) -> PipelineTask:
        # Phase 1 keeps imitating the imitation pool's demonstrations beside its RL loss.
        trained = self.ops.train(
            code_version=self.p.code_version,
            trajectories=rolled.outputs["trajectories"],
            policy=state.policy,
            **self._train_arguments(rnd),
            options=state.train_options,
            **({"demonstrations": demos} if rnd.phase == 1 else {}),
        )
        return self.place(trained, "train", f"{rnd.name('train')} ({rnd.mode})")

    def _colocated(
        self, rnd: Round, state: RoundState, pools: PipelineTask, anchors: Any, demos: Any
    ) -> PipelineTask:
        """The round's rollout and train step in one pod: the arguments of the two tasks
        ``_rollout`` and ``_train`` make, the options each stage's own."""
        phase1 = {
            "rollout_demonstrations": anchors,
            "anchoring": self.p.anchoring,
            "recoveries_per_task": self.p.recoveries_per_task,
            "demonstrations": demos,
        }
        both = self._rollout_arguments(rnd, pools) | self._train_arguments(rnd)  # one seed
        done = self.ops.colocated_round(
            **both,
            policy=state.policy,
            rollout_options=state.rollout_options,
            train_options=state.train_options,
            **(phase1 if rnd.phase == 1 else {}),
        )
        name = f"{rnd.name('rollout + train')} ({rnd.mode}, colocated)"
        return self.place(done, "colocated_round", name)

    def _health(
        self, rnd: Round, state: RoundState, rolled: PipelineTask, trained: PipelineTask
    ) -> PipelineTask:
        checked = self.ops.health(
            code_version=self.p.code_version,
            rollout_metrics=rolled.outputs["rollout_metrics"],
            policy=state.policy,
            checkpoint=trained.outputs["checkpoint"],
            train_options=state.train_options,
            rollout_options=state.rollout_options,
            thresholds=self.p.health_thresholds,
            **({"previous": state.report} if state.report is not None else {}),
        )
        return self.place(checked, "health", rnd.name("health"))

    def rl_round(
        self, rnd: Round, state: RoundState, pools: PipelineTask, demos: Any, anchors: Any
    ) -> RoundState:
        """Rollout -> train -> health, then the next round's policy: a branch on the verdict.

        With ``colocate`` the rollout and the train step are one task (one GPU pod), whose
        outputs are both stages' own.

        After a rollback, the last policy a rollout measured without a collapse; otherwise the new
        checkpoint (which becomes the rollback target once the next rollout has measured it).
        """
        if self.shape.colocate:
            rolled = trained = self._colocated(rnd, state, pools, anchors, demos)
        else:
            rolled = self._rollout(rnd, state, pools, anchors)
            trained = self._train(rnd, state, rolled, demos)
        checked = self._health(rnd, state, rolled, trained)
        policy, fallback = branch_on_verdict(
            functools.partial(self.ops.continue_from, code_version=self.p.code_version),
            self.place,
            checked.outputs["verdict"],
            checkpoint=trained.outputs["checkpoint"],
            policy=state.policy,
            fallback=state.fallback,
            names=(rnd.name("roll back"), rnd.name("go on")),
        )
        return replace(
            state,
            policy=policy,
            fallback=fallback,
            report=checked.outputs["report"],
            rollout_options=checked.outputs["next_rollout_options"],
            train_options=checked.outputs["next_train_options"],
        )

    def compare(self, evals: dict[str, PipelineTask], report: Any, name: str) -> PipelineTask:
        """The report: every later policy against the base policy, on the held-out tasks."""
        later = {
            f"{label}_results": evals[label].outputs["results"]
            for label in ("imitation", "phase1", "final")
            if label in evals
        }
        compared = self.ops.compare(
            code_version=self.p.code_version,
            base_results=evals["base"].outputs["results"],
            heldout_families=self.p.heldout_families,
            health=report,
            **later,
        )
        return self.place(compared, "compare", name)
