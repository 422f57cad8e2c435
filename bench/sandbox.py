"""Sandbox benchmark: every backend against plain `podman run` / `podman exec`, in one run.

    python bench/sandbox.py [--backends podman,bwrap] [--creates 20] [--execs 200] [--concurrent 64]

The backend ``podman-image-root`` is podman running containers on podman's own
root (no ``storage_mb`` limit), as docker and rootless podman do: beside
``podman``, it prices the disk limit's own mounts.

Per backend: create + first exec p50/p99 (also with network="egress"), exec
round trip p50/p99, and N concurrent sessions: wall time to open them all and
the host memory they hold, both as the drop in MemAvailable (includes kernel
memory: namespaces, overlay, page tables; noisy) and as the summed PSS of the
processes that appeared (the sandboxes' shells plus podman's conmon). The baselines are measured in the same run, and every
figure is also printed as a ratio to them. Issue 3's targets: bwrap create
p50 <= 30 ms and exec <= 2 ms; podman create p50 <= 350 ms; 256 concurrent
sessions in 24 GiB (the memory per session printed here scales that).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import time

from termrl.sandbox import SandboxManager, SandboxSpec, build_base_images

IMAGE = "termrl/base:bookworm"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def mem_available_mb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable")


def pss_by_pid() -> dict[int, int]:
    """Proportional set size (kB) of every process readable now."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/smaps_rollup") as f:
                    out[int(entry.name)] = next(
                        int(line.split()[1]) for line in f if line.startswith("Pss:")
                    )
            except (OSError, StopIteration, ValueError):
                continue
    return out


def settle(max_wait_sec: float = 180.0) -> None:
    """Wait for the previous backend's teardown to finish (1-min load below the CPU count)."""
    deadline = time.monotonic() + max_wait_sec
    while os.getloadavg()[0] > (os.cpu_count() or 1) and time.monotonic() < deadline:
        time.sleep(5)


def baselines(n: int) -> dict[str, float]:
    runs = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(
            ["podman", "run", "--rm", "--network=none", IMAGE, "true"],
            check=True,
            capture_output=True,
        )
        runs.append(time.perf_counter() - t)
    name = "termrl-bench-baseline"
    subprocess.run(
        ["podman", "run", "-d", "--rm", "--name", name, "--network=none", IMAGE, "sleep", "600"],
        check=True,
        capture_output=True,
    )
    execs = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            subprocess.run(["podman", "exec", name, "true"], check=True, capture_output=True)
            execs.append(time.perf_counter() - t)
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True)
    return {"run_p50": statistics.median(runs), "exec_p50": statistics.median(execs)}


async def bench_backend(
    backend: str, creates: int, execs: int, concurrent: int
) -> dict[str, float]:
    spec = SandboxSpec(image=IMAGE, memory_mb=256)
    out: dict[str, float] = {}
    async with SandboxManager(backend=backend.removesuffix("-image-root")) as manager:
        if backend.endswith("-image-root"):
            manager.backend.own_roots = False  # type: ignore[attr-defined]
        await (await manager.create(spec)).close()  # warm-up (bwrap extracts the rootfs once)
        create_times = []
        for _ in range(creates):
            t = time.perf_counter()
            session = await manager.create(spec)
            await session.exec("true")
            create_times.append(time.perf_counter() - t)
            await session.close()
        out["create_p50"], out["create_p99"] = (
            statistics.median(create_times),
            pct(create_times, 0.99),
        )
        egress_times = []
        for _ in range(max(3, creates // 4)):
            t = time.perf_counter()
            session = await manager.create(
                SandboxSpec(image=IMAGE, memory_mb=256, network="egress")
            )
            await session.exec("true")
            egress_times.append(time.perf_counter() - t)
            await session.close()
        out["egress_create_p50"] = statistics.median(egress_times)
        async with await manager.create(spec) as session:
            rtts = []
            for _ in range(execs):
                t = time.perf_counter()
                await session.exec("true")
                rtts.append(time.perf_counter() - t)
        out["exec_p50"], out["exec_p99"] = statistics.median(rtts), pct(rtts, 0.99)
        before, before_pids = mem_available_mb(), set(pss_by_pid())
        t = time.perf_counter()
        sessions = await asyncio.gather(*(manager.create(spec) for _ in range(concurrent)))
        await asyncio.gather(*(s.exec("echo $$ > /tmp/me") for s in sessions))
        out["concurrent_wall"] = time.perf_counter() - t
        await asyncio.sleep(1)
        out["concurrent_mem_mb"] = before - mem_available_mb()
        out["concurrent_pss_mb"] = (
            sum(kb for pid, kb in pss_by_pid().items() if pid not in before_pids) / 1024
        )
        await asyncio.gather(*(s.close() for s in sessions))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="podman,bwrap")
    parser.add_argument("--creates", type=int, default=20)
    parser.add_argument("--execs", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=64)
    args = parser.parse_args()
    build_base_images()
    base = baselines(max(5, args.creates // 2))
    print(
        f"baseline  podman run --rm true p50 {base['run_p50'] * 1000:7.1f} ms   podman exec true p50 {base['exec_p50'] * 1000:7.1f} ms"
    )
    for backend in args.backends.split(","):
        settle()
        r = asyncio.run(bench_backend(backend, args.creates, args.execs, args.concurrent))
        per = max(r["concurrent_mem_mb"], r["concurrent_pss_mb"]) / args.concurrent
        print(
            f"{backend:8s}  create+exec p50 {r['create_p50'] * 1000:7.1f} ms p99 {r['create_p99'] * 1000:7.1f} ms"
            f" ({r['create_p50'] / base['run_p50']:.2f}x podman run);"
            f" with egress p50 {r['egress_create_p50'] * 1000:.1f} ms\n"
            f"{'':8s}  exec rtt    p50 {r['exec_p50'] * 1000:7.2f} ms p99 {r['exec_p99'] * 1000:7.2f} ms"
            f" ({r['exec_p50'] / base['exec_p50']:.4f}x podman exec)\n"
            f"{'':8s}  {args.concurrent} concurrent: {r['concurrent_wall']:.1f} s wall,"
            f" MemAvailable -{r['concurrent_mem_mb']:.0f} MB, PSS {r['concurrent_pss_mb']:.0f} MB"
            f" ({per:.1f} MB/session by the larger -> 256 sessions ~{per * 256 / 1024:.1f} GiB)"
        )


if __name__ == "__main__":
    main()
