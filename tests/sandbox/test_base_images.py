"""Local base images: recipe hashing, idempotence, and the names Dockerfiles use."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from termrl.sandbox.base_images import BASE_IMAGES, build_base_images, rootfs_tarball


def test_recipe_hash_tracks_the_recipe():
    base = BASE_IMAGES[0]
    assert base.recipe_hash == dataclasses.replace(base).recipe_hash
    assert (
        base.recipe_hash != dataclasses.replace(base, packages=(*base.packages, "vim")).recipe_hash
    )
    assert (
        base.recipe_hash == dataclasses.replace(base, aliases=("other:tag",)).recipe_hash
    )  # tags are not content
    assert base.recipe_hash in rootfs_tarball(base).name


@pytest.mark.podman
def test_build_is_idempotent_and_every_name_resolves(base_images, tmp_path):
    assert build_base_images() == []  # current: nothing rebuilt
    base = BASE_IMAGES[0]
    assert rootfs_tarball(base).exists()
    for tag in base.tags:
        inspect = subprocess.run(
            [
                "podman",
                "image",
                "inspect",
                "--format",
                '{{index .Labels "termrl.recipe"}} {{.Config.WorkingDir}}',
                tag,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        assert inspect.stdout.split() == [base.recipe_hash, "/app"]
    # Short names as task Dockerfiles write them build offline against the local images.
    for name in (
        "termrl/base:bookworm",
        "debian:bookworm-slim",
        "docker.io/library/debian:bookworm",
    ):
        (tmp_path / "Dockerfile").write_text(
            f"FROM {name}\nRUN python3 -c 'import venv' && git --version && jq --version\n"
        )
        done = subprocess.run(
            [
                "podman",
                "build",
                "--pull=never",
                "-q",
                "-t",
                "localhost/termrl/test-from:latest",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
    subprocess.run(
        ["podman", "rmi", "-f", "localhost/termrl/test-from:latest"], capture_output=True
    )
