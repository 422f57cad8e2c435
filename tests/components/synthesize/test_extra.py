"""Extra families (their own count and seed stream) and the tasks a run avoids."""

from __future__ import annotations

from collections import Counter

import pytest

from components.synthesize.config import SynthesizeConfig
from components.synthesize.stage import main
from termrl.artifacts import load_tasks
from termrl.errors import ConfigError

LEFT_OUT = ("config-edit", "users-groups")


def _run(tmp_path, name: str, **fields) -> list:
    out = tmp_path / f"{name}.parquet"
    main(SynthesizeConfig(out=str(out), progress=False, **fields))
    return load_tasks(out)


def test_extra_families_get_their_own_count_spread_over_their_cells(tmp_path):
    tasks = _run(
        tmp_path,
        "with",
        count=12,
        seed=5,
        families=("git", "text-processing", *LEFT_OUT),
        exclude_families=LEFT_OUT,
        extra_families=LEFT_OUT,
        extra_count=8,
        difficulties=("easy", "medium"),
    )
    cells = Counter((t.family, t.difficulty) for t in tasks if t.family in LEFT_OUT)
    assert sum(cells.values()) == 8
    assert set(cells.values()) == {2}  # 8 over 2 families x 2 levels
    assert Counter(t.family in LEFT_OUT for t in tasks)[False] == 12


def test_extra_tasks_change_none_of_the_others(tmp_path):
    plain = dict(count=10, seed=7, exclude_families=LEFT_OUT, difficulties=("easy",))
    without = _run(tmp_path, "without", **plain)
    with_extra = _run(tmp_path, "with", **plain, extra_families=LEFT_OUT, extra_count=4)
    assert [t.id for t in with_extra if t.family not in LEFT_OUT] == [t.id for t in without]


def test_an_avoided_run_shares_no_task_and_no_near_duplicate(tmp_path):
    same = dict(count=16, seed=3, families=("find-xargs", "config-edit"), difficulties=("easy",))
    first = _run(tmp_path, "first", **same)
    again = _run(tmp_path, "again", **same, avoid=str(tmp_path / "first.parquet"))
    assert {t.id for t in first} == {t.id for t in _run(tmp_path, "repeat", **same)}
    assert not {t.id for t in first} & {t.id for t in again}
    assert not {t.instruction for t in first} & {t.instruction for t in again}


def test_extra_families_must_not_be_drawn_twice():
    with pytest.raises(ConfigError) as err:
        SynthesizeConfig(extra_families=("git",), extra_count=2).validate()  # git is selected too
    assert "also among the selected families" in str(err.value)
    with pytest.raises(ConfigError, match="extra_count must be >= 0"):
        SynthesizeConfig(extra_count=-1).validate()
    with pytest.raises(ConfigError, match="avoid: no such tasks artifact"):
        SynthesizeConfig(avoid="/nonexistent/tasks.parquet").validate()
    # No extra family named: the count draws nothing (a run that rotates to no left-out family).
    SynthesizeConfig(extra_count=4).validate()
    assert SynthesizeConfig(extra_count=4).selected_extra_families() == []
