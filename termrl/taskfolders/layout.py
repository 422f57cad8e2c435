"""What each Terminal-Bench layout looks like, in one place.

Harbor (Terminal-Bench 2.x)::

    <task-id>/
    ├── instruction.md        the prompt
    ├── task.toml             [metadata] [agent] [verifier] [environment] (+ our [metadata.termrl])
    ├── environment/          image build context
    │   └── Dockerfile
    ├── solution/solve.sh     reference solution (+ files), run as /solution/solve.sh
    └── tests/test.sh         verifier (+ files), run as /tests/test.sh; writes
                              /logs/verifier/reward.txt

Legacy (Terminal-Bench 1.0)::

    <task-id>/
    ├── task.yaml             instruction, difficulty, category, tags, timeouts
    ├── Dockerfile            the task folder itself is the build context
    ├── docker-compose.yaml   (optional)
    ├── run-tests.sh          copied to /tests with tests/, run as `bash /tests/run-tests.sh`
    ├── solution.sh | solution.yaml
    └── tests/                pytest files; pass = >=1 PASSED and no FAILED/ERROR

Imported legacy tasks keep their file names; on export they become a Harbor
folder whose ``[metadata.termrl]`` table records the commands, so re-importing gives
the same row.
"""

from __future__ import annotations

__all__ = [
    "HARBOR_DEFAULTS",
    "HARBOR_SOLUTION_COMMAND",
    "HARBOR_TEST_COMMAND",
    "LEGACY_DEFAULTS",
    "LEGACY_ROOT_FILES",
    "LEGACY_SOLUTION_COMMAND",
    "LEGACY_TEST_COMMAND",
    "TERMRL_KEYS",
]

HARBOR_SOLUTION_COMMAND = "bash /solution/solve.sh"
HARBOR_TEST_COMMAND = "bash /tests/test.sh"
LEGACY_SOLUTION_COMMAND = "bash /solution/solution.sh"
LEGACY_TEST_COMMAND = "bash /tests/run-tests.sh"

# Files at a legacy task's root that are not part of the image build context.
LEGACY_ROOT_FILES = {"task.yaml", "run-tests.sh", "solution.sh", "solution.yaml"}

# Values a task file may leave out, as each format's harness assumes them.
HARBOR_DEFAULTS = {
    "agent_timeout_sec": 600.0,
    "verifier_timeout_sec": 600.0,
    "build_timeout_sec": 600.0,
    "cpus": 1.0,
    "memory_mb": 2048,
    "storage_mb": 10240,
    "allow_internet": False,
}
LEGACY_DEFAULTS = {
    "agent_timeout_sec": 360.0,
    "verifier_timeout_sec": 60.0,
    "build_timeout_sec": 600.0,
    "cpus": 1.0,
    "memory_mb": 2048,
    "storage_mb": 10240,
    # 1.0 containers had network; termrl runs tasks offline unless a task asks.
    "allow_internet": False,
}

# Keys of the [metadata.termrl] table in an exported task.toml: row fields with no Harbor home.
TERMRL_KEYS = (
    "source",
    "layout",
    "solution_command",
    "test_command",
    "scoring",
    "seed",
    "perturbations",
    "adaptations",
)
