"""Sandbox benchmark: every backend against plain `podman run` / `podman exec`, in one run.

    python bench/sandbox.py [--backends podman,bwrap] [--creates 20] [--execs 200] [--concurrent 64]

Per backend: create + first exec p50/p99, exec round trip p50/p99, and N
concurrent sessions (wall time to open them all and host memory they hold,
from MemAvailable). The baselines are measured in the same run, and every
figure is also printed as a ratio to them. Issue 3's targets: bwrap create
p50 <= 30 ms and exec <= 2 ms; podman create p50 <= 350 ms; 256 concurrent
sessions in 24 GiB (the memory per session printed here scales that).
"""

from __future__ import annotations

import argparse
import asyncio
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


def baselines(n: int) -> dict[str, float]:
    runs = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(["podman", "run", "--rm", "--network=none", IMAGE, "true"], check=True, capture_output=True)
        runs.append(time.perf_counter() - t)
    name = "termrl-bench-baseline"
    subprocess.run(["podman", "run", "-d", "--rm", "--name", name, "--network=none", IMAGE, "sleep", "600"],
                   check=True, capture_output=True)  # fmt: skip
    execs = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            subprocess.run(["podman", "exec", name, "true"], check=True, capture_output=True)
            execs.append(time.perf_counter() - t)
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True)
    return {"run_p50": statistics.median(runs), "exec_p50": statistics.median(execs)}


async def bench_backend(backend: str, creates: int, execs: int, concurrent: int) -> dict[str, float]:
    spec = SandboxSpec(image=IMAGE, memory_mb=256)
    out: dict[str, float] = {}
    async with SandboxManager(backend=backend) as manager:
        await (await manager.create(spec)).close()  # warm-up (bwrap extracts the rootfs once)
        create_times = []
        for _ in range(creates):
            t = time.perf_counter()
            session = await manager.create(spec)
            await session.exec("true")
            create_times.append(time.perf_counter() - t)
            await session.close()
        out["create_p50"], out["create_p99"] = statistics.median(create_times), pct(create_times, 0.99)
        async with await manager.create(spec) as session:
            rtts = []
            for _ in range(execs):
                t = time.perf_counter()
                await session.exec("true")
                rtts.append(time.perf_counter() - t)
        out["exec_p50"], out["exec_p99"] = statistics.median(rtts), pct(rtts, 0.99)
        before = mem_available_mb()
        t = time.perf_counter()
        sessions = await asyncio.gather(*(manager.create(spec) for _ in range(concurrent)))
        await asyncio.gather(*(s.exec("echo $$ > /tmp/me") for s in sessions))
        out["concurrent_wall"] = time.perf_counter() - t
        await asyncio.sleep(1)
        out["concurrent_mem_mb"] = before - mem_available_mb()
        await asyncio.gather(*(s.close() for s in sessions))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="podman,bwrap")
    parser.add_argument("--creates", type=int, default=20)
    parser.add_argument("--execs", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=64)
    args = parser.parse_args()
    build_base_images()
    base = baselines(max(5, args.creates // 2))
    print(f"baseline  podman run --rm true p50 {base['run_p50'] * 1000:7.1f} ms   podman exec true p50 {base['exec_p50'] * 1000:7.1f} ms")
    for backend in args.backends.split(","):
        r = asyncio.run(bench_backend(backend, args.creates, args.execs, args.concurrent))
        per = r["concurrent_mem_mb"] / args.concurrent
        print(
            f"{backend:8s}  create+exec p50 {r['create_p50'] * 1000:7.1f} ms p99 {r['create_p99'] * 1000:7.1f} ms"
            f" ({r['create_p50'] / base['run_p50']:.2f}x podman run)\n"
            f"{'':8s}  exec rtt    p50 {r['exec_p50'] * 1000:7.2f} ms p99 {r['exec_p99'] * 1000:7.2f} ms"
            f" ({r['exec_p50'] / base['exec_p50']:.4f}x podman exec)\n"
            f"{'':8s}  {args.concurrent} concurrent: {r['concurrent_wall']:.1f} s wall, {r['concurrent_mem_mb']:.0f} MB"
            f" ({per:.1f} MB/session -> 256 sessions ~{per * 256 / 1024:.1f} GiB)"
        )


if __name__ == "__main__":
    main()
