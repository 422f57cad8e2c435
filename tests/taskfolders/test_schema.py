"""Harbor schema 1.4: export writes only Harbor's tables; what it cannot run stops the import."""

from __future__ import annotations

import re
import tomllib

import pytest
import tomli_w

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import TaskFormatError
from termrl.taskfolders import export_tasks, read_task_folder
from termrl.taskfolders.schema import HARBOR_TABLES


def _task(**metadata) -> Task:
    return Task(
        id="gen-port",
        instruction="Serve on the port.",
        source="synthetic",
        family="net",
        seed=7,
        perturbations=["rename"],
        metadata=metadata,
        environment_files=[TaskFile("Dockerfile", b"FROM debian:bookworm\n")],
        test_files=[TaskFile("test.sh", b"echo 1 > /logs/verifier/reward.txt\n", 0o755)],
    )


def test_termrl_data_goes_under_metadata_and_survives_a_round_trip(tmp_path):
    task = _task(generator="port-server", format="json", port=8123, metadata={"author_name": "gen"})
    [folder] = export_tasks([task], tmp_path)
    config = tomllib.loads((folder / "task.toml").read_text())
    assert set(config) <= HARBOR_TABLES  # nothing at the top level Harbor's linter does not know
    ours = config["metadata"]["termrl"]
    assert ours["extra"] == {"generator": "port-server", "format": "json", "port": 8123}
    assert (ours["source"], ours["seed"], ours["perturbations"]) == ("synthetic", 7, ["rename"])
    back = read_task_folder(folder)
    task.adaptations = back.adaptations  # import records the base image's stand-in
    assert back.to_row() == task.to_row()


def test_exports_with_a_top_level_termrl_table_still_import(tmp_path):
    [folder] = export_tasks([_task(generator="g")], tmp_path)
    config = tomllib.loads((folder / "task.toml").read_text())
    ours = config["metadata"].pop("termrl")
    extra = ours.pop("extra")
    old = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in extra.items())
    (folder / "task.toml").write_text(old + tomli_w.dumps({**config, "termrl": ours}))
    back = read_task_folder(folder)
    assert (back.source, back.seed, back.metadata["generator"]) == ("synthetic", 7, "g")


def _task_folder(tmp_path, task_toml: str):
    """The smallest task folder that reads, with ``task_toml`` as its task.toml."""
    folder = tmp_path / "t"
    (folder / "environment").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "instruction.md").write_text("Do it.\n")
    (folder / "environment" / "Dockerfile").write_text("FROM debian:bookworm\n")
    (folder / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (folder / "task.toml").write_text(task_toml)
    return folder


@pytest.mark.parametrize(
    ("table", "field"),
    [
        (
            '[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n',
            "[agent].allowed_hosts",
        ),
        ('[environment]\nnetwork_mode = "allowlist"\n', "[environment].network_mode"),
        ('[agent]\nnetwork_mode = "public"\n', "[agent].network_mode"),  # the environment has none
        ('[environment.healthcheck]\ncommand = "true"\n', "[environment].healthcheck"),
        ('[environment]\nos = "windows"\n', "[environment].os"),
        (
            '[verifier]\nenvironment_mode = "separate"\n[verifier.environment]\ndocker_image = "x:1"\n',
            "[verifier.environment] keys ['docker_image']",
        ),
    ],
)
def test_schema_fields_termrl_cannot_run_stop_the_import_by_name(tmp_path, table, field):
    folder = _task_folder(tmp_path, 'version = "1.4"\n' + table)
    with pytest.raises(TaskFormatError, match=re.escape(field) + ".* not supported"):
        read_task_folder(folder)
    (folder / "task.toml").write_text('version = "1.4"\n[verifier]\nenvironment_mode = "shared"\n')
    assert read_task_folder(folder).id == "t"  # the default mode asks for nothing new


RUN_CONFIG = """\
version = "1.4"
artifacts = ["/app/out.json", {source = "/logs/artifacts", exclude = ["*.tmp"]}]

[agent]
user = "agent"

[verifier]
user = 0
environment_mode = "separate"
collect = [{command = "cp /app/state /app/out.json", timeout_sec = 30.0}]

[verifier.env]
STRICT = "1"

[environment]
docker_image = "debian:bookworm"
workdir = "/srv"

[environment.env]
MODE = "fast"
TOKEN = "${TOKEN:-none}"

[solution.env]
HINT = "yes"
"""


def test_run_config_fields_import_into_the_task_and_export_back(tmp_path):
    folder = tmp_path / "t"
    (folder / "tests").mkdir(parents=True)  # no environment/: docker_image names the image
    (folder / "instruction.md").write_text("Do it.\n")
    (folder / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (folder / "task.toml").write_text(RUN_CONFIG)
    task = read_task_folder(folder)
    assert (task.docker_image, task.workdir, task.agent_user, task.verifier_user) == (
        "debian:bookworm",
        "/srv",
        "agent",
        "0",
    )
    assert task.env == {
        "MODE": "fast",
        "TOKEN": "${TOKEN:-none}",
    }  # templates resolve when a sandbox starts
    assert (task.solution_env, task.verifier_env) == ({"HINT": "yes"}, {"STRICT": "1"})
    assert task.verifier_mode == "separate"
    assert task.verifier_collect == [
        {"command": "cp /app/state /app/out.json", "timeout_sec": 30.0}
    ]
    assert [a["source"] for a in task.artifacts] == ["/app/out.json", "/logs/artifacts"]
    assert task.metadata == {"version": "1.4"}  # nothing left over, nothing dropped
    [exported] = export_tasks([task], tmp_path / "out")
    written = tomllib.loads((exported / "task.toml").read_text())
    assert written["verifier"]["user"] == 0 and written["agent"]["user"] == "agent"
    assert written["environment"]["env"]["TOKEN"] == "${TOKEN:-none}"
    assert set(written) <= HARBOR_TABLES
    back = read_task_folder(exported)
    assert back.to_row() == task.to_row()


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('[verifier]\nenvironment_mode = "elsewhere"\n', "environment_mode must be"),
        ('artifacts = ["relative/path"]\n', "absolute source"),
        ('artifacts = [{source = "/db", service = "db"}]\n', "compose services"),
        ('[verifier]\ncollect = [{command = "x", service = "db"}]\n', "compose services"),
        ('[environment]\nworkdir = "srv"\n', "workdir must be an absolute path"),
        ("[environment.env]\nN = 1\n", "table of strings"),
    ],
)
def test_bad_run_config_fields_are_named(tmp_path, table, problem):
    folder = _task_folder(tmp_path, table)
    with pytest.raises(TaskFormatError, match=re.escape(problem)):
        read_task_folder(folder)


def _multi_step(tmp_path, toml: str):
    folder = tmp_path / "t"
    for path in ("environment", "tests", "steps/a/tests"):
        (folder / path).mkdir(parents=True, exist_ok=True)
    (folder / "environment" / "Dockerfile").write_text("FROM debian:bookworm\n")
    (folder / "steps" / "a" / "instruction.md").write_text("Do a.\n")
    (folder / "steps" / "a" / "tests" / "test.sh").write_text(
        "echo 1 > /logs/verifier/reward.txt\n"
    )
    (folder / "task.toml").write_text('schema_version = "1.4"\n' + toml)
    return folder


def test_a_multi_step_task_needs_no_top_level_instruction_or_tests(tmp_path):
    task = read_task_folder(
        _multi_step(tmp_path, '[[steps]]\nname = "a"\nmin_reward = {reward = 1.0}\n')
    )
    assert task.instruction == "Do a.\n" and task.steps[0]["min_reward"] == {"reward": 1.0}
    assert [f.path for f in task.step_files] == ["a/instruction.md", "a/tests/test.sh"]


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        (
            '[[steps]]\nname = "a"\n[steps.healthcheck]\ncommand = "true"\n',
            "healthcheck are not supported in a step",
        ),
        ('[[steps]]\nname = "a"\n[steps.agent]\nuser = "x"\n', "agent.user are not supported"),
        ('[[steps]]\nname = "a"\nmin_reward = {accuracy = 1.0}\n', "only 'reward' can be gated"),
        ('[[steps]]\nname = "b"\n', "cannot read steps/b/instruction.md"),
        (
            'multi_step_reward_strategy = "max"\n[[steps]]\nname = "a"\n',
            "multi_step_reward_strategy must be",
        ),
        (
            '[verifier]\nenvironment_mode = "separate"\n[[steps]]\nname = "a"\n',
            "in a multi-step task is not supported",
        ),
    ],
)
def test_bad_steps_are_named(tmp_path, toml, problem):
    with pytest.raises(TaskFormatError, match=re.escape(problem)):
        read_task_folder(_multi_step(tmp_path, toml))


STEP_B = "Do b.\n"


def _two_steps(tmp_path, first: str, second: str):
    folder = _multi_step(
        tmp_path, f'[[steps]]\nname = "a"\n{first}\n[[steps]]\nname = "b"\n{second}\n'
    )
    (folder / "steps" / "b" / "tests").mkdir(parents=True)
    (folder / "steps" / "b" / "instruction.md").write_text(STEP_B)
    (folder / "steps" / "b" / "tests" / "test.sh").write_text(
        "echo 1 > /logs/verifier/reward.txt\n"
    )
    return folder


def test_step_keys_termrl_does_not_know_are_kept_with_a_warning_and_exported(tmp_path):
    folder = _two_steps(
        tmp_path,
        'title = "first"\nid = 1',
        'dependencies = ["a"]\ninherit_prior_session = true\ntitle = "second"\n'
        "[steps.rubric]\nweight = 2",
    )
    warnings: list[str] = []
    task = read_task_folder(folder, warnings)
    assert warnings == [
        f"{folder}: step 'a': id is not a key termrl knows: kept in the task, not acted on",
        f"{folder}: step 'a': title is not a key termrl knows: kept in the task, not acted on",
        f"{folder}: step 'b': rubric is not a key termrl knows: kept in the task, not acted on",
        f"{folder}: step 'b': title is not a key termrl knows: kept in the task, not acted on",
    ]
    assert task.steps[0]["extra"] == {"title": "first", "id": 1}
    assert (task.steps[1]["dependencies"], task.steps[1]["inherit_prior_session"]) == (["a"], True)
    [out] = export_tasks([task], tmp_path / "out")
    steps = tomllib.loads((out / "task.toml").read_text())["steps"]
    assert steps[1] == {
        "name": "b",
        "dependencies": ["a"],
        "inherit_prior_session": True,
        "title": "second",
        "rubric": {"weight": 2},
    }
    assert read_task_folder(out).steps == task.steps  # the round trip keeps them


@pytest.mark.parametrize(
    ("second", "problem"),
    [
        ("inherit_prior_session = false", "inherit_prior_session = false (a fresh session"),
        ('dependencies = ["c"]', "dependencies names ['c'], which are not earlier steps"),
        ('depends_on = ["b"]', "depends_on names ['b'], which are not earlier steps"),
        ("dependencies = 3", "dependencies must be a list of step names"),
        ('[steps.verifier]\nenvironment_mode = "separate"', "verifier.environment_mode are not"),
    ],
)
def test_step_keys_whose_meaning_termrl_cannot_run_are_refused_by_name(tmp_path, second, problem):
    with pytest.raises(TaskFormatError, match=re.escape(problem)):
        read_task_folder(_two_steps(tmp_path, "", second))


def test_a_table_harbor_does_not_know_is_kept_with_a_warning(tmp_path):
    folder = _multi_step(tmp_path, '[[steps]]\nname = "a"\n[custom]\nowner = "x"\n')
    warnings: list[str] = []
    task = read_task_folder(folder, warnings)
    assert task.metadata["custom"] == {"owner": "x"}
    assert warnings == [
        f"{folder}: task.toml: [custom] is not a Harbor table termrl knows: kept in the task, "
        "not acted on"
    ]


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ("[environment]\ngpus = 1\n", "[environment].gpus = 1: termrl's sandboxes get no GPU"),
        ('[environment]\ngpus = "x"\n', "[environment].gpus must be a whole number"),
    ],
)
def test_resources_that_cannot_be_met_stop_the_import_with_the_reason(tmp_path, toml, problem):
    folder = _multi_step(tmp_path, '[[steps]]\nname = "a"\n' + toml)
    with pytest.raises(TaskFormatError, match=re.escape(problem)):
        read_task_folder(folder)


def test_zero_gpus_asks_for_nothing(tmp_path):
    folder = _multi_step(tmp_path, '[[steps]]\nname = "a"\n[environment]\ngpus = 0\n')
    assert read_task_folder(folder).metadata["environment"] == {"gpus": 0}
