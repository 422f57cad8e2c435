"""The curriculum's glue: model materialisation, task pools, the base-vs-final report."""

import os

import pytest

from components.synthesize.generate import make_task
from pipelines.glue import compare_evals, curate_pools, materialize_model, pass_rate_table
from termrl.artifacts import load_tasks, save_tasks, write_eval_results, write_verdicts
from termrl.errors import ConfigError


@pytest.fixture
def admitted(tmp_path):
    """Eight real procedural tasks, admitted, with verdicts of varying false-positive risk."""
    cells = [("text-processing", "easy"), ("git", "hard"), ("csv-json", "medium"), ("archives", "hard"),
             ("log-analysis", "easy"), ("sql-sqlite", "medium"), ("shell-scripting", "hard"), ("service", "easy")]
    tasks = [make_task(family, level, seed=i) for i, (family, level) in enumerate(cells)]
    save_tasks(tmp_path / "admitted.parquet", tasks)
    risks = [0.5, 0.0, 0.0, 0.9, 0.1, 0.0, 0.2, 0.0]
    write_verdicts(tmp_path / "verdicts.parquet",
                   [{"task_id": t.id, "admitted": True, "reason": "admitted", "false_positive_risk": r}
                    for t, r in zip(tasks, risks, strict=True)])  # fmt: skip
    return tmp_path, tasks, dict(zip([t.id for t in tasks], risks, strict=True))


def _curate(folder, **kwargs):
    outs = [folder / f"{n}.parquet" for n in ("train", "expert", "heldout")]
    metrics = curate_pools(folder / "admitted.parquet", folder / "verdicts.parquet", *outs, **kwargs)
    return metrics, *[load_tasks(p) for p in outs]


def test_pools_split_without_overlap(admitted):
    folder, tasks, risk = admitted
    metrics, train, expert, heldout = _curate(folder, heldout_fraction=0.25, expert_count=3)
    assert metrics == {"curate/train_pool": 6.0, "curate/expert_pool": 3.0, "curate/heldout": 2.0}
    ids = lambda pool: {t.id for t in pool}  # noqa: E731
    assert ids(train) | ids(heldout) == ids(tasks)
    assert not ids(train) & ids(heldout)
    assert ids(expert) <= ids(train)
    # best-verified: lowest risk first, then harder first
    ranked = sorted(train, key=lambda t: (risk[t.id], -["easy", "medium", "hard"].index(t.difficulty)))
    assert [t.id for t in expert] == [t.id for t in ranked[:3]]


def test_heldout_is_stable_and_seeded(admitted):
    folder, _, _ = admitted
    first = {t.id for t in _curate(folder)[3]}
    assert first == {t.id for t in _curate(folder)[3]}
    others = [{t.id for t in _curate(folder, seed=s)[3]} for s in range(1, 6)]
    assert any(o != first for o in others)


def test_expert_tasks_replace_the_best_verified(admitted, tmp_path):
    folder, tasks, _ = admitted
    expert_file = tmp_path / "expert.parquet"
    experts = [make_task("python-bugfix", "hard", seed=100 + i) for i in range(2)]
    save_tasks(expert_file, experts)
    _, _, expert, _ = _curate(folder, expert_tasks=str(expert_file))
    assert [t.id for t in expert] == [t.id for t in experts]


def test_too_few_admitted_tasks_is_a_config_error(tmp_path):
    save_tasks(tmp_path / "admitted.parquet", [make_task("git", "easy", seed=1)])
    write_verdicts(tmp_path / "verdicts.parquet", [])
    with pytest.raises(ConfigError, match="at least 2"):
        _curate(tmp_path)


def _results(run_id, passed):
    return [{"run_id": run_id, "task_id": f"t{i}", "trial": 0, "agent": "policy", "passed": p,
             "reward": float(p), "family": "git", "difficulty": "easy"} for i, p in enumerate(passed)]  # fmt: skip


def test_compare_writes_report_and_headline_numbers(tmp_path):
    write_eval_results(tmp_path / "base.parquet", _results("base", [False, False, True, False]))
    write_eval_results(tmp_path / "final.parquet", _results("final", [True, False, True, False]))
    values = compare_evals(tmp_path / "base.parquet", tmp_path / "final.parquet", tmp_path / "report.html")
    assert values == {"eval/base_pass_rate": 0.25, "eval/final_pass_rate": 0.5, "eval/pass_rate_delta": 0.25}
    html = (tmp_path / "report.html").read_text()
    assert "base vs final" in html and "<b>base</b>" in html and "<b>final</b>" in html
    table = pass_rate_table({"base": _results("base", [True, False])})
    assert table == [{"policy": "base", "tasks": 2, "trials": 2, "passed": 1, "pass_rate": 0.5}]


def test_materialize_model_links_files(tiny_model_dir, tmp_path):
    out = materialize_model(str(tiny_model_dir), tmp_path / "model")
    weights = out / "model.safetensors"
    assert weights.is_file() and (out / "config.json").is_file()
    assert os.stat(weights).st_ino == os.stat(tiny_model_dir / "model.safetensors").st_ino
    with pytest.raises(Exception, match="never downloads"):
        materialize_model(str(tmp_path / "missing"), tmp_path / "m2")
