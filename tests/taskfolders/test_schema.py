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
    return Task(id="gen-port", instruction="Serve on the port.", source="synthetic", family="net", seed=7,
                perturbations=["rename"], metadata=metadata,
                environment_files=[TaskFile("Dockerfile", b"FROM debian:bookworm\n")],
                test_files=[TaskFile("test.sh", b"echo 1 > /logs/verifier/reward.txt\n", 0o755)])  # fmt: skip


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


@pytest.mark.parametrize(("table", "field"), [
    ("[verifier]\nenvironment_mode = \"separate\"\ncollect = [\"cat /app/out\"]\n", "[verifier].environment_mode"),
    ("[agent]\nuser = \"agent\"\n", "[agent].user"),
    ("[verifier]\nuser = \"tester\"\n", "[verifier].user"),
    ("[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n", "[agent].network_mode"),
    ("[environment]\ndocker_image = \"ghcr.io/x/y:1\"\n", "[environment].docker_image"),
    ("[environment]\nworkdir = \"/srv\"\n", "[environment].workdir"),
    ("[environment.env]\nMODE = \"x\"\n", "[environment].env"),
    ("[environment.healthcheck]\ncommand = \"true\"\n", "[environment].healthcheck"),
    ("[[steps]]\ninstruction = \"a\"\nmin_reward = 1.0\n", "[steps]"),
    ("[solution.env]\nKEY = \"v\"\n", "[solution].env"),
])  # fmt: skip
def test_schema_fields_termrl_cannot_run_stop_the_import_by_name(tmp_path, table, field):
    folder = tmp_path / "t"
    (folder / "environment").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "instruction.md").write_text("Do it.\n")
    (folder / "environment" / "Dockerfile").write_text("FROM debian:bookworm\n")
    (folder / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (folder / "task.toml").write_text('version = "1.4"\n' + table)
    with pytest.raises(TaskFormatError, match=re.escape(field) + ".* not supported"):
        read_task_folder(folder)
    (folder / "task.toml").write_text('version = "1.4"\n[verifier]\nenvironment_mode = "shared"\n')
    assert read_task_folder(folder).id == "t"  # the default mode asks for nothing new
