"""Environment repair: offline installs from local wheels, broken virtualenvs, dead package indexes.

easy    install a package from a local wheel (look at the folder, then one pip command; there is no network)
medium  a virtualenv whose interpreter link is broken; rebuild it with the pinned version from local wheels
hard    a requirements file with a dependency chain, pip pointed at a dead index: build the venv offline

Wheels are written here, in Python, as the zip files they are (METADATA,
WHEEL, RECORD), with fixed timestamps so a task's bytes depend only on its seed.
"""

from __future__ import annotations

import base64
import hashlib
import io
import random
import zipfile

from components.synthesize.draft import Draft
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, name, names, token

__all__ = ["TAGS", "generate", "make_wheel"]

TAGS = ["python", "pip", "virtualenv", "environment-repair"]

DEAD_INDEX = "printf '[global]\\nindex-url = http://127.0.0.1:9/simple\\ntimeout = 3\\nretries = 0\\n' > /etc/pip.conf"


def make_wheel(
    dist: str, version: str, modules: dict[str, str], requires: tuple[str, ...] = ()
) -> tuple[str, bytes]:
    """A pure-Python wheel: (file name, bytes). ``modules`` maps paths like ``pkg/__init__.py`` to source."""
    info = f"{dist}-{version}.dist-info"
    files = dict(modules)
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires)
        + f"Summary: {dist} test package\n"
    )
    files[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: termrl\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{info}/top_level.txt"] = "".join(sorted({p.split("/")[0] + "\n" for p in modules}))
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path, text in files.items():
            zi = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, text)
    return f"{dist}-{version}-py3-none-any.whl", buf.getvalue()


def _package(dist: str, version: str, answer: str, body: str = "") -> tuple[str, bytes]:
    src = f'__version__ = "{version}"\n\n\ndef answer():\n    return "{answer}"\n{body}'
    return make_wheel(dist, version, {f"{dist}/__init__.py": src})


def _versions(rng: random.Random, k: int) -> list[str]:
    out: set[str] = set()
    while len(out) < k:
        out.add(f"{rng.randint(0, 3)}.{rng.randint(0, 12)}.{rng.randint(0, 9)}")
    return sorted(out, key=lambda v: tuple(int(x) for x in v.split(".")))


def _easy(rng: random.Random) -> Draft:
    dist, ver, answer = f"{name(rng)}kit", _versions(rng, 1)[0], token(rng)
    wheel, data = _package(dist, ver, answer)
    folder = rng.choice(["/opt/wheels", "/srv/wheelhouse", "/var/cache/wheels", "/root/dist"])
    instruction, style, phrasings = say(
        rng,
        request=f"Install the Python package `{dist}` for the system python3 from the wheel file "
        f"in {folder}. This machine has no network access.",
        report=f"`import {dist}` fails with ModuleNotFoundError under the system python3. This "
        "host is air-gapped, so pip can't download anything, but someone copied the package's "
        f"wheel into {folder}. Please install `{dist}` for the system python3 from that wheel.",
        ticket=f"Install `{dist}` into system python3 from the wheel in {folder}. No network.",
    )
    return Draft(
        instruction=instruction,
        # The wheel's version is in its file name only: a careful agent looks before it installs.
        solution=f"ls {folder}\npip install --no-index {folder}/{wheel}",
        tags=["pip", "wheel", "offline"],
        setup_files={f"wheels/{wheel}": data},
        setup_script=f"mkdir -p {folder}\ncp wheels/*.whl {folder}/",
        check_py=f"""
r = sh("cd / && python3 -c 'import {dist}; print({dist}.__version__, {dist}.answer())'")
check(r.stdout.split() == [{ver!r}, {answer!r}], "python3 cannot use {dist}: " + r.stdout + r.stderr[-500:])
""",
        metadata={"dist": dist, "version": ver, "phrasing": style, "phrasings": phrasings},
    )


def _app(dist: str, want_version: str, answer: str) -> str:
    return (
        f"import {dist}\n\nif {dist}.__version__ != {want_version!r}:\n"
        f"    raise SystemExit('{dist} ' + {dist}.__version__ + ' is installed, this app needs {want_version}')\n"
        f"print('app ok', {dist}.answer())\n"
    )


def _medium(rng: random.Random) -> Draft:
    app, dist = name(rng), f"{name(rng)}lib"
    versions = _versions(rng, 3)
    want, answer = rng.choice(versions), token(rng)
    root, venv = f"/opt/{app}", f"/opt/{app}/venv"
    wheels = [_package(dist, v, answer if v == want else token(rng)) for v in versions]
    setup = f"""
mkdir -p /opt/wheels {root}
cp wheels/*.whl /opt/wheels/
cp app.py {root}/app.py
printf '#!/bin/sh\\nexec {venv}/bin/python {root}/app.py\\n' > {root}/run.sh
chmod +x {root}/run.sh
python3 -m venv --without-pip {venv}
# The venv was made by an interpreter that is gone now.
ln -sfn /usr/local/python3.9/bin/python3.9 {venv}/bin/python3
sed -i 's|^home = .*|home = /usr/local/python3.9/bin|' {venv}/pyvenv.cfg
"""
    instruction, style, phrasings = say(
        rng,
        request=f"{root}/run.sh runs the app with the virtualenv {venv}, but the virtualenv is "
        f"broken. Repair it (recreating it is fine) so that {root}/run.sh works; the app needs "
        f"`{dist}` version {want} installed in that virtualenv. There is no network; wheels are in "
        "/opt/wheels.",
        report=f"After the last Python upgrade {root}/run.sh stopped working: the virtualenv it "
        f"uses, {venv}, still points at an interpreter that is gone. Could you fix that virtualenv "
        "(throwing it away and rebuilding it at the same path is fine) so run.sh works again? The "
        f"app insists on `{dist}` {want} exactly, installed inside {venv}. The machine is offline; "
        "the wheels are in /opt/wheels.",
        ticket=f"venv {venv} broken, {root}/run.sh fails. Repair or recreate in place; install "
        f"`{dist}=={want}` into it; run.sh must work. Offline: wheels in /opt/wheels.",
    )
    # Look at the venv and the wheels, rebuild it in one turn, check what it holds.
    solution = f"""
ls -l {venv}/bin /opt/wheels
python3 -m venv --clear {venv} && {venv}/bin/pip install -q --no-index --find-links /opt/wheels '{dist}=={want}'
ls {venv}/lib/python3*/site-packages
"""
    check = f"""
r = sh({root + "/run.sh"!r})
check(r.returncode == 0 and r.stdout.split() == ["app", "ok", {answer!r}], "run.sh fails: " + r.stdout + r.stderr[-500:])
r = sh("{venv}/bin/python -c 'import sys, {dist}; print(sys.prefix); print({dist}.__file__)'")
lines = r.stdout.split()
check(len(lines) == 2 and lines[0] == {venv!r} and lines[1].startswith({venv!r}),
      "{dist} is not installed inside {venv}: " + r.stdout + r.stderr[-300:])
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["virtualenv", "offline", "pinned-version"],
        setup_files={"app.py": _app(dist, want, answer), **{f"wheels/{w}": d for w, d in wheels}},
        setup_script=setup,
        check_py=check,
        metadata={
            "dist": dist,
            "version": want,
            "available": versions,
            "phrasing": style,
            "phrasings": phrasings,
        },
        agent_timeout_sec=900.0,
    )


def _hard(rng: random.Random) -> Draft:
    app = name(rng)
    top, dep = (f"{n}{s}" for n, s in zip(names(rng, 2, NOUNS), ["client", "core"], strict=True))
    top_versions = _versions(rng, 2)
    top_want, answer = top_versions[-1], token(rng)
    dep_versions = ["1.1.0", "1.4.0", "2.0.0"]
    wheels = [
        make_wheel(
            dep,
            v,
            {
                f"{dep}/__init__.py": f'__version__ = "{v}"\n\n\ndef base():\n    return "{answer}"\n'
            },
        )
        for v in dep_versions
    ]
    for v in top_versions:
        src = (
            f'from {dep} import base\n\n__version__ = "{v}"\n\n\ndef answer():\n    return base()\n'
        )
        wheels.append(make_wheel(top, v, {f"{top}/__init__.py": src}, requires=(f"{dep}>=1.2,<2",)))
    root = f"{rng.choice(['/srv', '/opt', '/home/user', '/app'])}/{app}"
    venv = f"{root}/{rng.choice(['.venv', 'venv', 'env', '.env'])}"
    setup = f"""
mkdir -p /opt/wheels {root}
cp wheels/*.whl /opt/wheels/
cp app.py {root}/app.py
printf '{top}=={top_want}\\n' > {root}/requirements.txt
printf '#!/bin/sh\\nexec {venv}/bin/python {root}/app.py\\n' > {root}/run.sh
chmod +x {root}/run.sh
{DEAD_INDEX}
"""
    instruction, style, phrasings = say(
        rng,
        request=f"Set up the Python app in {root}: create a virtualenv at {venv} and install "
        f"{root}/requirements.txt (it pins `{top}`) into it with the dependencies it pulls in, so "
        f"that {root}/run.sh works. This machine has no network, and pip is configured to use a "
        "package index that does not answer; every wheel needed is in /opt/wheels.",
        report=f"Deploying the app in {root} hangs and then fails at the pip step: pip is "
        "configured for a package index that never answers, and this machine has no network "
        "anyway. Everything it needs has been put in /opt/wheels. Please create the virtualenv "
        f"{venv}, install {root}/requirements.txt (which pins `{top}`) into it along with whatever "
        f"dependencies that drags in, and make sure {root}/run.sh runs.",
        ticket=f"{root}: new venv at {venv}; install {root}/requirements.txt (pins `{top}`) + its "
        f"deps into it; {root}/run.sh must work. No network, configured pip index is dead; all "
        "wheels in /opt/wheels.",
    )
    solution = f"""
python3 -m venv {venv}
{venv}/bin/pip install -q --no-index --find-links /opt/wheels -r {root}/requirements.txt
{root}/run.sh
"""
    check = f"""
r = sh({root + "/run.sh"!r})
check(r.returncode == 0 and r.stdout.split() == ["app", "ok", {answer!r}], "run.sh fails: " + r.stdout + r.stderr[-500:])
r = sh("{venv}/bin/python -c 'import importlib.metadata as m; print(m.version(\\"{top}\\"), m.version(\\"{dep}\\"))'")
check(r.stdout.split() == [{top_want!r}, "1.4.0"], "installed versions in {venv}: " + r.stdout + r.stderr[-300:])
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["virtualenv", "requirements", "offline", "dependencies"],
        setup_files={
            "app.py": _app(top, top_want, answer),
            **{f"wheels/{w}": d for w, d in wheels},
        },
        setup_script=setup,
        check_py=check,
        metadata={
            "top": top,
            "dependency": dep,
            "version": top_want,
            "phrasing": style,
            "phrasings": phrasings,
        },
        agent_timeout_sec=900.0,
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One environment-repair task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
