"""The compare component on kfp's local runner: optional policies, and the table ``termrl run`` prints."""

import json
from pathlib import Path

from kfp import dsl

from components.eval.stats import pass_rate
from pipelines.glue_components import compare
from pipelines.local import run_pipeline_locally, summary_lines
from termrl.artifacts.eval_results import write_eval_results

FAMILY = {"t1": "files", "t2": "files", "t3": "git", "t4": "git"}
REPORT = "report · policies"


def _results(path: Path, run_id: str, passed: set[str]) -> str:
    write_eval_results(
        path,
        [
            {
                "run_id": run_id,
                "task_id": t,
                "trial": 0,
                "agent": "policy",
                "passed": t in passed,
                "reward": float(t in passed),
                "family": f,
            }
            for t, f in FAMILY.items()
        ],
    )
    return str(path)


def _pipeline(base: str, final: str, **optional: str):
    """base and final, plus any of imitation/phase1/extra: ``phase1="path"``."""

    @dsl.pipeline(name="compare-test")
    def pipeline(heldout_families: str = "git") -> None:
        def imported(uri: str):
            return dsl.importer(artifact_uri=uri, artifact_class=dsl.Dataset, reimport=False).output

        # An optional input left out is not passed at all (KFP compiles no None constant).
        extra = {f"{slot}_results": imported(path) for slot, path in optional.items()}
        compare(
            code_version="test",
            base_results=imported(base),
            final_results=imported(final),
            heldout_families=heldout_families,
            **extra,
        ).set_display_name(REPORT)

    return pipeline


def test_compare_three_policies_and_print_the_table(tmp_path: Path) -> None:
    base = _results(tmp_path / "base.parquet", "base", {"t1"})
    phase1 = _results(tmp_path / "phase1.parquet", "after phase 1", {"t1", "t2"})
    final = _results(tmp_path / "final.parquet", "final", {"t2", "t3"})
    record = run_pipeline_locally(
        _pipeline(base, final, phase1=phase1),
        {},
        run_dir=tmp_path / "run",
        cache_dir=tmp_path / "cache",
        echo=lambda _: None,
    )
    assert record.ok, [t.log_tail for t in record.tasks.values()]
    lines = summary_lines(record, REPORT)

    report = Path(lines[0].removeprefix("report: "))
    assert report == tmp_path / "run" / "report.html" and "Comparison" in report.read_text()
    heading = lines.index("held-out tasks: base vs after phase 1 vs final policy")
    assert lines[heading + 1].split() == ["policy", "tasks", "trials", "passed", "pass", "rate"]
    assert lines[heading + 2].split() == ["base", "4", "4", "1", "25.0%"]
    assert lines[heading + 3].split() == ["after", "phase", "1", "4", "4", "2", "50.0%"]
    assert lines[heading + 4].split() == ["final", "4", "4", "2", "50.0%"]
    table = lines[heading + 6 :]
    assert "Δ vs base [95 % CI]" in table[0] and "left-out families" in table[0]
    # final: 50 % of 4 with Wilson [15.0, 85.0]; +25 pp vs base on 4 paired tasks, 2 gained, 1 lost;
    # the held-out family git: 1 of 2
    low, high = pass_rate(2, 4).low, pass_rate(2, 4).high
    assert (
        table[3].startswith("  final ")
        and f"50.0 % [{100 * low:.1f}, {100 * high:.1f}]" in table[3]
    )
    assert table[3].split("]")[2].split()[:3] == ["4", "2", "1"] and table[3].split()[-1] == "2"
    assert "left-out families (never trained on): git" in table[-1]
    metrics = json.loads(Path(record.tasks["compare"].outputs["metrics"]).read_text())
    assert metrics["eval/base_pass_rate"] == 0.25 and metrics["eval/pass_rate_delta"] == 0.25
    assert metrics["compare/final/heldout_passed"] == 1.0


def test_compare_base_and_final_only(tmp_path: Path) -> None:
    base = _results(tmp_path / "base.parquet", "base", set())
    final = _results(tmp_path / "final.parquet", "final", {"t1"})
    record = run_pipeline_locally(
        _pipeline(base, final),
        {"heldout_families": ""},
        run_dir=tmp_path / "run",
        cache_dir=tmp_path / "cache",
        echo=lambda _: None,
    )
    assert record.ok, [t.log_tail for t in record.tasks.values()]
    lines = summary_lines(record, REPORT)
    assert "held-out tasks: base vs final policy" in lines
    assert not any("left-out families" in line for line in lines)
    assert summary_lines(record, "no such task") == [
        "no comparison: the run has no finished task 'no such task'"
    ]


def test_policies_come_in_curriculum_order(tmp_path: Path) -> None:
    paths = {
        name: _results(tmp_path / f"{name}.parquet", name, {"t1"})
        for name in ("base", "imitation", "phase1", "final", "ablation")
    }
    pipeline = _pipeline(
        paths["base"],
        paths["final"],
        extra=paths["ablation"],
        phase1=paths["phase1"],
        imitation=paths["imitation"],
    )
    record = run_pipeline_locally(
        pipeline, {}, run_dir=tmp_path / "run", cache_dir=tmp_path / "cache", echo=lambda _: None
    )
    assert record.ok, [t.log_tail for t in record.tasks.values()]
    lines = summary_lines(record, REPORT)
    assert "held-out tasks: base vs imitation vs phase1 vs final vs ablation policy" in lines
    metrics = json.loads(Path(record.tasks["compare"].outputs["metrics"]).read_text())
    assert [
        k.split("/")[1] for k in metrics if k.endswith("/pass_rate") and k.startswith("compare/")
    ] == ["base", "imitation", "phase1", "final", "ablation"]
