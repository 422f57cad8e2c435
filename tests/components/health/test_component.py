"""The health component: its outputs compile, and two chained steps run on kfp's local runner.

No ``from __future__ import annotations`` here: kfp reads the pipeline function's annotations as types.
"""

import json
from pathlib import Path

import yaml
from kfp import compiler, dsl

from components.health.component import health
from pipelines.local import run_pipeline_locally
from tests.components.health.series import healthy_run, with_outcome, write_iteration


def test_outputs_are_the_next_policy_and_options(tmp_path: Path) -> None:
    compiler.Compiler().compile(health, str(tmp_path / "health.yaml"))
    spec = yaml.safe_load((tmp_path / "health.yaml").read_text())
    outputs = spec["root"]["outputDefinitions"]
    assert {k: v["parameterType"] for k, v in outputs["parameters"].items()} == {
        "verdict": "STRING",
        "rollback_iteration": "NUMBER_INTEGER",
        "next_train_options": "STRUCT",
        "next_rollout_options": "STRUCT",
    }
    assert set(outputs["artifacts"]) == {"report", "metrics", "next_policy", "next_fallback"}
    assert spec["root"]["inputDefinitions"]["artifacts"]["previous"]["isOptional"] is True


def test_two_chained_health_steps_carry_the_history_and_roll_back(tmp_path: Path) -> None:
    run = [with_outcome(h, p) for h, p in zip(healthy_run(2, seed=7), [12, 1], strict=True)]
    files = [write_iteration(tmp_path / "data", h) for h in run]
    start = tmp_path / "start"
    start.mkdir()
    (start / "weights").write_text("the starting policy")

    @dsl.pipeline(name="health-test")
    def pipeline() -> None:
        def imported(uri: Path, kind: type):
            return dsl.importer(artifact_uri=str(uri), artifact_class=kind, reimport=False).output

        begin = imported(start, dsl.Model)
        first = health(
            code_version="test",
            rollout_metrics=imported(files[0][0], dsl.Dataset),
            policy=begin,
            checkpoint=imported(files[0][1], dsl.Model),
            fallback=begin,
            train_options={"negative_weight": 0.5},
        ).set_display_name("health 0")
        health(
            code_version="test",
            rollout_metrics=imported(files[1][0], dsl.Dataset),
            policy=first.outputs["next_policy"],
            checkpoint=imported(files[1][1], dsl.Model),
            fallback=first.outputs["next_fallback"],
            previous=first.outputs["report"],
            thresholds={"collapse_z": 2.0},
        ).set_display_name("health 1")

    record = run_pipeline_locally(
        pipeline, {}, run_dir=tmp_path / "run", cache_dir=tmp_path / "cache", echo=lambda _: None
    )
    assert record.ok, [t.log_tail for t in record.tasks.values()]
    first, second = record.tasks["health"].outputs, record.tasks["health-2"].outputs
    # healthy: the next iteration starts from the new checkpoint, and the run's options pass through
    assert (Path(first["next_policy"]) / "train_metrics.parquet").is_file()
    assert (Path(first["next_fallback"]) / "weights").read_text() == "the starting policy"
    report = json.loads(Path(second["report"]).read_text())
    assert [h["health"]["kind"] for h in report["history"]] == ["healthy", "rollback"]
    # 12/32 → 1/32: the collapsed rollout ran the first checkpoint, so back to the starting policy
    assert report["to_iteration"] == -1
    assert (Path(second["next_policy"]) / "weights").read_text() == "the starting policy"
    assert not (Path(second["next_policy"]) / "train_metrics.parquet").exists()
    metrics = json.loads(Path(second["metrics"]).read_text())
    assert metrics == {
        "health/iteration": 1.0,
        "health/findings": 1.0,
        "health/healthy": 0.0,
        "health/mitigate": 0.0,
        "health/rollback": 1.0,
    }
