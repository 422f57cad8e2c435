"""The health components: their outputs compile, and two chained rounds (health step, then the
curriculum's branch on its verdict) run on kfp's local runner.

No ``from __future__ import annotations`` here: kfp reads the pipeline function's annotations as types.
"""

import json
from pathlib import Path

import yaml
from kfp import compiler, dsl

from components.health.component import continue_from, health
from pipelines.curriculum import branch_on_verdict
from pipelines.local import run_pipeline_locally
from tests.components.health.series import healthy_run, with_outcome, write_iteration


def _outputs(component, path: Path) -> dict:
    compiler.Compiler().compile(component, str(path))
    return yaml.safe_load(path.read_text())["root"]


def test_outputs_are_the_verdict_options_and_the_next_policy(tmp_path: Path) -> None:
    root = _outputs(health, tmp_path / "health.yaml")
    outputs = root["outputDefinitions"]
    assert {k: v["parameterType"] for k, v in outputs["parameters"].items()} == {
        "verdict": "STRING",
        "rollback_iteration": "NUMBER_INTEGER",
        "next_train_options": "STRUCT",
        "next_rollout_options": "STRUCT",
    }
    assert set(outputs["artifacts"]) == {"report", "metrics"}
    assert root["inputDefinitions"]["artifacts"]["previous"]["isOptional"] is True
    hand_on = _outputs(continue_from, tmp_path / "continue_from.yaml")
    assert set(hand_on["inputDefinitions"]["artifacts"]) == {"policy", "fallback"}
    assert set(hand_on["outputDefinitions"]["artifacts"]) == {"next_policy", "next_fallback"}


def test_two_chained_rounds_carry_the_history_and_branch_to_a_rollback(tmp_path: Path) -> None:
    run = [with_outcome(h, p) for h, p in zip(healthy_run(2, seed=7), [12, 1], strict=True)]
    files = [write_iteration(tmp_path / "data", h) for h in run]
    start = tmp_path / "start"
    start.mkdir()
    (start / "weights").write_text("the starting policy")

    @dsl.pipeline(name="health-test")
    def pipeline() -> None:
        def imported(uri: Path, kind: type):
            return dsl.importer(artifact_uri=str(uri), artifact_class=kind, reimport=False).output

        def hand_on(**kwargs):
            return continue_from(code_version="test", **kwargs)

        def place(task, _stage, name):
            return task.set_display_name(name)

        policy = fallback = imported(start, dsl.Model)
        previous = {}
        for i, thresholds in enumerate([{}, {"collapse_z": 2.0}]):
            checkpoint = imported(files[i][1], dsl.Model)
            step = health(
                code_version="test",
                rollout_metrics=imported(files[i][0], dsl.Dataset),
                policy=policy,
                checkpoint=checkpoint,
                train_options={"negative_weight": 0.5},
                thresholds=thresholds,
                **previous,
            ).set_display_name(f"health {i}")
            policy, fallback = branch_on_verdict(
                hand_on,
                place,
                step.outputs["verdict"],
                checkpoint=checkpoint,
                policy=policy,
                fallback=fallback,
                names=(f"roll back {i}", f"go on {i}"),
            )
            previous = {"previous": step.outputs["report"]}

    shown: list[str] = []
    record = run_pipeline_locally(
        pipeline, {}, run_dir=tmp_path / "run", cache_dir=tmp_path / "cache", echo=shown.append
    )
    assert record.ok, [t.log_tail for t in record.tasks.values()]
    states = {t.display_name: t.state for t in record.tasks.values() if "health" not in t.name}
    assert {k: v for k, v in states.items() if not k.startswith("importer")} == {
        "roll back 0": "skipped",
        "go on 0": "executed",
        "roll back 1": "executed",
        "go on 1": "skipped",
    }
    assert any(line.endswith("roll back 0: skipped (branch not taken)") for line in shown)
    # healthy: the next round starts from the new checkpoint; the rollback target is the policy
    # the round's rollout measured
    go_on = record.tasks["continue-from-2"].outputs
    assert (Path(go_on["next_policy"]) / "train_metrics.parquet").is_file()
    assert (Path(go_on["next_fallback"]) / "weights").read_text() == "the starting policy"
    second = record.tasks["health-2"].outputs
    report = json.loads(Path(second["report"]).read_text())
    assert [h["health"]["kind"] for h in report["history"]] == ["healthy", "rollback"]
    # 12/32 → 1/32: the collapsed rollout ran the first checkpoint, so back to the starting policy
    assert report["to_iteration"] == -1
    back = record.tasks["continue-from-3"].outputs
    for output in ("next_policy", "next_fallback"):
        assert (Path(back[output]) / "weights").read_text() == "the starting policy"
        assert not (Path(back[output]) / "train_metrics.parquet").exists()
    metrics = json.loads(Path(second["metrics"]).read_text())
    assert metrics == {
        "health/iteration": 1.0,
        "health/findings": 1.0,
        "health/healthy": 0.0,
        "health/mitigate": 0.0,
        "health/rollback": 1.0,
    }
