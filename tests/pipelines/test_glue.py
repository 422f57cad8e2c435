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
    cells = [
        ("text-processing", "easy"),
        ("git", "hard"),
        ("csv-json", "medium"),
        ("archives", "hard"),
        ("log-analysis", "easy"),
        ("sql-sqlite", "medium"),
        ("shell-scripting", "hard"),
        ("service", "easy"),
    ]
    tasks = [make_task(family, level, seed=i) for i, (family, level) in enumerate(cells)]
    save_tasks(tmp_path / "admitted.parquet", tasks)
    risks = [0.5, 0.0, 0.0, 0.9, 0.1, 0.0, 0.2, 0.0]
    write_verdicts(
        tmp_path / "verdicts.parquet",
        [
            {"task_id": t.id, "admitted": True, "reason": "admitted", "false_positive_risk": r}
            for t, r in zip(tasks, risks, strict=True)
        ],
    )
    return tmp_path, tasks, dict(zip([t.id for t in tasks], risks, strict=True))


def _curate(folder, **kwargs):
    outs = [folder / f"{n}.parquet" for n in ("imitation", "train", "expert")]
    knobs = {"imitation_fraction": 0.5, "expert_tasks": "", "expert_count": 4, "seed": 0}
    metrics = curate_pools(
        folder / "admitted.parquet", folder / "verdicts.parquet", *outs, **{**knobs, **kwargs}
    )
    return metrics, *[load_tasks(p) for p in outs]


def test_pools_split_without_overlap_and_the_expert_pool_is_the_best_verified_of_phase_1(admitted):
    folder, tasks, risk = admitted
    metrics, imitation, train, expert = _curate(folder, expert_count=2)
    assert metrics == {
        "curate/imitation_pool": float(len(imitation)),
        "curate/train_pool": float(len(train)),
        "curate/expert_pool": 2.0,
    }
    ids = lambda pool: {t.id for t in pool}  # noqa: E731
    assert ids(imitation) | ids(train) == ids(tasks) and not ids(imitation) & ids(train)
    assert imitation and train and ids(expert) <= ids(train)
    # best-verified: lowest risk first, then harder first
    key = lambda t: (risk[t.id], -["easy", "medium", "hard"].index(t.difficulty))  # noqa: E731
    assert [key(t) for t in expert] == sorted(key(t) for t in train)[:2]


def test_the_imitation_pool_takes_its_share_of_every_family_and_is_seeded(tmp_path):
    tasks = [
        make_task(family, "easy", seed=i)
        for family in ("git", "csv-json", "archives")
        for i in range(4)
    ]
    save_tasks(tmp_path / "admitted.parquet", tasks)
    write_verdicts(tmp_path / "verdicts.parquet", [])
    _, imitation, train, _ = _curate(tmp_path, imitation_fraction=0.5)
    assert (
        sorted(t.family for t in imitation)
        == sorted(t.family for t in train)
        == sorted(["git", "csv-json", "archives"] * 2)
    )
    assert {t.id for t in _curate(tmp_path)[1]} == {t.id for t in imitation}
    assert any(
        {t.id for t in _curate(tmp_path, seed=s)[1]} != {t.id for t in imitation}
        for s in range(1, 6)
    )


def test_expert_tasks_replace_the_best_verified(admitted, tmp_path):
    folder, tasks, _ = admitted
    expert_file = tmp_path / "expert.parquet"
    experts = [make_task("python-bugfix", "hard", seed=100 + i) for i in range(2)]
    save_tasks(expert_file, experts)
    expert = _curate(folder, expert_tasks=str(expert_file))[3]
    assert [t.id for t in expert] == [t.id for t in experts]


def test_too_few_admitted_tasks_is_a_config_error(tmp_path):
    save_tasks(tmp_path / "admitted.parquet", [make_task("git", "easy", seed=1)])
    write_verdicts(tmp_path / "verdicts.parquet", [])
    with pytest.raises(ConfigError, match="at least 2"):
        _curate(tmp_path)


def test_materialize_model_links_files(tiny_model_dir, tmp_path):
    out = materialize_model(str(tiny_model_dir), tmp_path / "model")
    weights = out / "model.safetensors"
    assert weights.is_file() and (out / "config.json").is_file()
    assert os.stat(weights).st_ino == os.stat(tiny_model_dir / "model.safetensors").st_ino
    with pytest.raises(Exception, match="never downloads"):
        materialize_model(str(tmp_path / "missing"), tmp_path / "m2")
