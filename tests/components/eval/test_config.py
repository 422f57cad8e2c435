"""EvalConfig validation reports every problem at once; task loading from both inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.eval.config import EvalConfig
from components.eval.trials import load_eval_tasks
from termrl.artifacts.tasks import save_tasks
from termrl.errors import ConfigError
from termrl.sandbox.settings import SandboxSettings
from termrl.taskfolders import import_task_folders

FIXTURES = Path(__file__).parents[2] / "fixtures" / "tasks"


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    config = EvalConfig(
        tasks=str(tmp_path / "missing"),
        out=str(tmp_path),
        agent="policy",
        model=None,
        trials=0,
        concurrency=0,
        sandbox=SandboxSettings("vmware"),
        temperature=-1,
    )
    with pytest.raises(ConfigError) as caught:
        config.validate()
    text = "\n".join(caught.value.problems)
    for fragment in (
        "does not exist",
        "is a folder",
        "needs a model",
        "trials must",
        "concurrency must",
        "backend must",
        "temperature",
    ):
        assert fragment in text
    assert len(caught.value.problems) == 7


def test_agent_and_model_must_agree(tmp_path: Path) -> None:
    base = {"tasks": str(FIXTURES), "out": str(tmp_path / "r.parquet")}
    EvalConfig(**base, agent="oracle").validate()
    EvalConfig(**base, agent="policy", model="litellm:gpt-4o-mini").validate()
    EvalConfig(**base, agent="policy", model=str(tmp_path)).validate()
    for bad in (
        EvalConfig(**base, agent="oracle", model=str(tmp_path)),
        EvalConfig(**base, agent="policy", model="litellm:"),
        EvalConfig(**base, agent="policy", model=str(tmp_path / "no-such-model")),
        EvalConfig(**base, agent="human"),
    ):
        with pytest.raises(ConfigError):
            bad.validate()


def test_label() -> None:
    assert EvalConfig(agent="nop").label() == "nop"
    assert EvalConfig(agent="policy", model="/models/step-10").label() == "policy:step-10"
    assert EvalConfig(agent="policy", model="litellm:gpt-4o").label() == "litellm:gpt-4o"
    assert EvalConfig(agent="nop", run_id="nightly").label() == "nightly"


def test_tasks_from_folders_and_from_an_artifact_are_the_same(tmp_path: Path) -> None:
    from_folders = load_eval_tasks(EvalConfig(tasks=str(FIXTURES)))
    assert len(from_folders) == 6
    assert {t.layout for t in from_folders} == {"harbor", "legacy"}
    artifact = tmp_path / "tasks.parquet"
    save_tasks(artifact, import_task_folders([FIXTURES]).tasks)
    from_artifact = load_eval_tasks(EvalConfig(tasks=str(artifact)))
    assert [t.id for t in from_artifact] == [t.id for t in from_folders]
    one = load_eval_tasks(EvalConfig(tasks=str(FIXTURES / "harbor" / "hello-file")))
    assert [t.id for t in one] == ["hello-file"]


def test_task_filter(tmp_path: Path) -> None:
    picked = load_eval_tasks(EvalConfig(tasks=str(FIXTURES), task_ids=["hello-file", "csv-total"]))
    assert sorted(t.id for t in picked) == ["csv-total", "hello-file"]
    with pytest.raises(ConfigError, match="no task 'nope'"):
        load_eval_tasks(EvalConfig(tasks=str(FIXTURES), task_ids=["nope"]))
