"""The curriculum's glue: model materialisation and task pools."""

import os

import pytest

from components.synthesize.generate import make_task
from pipelines.glue import curate_pools, materialize_model
from termrl.artifacts import load_tasks, save_tasks, write_verdicts
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
    outs = [folder / f"{n}.parquet" for n in ("train", "expert")]
    metrics = curate_pools(folder / "admitted.parquet", folder / "verdicts.parquet", *outs, **kwargs)
    return metrics, *[load_tasks(p) for p in outs]


def test_every_admitted_task_is_in_the_train_pool_and_the_best_verified_in_the_expert_pool(admitted):
    folder, tasks, risk = admitted
    metrics, train, expert = _curate(folder, expert_count=3)
    assert metrics == {"curate/train_pool": 8.0, "curate/expert_pool": 3.0}
    assert {t.id for t in train} == {t.id for t in tasks}
    # best-verified: lowest risk first, then harder first
    key = lambda t: (risk[t.id], -["easy", "medium", "hard"].index(t.difficulty))  # noqa: E731
    assert [key(t) for t in expert] == sorted(key(t) for t in train)[:3]


def test_expert_tasks_replace_the_best_verified(admitted, tmp_path):
    folder, tasks, _ = admitted
    expert_file = tmp_path / "expert.parquet"
    experts = [make_task("python-bugfix", "hard", seed=100 + i) for i in range(2)]
    save_tasks(expert_file, experts)
    _, _, expert = _curate(folder, expert_tasks=str(expert_file))
    assert [t.id for t in expert] == [t.id for t in experts]


def test_no_admitted_task_is_a_config_error(tmp_path):
    save_tasks(tmp_path / "admitted.parquet", [])
    write_verdicts(tmp_path / "verdicts.parquet", [])
    with pytest.raises(ConfigError, match="admitted no task"):
        _curate(tmp_path)


def test_materialize_model_links_files(tiny_model_dir, tmp_path):
    out = materialize_model(str(tiny_model_dir), tmp_path / "model")
    weights = out / "model.safetensors"
    assert weights.is_file() and (out / "config.json").is_file()
    assert os.stat(weights).st_ino == os.stat(tiny_model_dir / "model.safetensors").st_ino
    with pytest.raises(Exception, match="never downloads"):
        materialize_model(str(tmp_path / "missing"), tmp_path / "m2")
