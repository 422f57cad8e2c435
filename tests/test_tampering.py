"""tampering's pure helpers: which files are modules where Python starts, probe arguments in runs.

``find_tampering`` itself runs in real sandboxes (tests/test_taskrun_integrity.py).
"""

from __future__ import annotations

import shlex

from termrl.tampering import PROBE_ARGS_BYTES, _batches, _installed_code, _module_name


def test_a_module_is_what_an_import_from_the_working_directory_finds():
    found = {
        path: _module_name(path, "/app")
        for path in (
            "/app/pytest.py",
            "/app/inspect.pyc",
            "/app/json/__init__.py",
            "/app/_json.cpython-311-x86_64-linux-gnu.so",
            "/app/fast.abi3.so",
            "/app/lib/inspect.py",  # not where Python starts
            "/app/notes.txt",
            "/app/my-tool.py",  # no identifier: never imported
            "/appx/json.py",
            "/app",
        )
    }
    assert found == {
        "/app/pytest.py": "pytest",
        "/app/inspect.pyc": "inspect",
        "/app/json/__init__.py": "json",
        "/app/_json.cpython-311-x86_64-linux-gnu.so": "_json",
        "/app/fast.abi3.so": "fast",
        "/app/lib/inspect.py": None,
        "/app/notes.txt": None,
        "/app/my-tool.py": None,
        "/appx/json.py": None,
        "/app": None,
    }


def test_installed_code_is_python_or_a_shared_library_in_a_system_folder_of_code():
    assert _installed_code("/usr/lib/python3.11/inspect.py")
    assert _installed_code("/lib/x86_64-linux-gnu/libz.so.1.2.13")
    assert _installed_code("/usr/local/lib/python3.11/dist-packages/yaml/_yaml.so")
    assert not _installed_code("/usr/share/nginx/html/index.html")
    assert not _installed_code("/usr/lib/ssl/openssl.cnf")
    assert not _installed_code("/app/main.py")


def test_probe_arguments_come_in_runs_below_linuxs_limit_on_one_argument():
    paths = [f"/usr/lib/python3/dist-packages/pkg{i}/it's {i}.py" for i in range(5000)]
    runs = list(_batches(paths))
    assert len(runs) > 1 and all(len(run) <= PROBE_ARGS_BYTES + 200 for run in runs)
    assert [arg for run in runs for arg in shlex.split(run)] == paths
    assert list(_batches([])) == []
