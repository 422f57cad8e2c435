"""The verdict: targeted treatment before global, settings that name real stage options, rollback on collapse."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from components.health.detectors import Thresholds
from components.health.history import IterationMetrics
from components.health.verdict import Mitigations, Verdict, rollback_target, stage_options, verdict
from tests.components.health.series import (
    healthy_run,
    negative_counts,
    sink_advantage,
    tail_lengths,
    with_outcome,
    with_patterns,
)

T = Thresholds()


def _applied(run: list[IterationMetrics], **settings: Any) -> list[IterationMetrics]:
    """``run`` whose latest iteration ran with ``settings`` (``train__eps_high`` → ``train.eps_high``)."""
    applied = {key.replace("__", "."): value for key, value in settings.items()}
    return run[:-1] + [dataclasses.replace(run[-1], applied=applied)]


def test_a_healthy_run_is_healthy() -> None:
    result = verdict(healthy_run(8, seed=0), T)
    assert result == Verdict("healthy")
    assert result.to_dict()["settings"] == {} and result.reasons == []


def test_no_history_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one iteration"):
        verdict([], T)


# --- targeted first, then global -------------------------------------------------------------------


def test_failed_length_tail_masks_the_extremes_first_then_reweights_negatives() -> None:
    run = tail_lengths(healthy_run(8, seed=5), [400, 1300, 4200], passed=[12, 13, 12])

    first = verdict(run, T)
    assert first.kind == "mitigate"
    assert first.settings == {"rollout.max_failed_response_tokens": 400}  # the tail before it rose
    assert first.action == "targeted mask_extremes for failed_length_tail"
    assert first.reasons[0].startswith(
        "failed_length_tail: longest failed trajectory rose 400 → 1300 → 4200"
    )

    # the mask was in force for the latest iteration and the sign persists: global treatment
    again = verdict(_applied(run, rollout__max_failed_response_tokens=400), T)
    assert again.settings == {"train.negative_weight": 0.5}
    assert again.action == "global reweight_negatives for failed_length_tail"

    # positive-only mode gives negatives no weight: the learning rate is the global lever there
    positive_only = [
        dataclasses.replace(h, knobs=dataclasses.replace(h.knobs, mode="positive-only"))
        for h in run
    ]
    assert verdict(
        _applied(positive_only, rollout__max_failed_response_tokens=400), T
    ).settings == {"train.learning_rate": 5e-6}


def test_a_mask_already_below_the_tail_is_halved() -> None:
    run = tail_lengths(healthy_run(8, seed=5), [400, 1300, 4200], passed=[12, 13, 12])
    low = [
        dataclasses.replace(h, rollout={**h.rollout, "rollout/max_failed_response_tokens": 300.0})
        for h in run
    ]
    assert verdict(low, T).settings == {"rollout.max_failed_response_tokens": 150}
    # rollout metrics that do not report the mask in force (older ones): the earlier tail
    unknown = [
        dataclasses.replace(
            h,
            rollout={
                k: v for k, v in h.rollout.items() if k != "rollout/max_failed_response_tokens"
            },
        )
        for h in run
    ]
    assert verdict(unknown, T).settings == {"rollout.max_failed_response_tokens": 400}


def test_falling_advantage_tightens_clipping_then_lowers_the_learning_rate_step_by_step() -> None:
    run = sink_advantage(healthy_run(8, seed=3), 1.5)
    assert verdict(run, T).settings == {"train.eps_low": 0.1, "train.eps_high": 0.1}
    clipped = _applied(run, train__eps_low=0.1, train__eps_high=0.1)
    assert verdict(clipped, T).settings == {"train.learning_rate": 5e-6}
    # still falling after the first cut: the next cut starts from the applied value
    lowered = _applied(run, train__eps_low=0.1, train__eps_high=0.1, train__learning_rate=5e-6)
    assert verdict(lowered, T).settings == {"train.learning_rate": 2.5e-6}
    # clipping never narrows below min_eps
    tight = [
        dataclasses.replace(h, knobs=dataclasses.replace(h.knobs, eps_low=0.03, eps_high=0.2))
        for h in run
    ]
    assert verdict(tight, T).settings == {"train.eps_low": 0.02, "train.eps_high": 0.1}


def test_negative_share_tightens_clipping_then_reweights_negatives() -> None:
    run = negative_counts(healthy_run(6, seed=2), [(3, 2), (2, 3), (1, 4)])
    assert verdict(run, T).settings == {"train.eps_low": 0.1, "train.eps_high": 0.1}
    strong = Mitigations(negative_weight_factor=0.25)
    assert verdict(_applied(run, train__eps_low=0.1, train__eps_high=0.1), T, strong).settings == {
        "train.negative_weight": 0.25
    }


def test_several_signs_get_their_treatments_together() -> None:
    run = sink_advantage(
        tail_lengths(healthy_run(8, seed=3), [400, 1300, 4200], passed=[12, 13, 12]), 1.5
    )
    result = verdict(run, T)
    assert [f.name for f in result.findings] == ["falling_advantage", "failed_length_tail"]
    assert result.settings == {
        "train.eps_low": 0.1,
        "train.eps_high": 0.1,
        "rollout.max_failed_response_tokens": 400,
    }
    assert result.action == (
        "targeted tighten_clipping for falling_advantage; "
        "targeted mask_extremes for failed_length_tail"
    )


def test_behaviour_spike_turns_penalties_on_then_quarantines_the_tasks() -> None:
    run = healthy_run(6, seed=6)
    run = run[:-1] + [
        with_patterns(
            run[-1],
            {
                "loop": {"task-1": 4, "task-2": 4, "task-3": 4, "task-5": 2},
                "destructive": {"task-4": 4, "task-6": 1},
            },
        )
    ]
    first = verdict(run, T)
    assert first.kind == "mitigate" and first.quarantine == ()
    assert first.settings == {"rollout.loop_penalty": 0.1, "rollout.destructive_penalty": 0.1}

    penalised = _applied(
        run,
        rollout__loop_penalty=0.1,
        rollout__destructive_penalty=0.1,
        rollout__quarantine=["task-9"],
    )
    again = verdict(penalised, T)
    assert again.settings == {
        "rollout.quarantine": ["task-1", "task-2", "task-3", "task-4", "task-5", "task-6", "task-9"]
    }
    assert again.quarantine == ("task-1", "task-2", "task-3", "task-4", "task-5", "task-6")  # newly


# --- lifting -------------------------------------------------------------------------------------


def test_mitigations_are_lifted_after_healthy_iterations_but_the_quarantine_stays() -> None:
    settings = {
        "train__eps_high": 0.1,
        "train__learning_rate": 5e-6,
        "rollout__quarantine": ["task-3"],
    }
    # iteration 5 was mitigated; 6 and 7 ran with the settings and found nothing
    run = _applied(_judged(healthy_run(8, seed=0), "hhhhhmh"), **settings)
    result = verdict(run, T)
    assert result.kind == "healthy" and result.settings == {}
    assert result.lifted == ("train.eps_high", "train.learning_rate")
    assert result.action == "lift train.eps_high, train.learning_rate after 2 healthy iterations"
    assert Verdict.from_dict(result.to_dict()) == result

    # one healthy iteration is not enough, and lift_after=0 never lifts
    assert verdict(_applied(_judged(healthy_run(8, seed=0), "hhhhhhm"), **settings), T) == Verdict(
        "healthy"
    )
    assert verdict(run, T, Mitigations(lift_after=0)) == Verdict("healthy")
    assert verdict(run, T, Mitigations(lift_after=3)).lifted == ()
    # nothing in force but the quarantine: nothing to lift
    assert (
        verdict(
            _applied(_judged(healthy_run(8, seed=0), "hhhhhmh"), rollout__quarantine=["a"]), T
        ).lifted
        == ()
    )


def test_a_lifted_setting_leaves_the_next_iterations_options() -> None:
    from components.health.report import HealthReport

    report = HealthReport(
        verdicts=[
            Verdict("mitigate", settings={"train.eps_high": 0.1, "rollout.quarantine": ["a"]}),
            Verdict("healthy"),
            Verdict("healthy", lifted=("train.eps_high",)),
        ]
    )
    assert report.applied == {"rollout.quarantine": ["a"]}
    assert stage_options(report.applied) == {"train": {}, "rollout": {"quarantine": ["a"]}}


# --- rollback --------------------------------------------------------------------------------------


def _judged(run: list[IterationMetrics], verdicts: str) -> list[IterationMetrics]:
    """``run`` with the verdict kinds given per earlier iteration (h: healthy, m: mitigate, r: rollback)."""
    kinds = {"h": "healthy", "m": "mitigate", "r": "rollback"}
    return [
        dataclasses.replace(h, verdict=kinds[v]) for h, v in zip(run, verdicts, strict=False)
    ] + run[len(verdicts) :]


def test_collapse_rolls_back_to_the_last_healthy_checkpoint_and_quarantines_the_culprits() -> None:
    passed = [8, 10, 11, 12, 14, 13, 12, 2]
    run = [with_outcome(h, p) for h, p in zip(healthy_run(8, seed=7), passed, strict=True)]
    # from iteration 5 on, task-0 (never solved before) "passes" 3 of 4 episodes: a reward gone noisy;
    # task-3 tampered with the tests once in the collapsed iteration
    run = run[:5] + [with_outcome(h, round(h.success_rate * 32), {"task-0": 0.75}) for h in run[5:]]
    run[-1] = with_patterns(run[-1], {"tampering": {"task-3": 1}})
    run = _judged(
        run, "hhhhhmh"
    )  # iteration 5 was mitigated, 6 looked healthy: its policy collapsed in 7

    result = verdict(run, T)
    assert [f.name for f in result.findings] == ["reward_collapse"]
    assert result.kind == "rollback"
    # ckpt-6 ran the collapsed rollout; iteration 6's rollout measured ckpt-5 without a collapse
    assert (result.to_checkpoint, result.to_iteration) == ("ckpt-5", 5)
    assert result.quarantine == ("task-0", "task-3")
    assert result.settings == {"rollout.quarantine": ["task-0", "task-3"]}
    assert result.action == "roll back to ckpt-5, quarantine 2 task(s)"
    assert result.findings[0].severity == "critical"


def test_rollback_skips_policies_condemned_by_an_earlier_rollback() -> None:
    run = [
        with_outcome(h, p)
        for h, p in zip(healthy_run(7, seed=7), [8, 10, 11, 12, 3, 12, 2], strict=True)
    ]
    run = _judged(run, "hhhhrh")
    # iteration 4's rollout collapsed on ckpt-3 and the run went back to ckpt-2
    run[5] = dataclasses.replace(run[5], policy="ckpt-2")
    target = rollback_target(run)
    assert target == ("ckpt-2", 2)  # ckpt-5 ran the collapsed rollout now, ckpt-3 the one before
    result = verdict(run, T)
    assert result.kind == "rollback" and result.to_checkpoint == "ckpt-2"


def test_a_mitigated_iterations_policy_was_measured_without_a_collapse() -> None:
    run = [with_outcome(h, p) for h, p in zip(healthy_run(4, seed=7), [8, 14, 12, 2], strict=True)]
    run = _judged(run, "mmm")
    # iteration 2's rollout measured ckpt-1 at 12/32: precursors, treated, but no collapse
    assert rollback_target(run) == ("ckpt-1", 1)
    # the first iteration's rollout measured the starting policy: the only other one there is
    assert rollback_target(run[:2]) == ("start", -1)


def test_stage_options_split_settings_by_stage() -> None:
    settings = {"train.eps_high": 0.1, "train.learning_rate": 5e-6, "rollout.quarantine": ["a"]}
    assert stage_options(settings) == {
        "train": {"eps_high": 0.1, "learning_rate": 5e-6},
        "rollout": {"quarantine": ["a"]},
    }
    assert stage_options({}) == {"train": {}, "rollout": {}}


def test_settings_name_real_stage_options() -> None:
    from components.health.verdict import MAX_FAILED_TOKENS, PENALTY_SETTINGS, QUARANTINE
    from components.rollout.config import (
        RolloutConfig,  # the names must match the stage they configure
    )
    from components.train.config import TrainConfig

    fields = {
        "train": {f.name for f in dataclasses.fields(TrainConfig)},
        "rollout": {f.name for f in dataclasses.fields(RolloutConfig)},
    }
    keys = {
        "train.eps_low",
        "train.eps_high",
        "train.learning_rate",
        "train.negative_weight",
        MAX_FAILED_TOKENS,
        QUARANTINE,
        *PENALTY_SETTINGS.values(),
    }
    assert {
        key for key in keys if key.partition(".")[2] not in fields[key.partition(".")[0]]
    } == set()


def test_verdict_round_trips_through_its_dict() -> None:
    run = tail_lengths(healthy_run(8, seed=5), [400, 1300, 4200], passed=[12, 13, 12])
    result = verdict(run, T)
    assert Verdict.from_dict(result.to_dict()) == result


def test_an_infinite_statistic_is_written_as_null() -> None:
    # 32/32 → 0/32: no variance in either batch, so z is infinite
    run = [with_outcome(h, p) for h, p in zip(healthy_run(2, seed=7), [32, 0], strict=True)]
    result = verdict(run, T)
    assert result.findings[0].evidence["z"] == float("inf")
    assert (
        json.loads(json.dumps(result.to_dict(), allow_nan=False))["findings"][0]["evidence"]["z"]
        is None
    )
