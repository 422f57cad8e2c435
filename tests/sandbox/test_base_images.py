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


def test_on_demand_recipes_are_left_out_unless_named_and_found_by_any_tag():
    from termrl.sandbox.base_images import ON_DEMAND_IMAGES, find_base_image

    assert not {image.name for image in ON_DEMAND_IMAGES} & {image.name for image in BASE_IMAGES}
    for image in ON_DEMAND_IMAGES:
        assert image.source_python is not None  # what makes them too costly for every make test
        for tag in image.tags:
            assert find_base_image(tag) is image
    recipe = ON_DEMAND_IMAGES[0]
    rebuilt = dataclasses.replace(
        recipe, source_python=dataclasses.replace(recipe.source_python, version="3.99")
    )
    assert rebuilt.recipe_hash != recipe.recipe_hash  # another compiled Python is another image


def _label_and_id(ref: str) -> list[str]:
    done = subprocess.run(
        [
            "podman",
            "image",
            "inspect",
            "--format",
            '{{index .Labels "termrl.recipe"}} {{.Id}}',
            ref,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


@pytest.mark.podman
async def test_a_task_build_moves_a_stand_in_tag_an_older_recipe_left_on_another_image(
    base_images, monkeypatch
):
    """A tag that moved to another recipe (python:3.13-slim-bookworm, from the trixie stand-in to
    the compiled one) still names the old image on machines built before: the build retags it."""
    import os

    from termrl.sandbox import base_images as module
    from termrl.sandbox.image_build import ImageBuilder

    base = BASE_IMAGES[0]
    recipe = dataclasses.replace(
        base, name="localhost/termrl/test-moved:1", aliases=("localhost/termrl-test-moved-alias:1",)
    )  # same content as the base: its rootfs tarball is the base's, so only the import runs
    tarball = rootfs_tarball(recipe)
    if not tarball.exists():
        os.link(rootfs_tarball(base), tarball)
    monkeypatch.setattr(module, "ON_DEMAND_IMAGES", [recipe])
    stale = "localhost/termrl-test-moved-alias:1"
    subprocess.run(["podman", "tag", "termrl/standin:noble", stale], check=True)
    try:
        assert _label_and_id(stale)[0] != recipe.recipe_hash
        await ImageBuilder("podman")._build_base_if_missing(stale)
        assert _label_and_id(stale) == _label_and_id(recipe.name)
        assert _label_and_id(stale)[0] == recipe.recipe_hash
    finally:
        # Only the test's own names: the stale tag sat on the shared noble stand-in.
        subprocess.run(["podman", "untag", stale, stale], capture_output=True)
        subprocess.run(["podman", "rmi", recipe.name], capture_output=True)
        tarball.unlink(missing_ok=True)
