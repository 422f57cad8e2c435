"""Config-file edits: .env files, INI sections, YAML with an environment override.

easy    set one key of a .env file (change it or add it, never duplicate it)
medium  change a key in one INI section when other sections have the same key (look, edit, check)
hard    an app merges config.yaml with overrides from an env file: make the effective settings right

The checks parse the files (configparser for INI, a small YAML-subset reader
for YAML, KEY=value lines for env files), so any correct edit passes: quoting,
spacing, ``export`` prefixes and rewritten files included.
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, name, names, token
from components.synthesize.perturb import planted_files

__all__ = ["TAGS", "generate"]

TAGS = ["config", "dotenv", "ini", "yaml"]

ENV_READER = """

def env_file(path):
    values, seen = {}, []
    for line in read(path).splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        key = key.strip().removeprefix("export ").strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\\"'":
            value = value[1:-1]
        seen.append(key)
        values[key] = value
    return values, seen
"""

# A YAML subset: nested mappings by indentation, scalars, block lists and flow lists.
YAML_READER = """

def _scalar(text):
    text = text.split(" #", 1)[0].strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\\"'":
        return text[1:-1]
    if text.startswith("[") and text.endswith("]"):
        return [_scalar(t) for t in text[1:-1].split(",") if t.strip()]
    return text


def yaml_subset(text):
    root = {}
    stack = [(-1, root, None, None)]  # (indent, node, its owner, its key in the owner)
    for raw in text.splitlines():
        if not raw.strip() or raw.strip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip())
        line = raw.strip()
        while stack[-1][0] >= indent and len(stack) > 1:
            stack.pop()
        _, node, owner, key = stack[-1]
        if line.startswith("- ") or line == "-":
            if node == {} and owner is not None:  # a key whose value turns out to be a list
                node = owner[key] = []
                stack[-1] = (stack[-1][0], node, owner, key)
            if isinstance(node, list):
                node.append(_scalar(line[1:]))
            continue
        if not isinstance(node, dict):
            continue
        name, _, value = line.partition(":")
        name = name.strip().strip("\\"'")
        if value.strip() and not value.strip().startswith("#"):
            node[name] = _scalar(value)
        else:
            node[name] = {}
            stack.append((indent, node[name], node, name))
    return root
"""


def _easy(rng: random.Random) -> Draft:
    app = name(rng)
    path = f"/srv/{app}/.env"
    keys = [
        f"{w.upper()}_{rng.choice(['URL', 'HOST', 'MODE', 'LEVEL', 'NAME', 'TOKEN'])}"
        for w in names(rng, 6, WORDS)
    ]
    values = {k: token(rng, 8) for k in keys}
    key = rng.choice(keys)
    new = f"{rng.choice(NOUNS)}-{rng.randint(10, 99)}"
    present = rng.random() < 0.6
    if not present:
        key = f"{app.upper()}_{rng.choice(['PORT_OVERRIDE', 'REGION', 'FEATURE_FLAGS'])}"
    lines = [f"# {app} settings"] + [f"{k}={v}" for k, v in values.items()]
    instruction, style, phrasings = say(
        rng,
        request=f"In {path}, set `{key}` to `{new}`. Keep every other setting as it is, and make sure the "
        "key appears only once.",
        report=f"{app} is picking up the wrong value for {key}. It should be `{new}`; the setting lives in "
        f"{path}. Please fix it there without touching the other variables.",
        ticket=f"{path}: {key}={new}. No duplicates, rest unchanged.",
    )
    solution = f"sed -i '/^{key}=/d' {path} && echo '{key}={new}' >> {path}"
    expected = {**values, key: new}
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["dotenv"],
        setup_files={"env": "\n".join(lines) + "\n"},
        setup_script=f"mkdir -p /srv/{app}\ncp env {path}",
        check_py=ENV_READER
        + f"""
values, seen = env_file({path!r})
check(seen.count({key!r}) == 1, "{key} is set %d times" % seen.count({key!r}))
check(values == {py_literal(expected)}, "{path} holds %r" % values)
""",
        metadata={
            "path": path,
            "key": key,
            "value": new,
            "key_present": present,
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


def _medium(rng: random.Random) -> Draft:
    app = name(rng)
    path = f"/etc/{app}/{app}.ini"
    sections = names(rng, 4, ["server", "metrics", "admin", "database", "cache", "worker", "api"])
    shared = rng.choice(["port", "host", "timeout", "workers"])
    target = rng.choice(sections)
    ini: dict[str, dict[str, str]] = {}
    for s in sections:
        ini[s] = {shared: str(rng.randint(2, 9000))}
        for k in rng.sample(["enabled", "user", "path", "retries", "log_level"], k=2):
            ini[s][k] = token(rng, 5)
    new = str(rng.randint(10000, 60000))
    text = []
    for s, kv in ini.items():
        text.append(f"[{s}]")
        if s == target:
            text.append(f"; {shared} = {rng.randint(2, 9000)}")
        text += [f"{k} = {v}" for k, v in kv.items()] + [""]
    instruction, style, phrasings = say(
        rng,
        request=f"Change `{shared}` in the `[{target}]` section of {path} to {new}. The other sections also "
        f"have a `{shared}`; leave those (and everything else) unchanged.",
        report=f"After the last deploy the {target} part of {app} uses the wrong {shared}. It must be {new}, "
        f"set in the [{target}] section of {path} — only there, the other sections are fine.",
        ticket=f"{path} [{target}] {shared} -> {new}. Other sections untouched.",
    )
    solution = f"""
grep -n '^\\[\\|^{shared}' {path}
sed -i '/^\\[{target}\\]/,/^\\[/ s/^{shared} *=.*/{shared} = {new}/' {path}
sed -n '/^\\[{target}\\]/,/^\\[/p' {path}
"""
    expected = {s: dict(kv) for s, kv in ini.items()}
    expected[target][shared] = new
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["ini", "sections"],
        setup_files={"app.ini": "\n".join(text)},
        setup_script=f"mkdir -p /etc/{app}\ncp app.ini {path}",
        check_py=f"""
import configparser
cp = configparser.ConfigParser(interpolation=None)
try:
    cp.read_string(read({path!r}))
except configparser.Error as e:
    fail("{path} no longer parses: %s" % e)
got = {{s: dict(cp[s]) for s in cp.sections()}}
check(got == {py_literal(expected)}, "{path} holds %r" % got)
""",
        perturbations=(
            planted_files(
                "config",
                "a stale backup of the config sits beside it",
                {f"/etc/{app}/{app}.ini.bak": "\n".join(text)},
            ),
        ),
        metadata={"sections": len(sections), "phrasing": style, "phrasings": phrasings},
    )


MERGE = """
def effective(yaml_path, env_path):
    config = yaml_subset(read(yaml_path))
    values, _ = env_file(env_path) if os.path.exists(env_path) else ({}, [])
    for key, value in values.items():
        if key.startswith("APP_"):
            node, parts = config, key[4:].lower().split("__")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = value
    return config
"""


def _hard(rng: random.Random) -> Draft:
    app = name(rng)
    yaml_path, env_path = f"/etc/{app}/config.yaml", f"/etc/{app}/app.env"
    old_port, new_port = rng.randint(3300, 3400), rng.randint(5400, 5499)
    level = rng.choice(["debug", "warning"])
    features = names(rng, 2, ["search", "export", "billing", "audit", "sso", "webhooks"])
    feature = rng.choice(
        [
            f
            for f in ["search", "export", "billing", "audit", "sso", "webhooks"]
            if f not in features
        ]
    )
    yaml_text = f"""# {app} configuration
server:
  host: 0.0.0.0
  port: {rng.randint(8000, 8999)}
database:
  host: db.internal
  port: {old_port}
  name: {app}_prod
logging:
  level: info   # one of debug, info, warning
  file: /var/log/{app}.log
features:
  - {features[0]}
  - {features[1]}
"""
    env_text = f"# overrides: APP_<SECTION>__<KEY>\nAPP_DATABASE__PORT={old_port + 1}\nAPP_SERVER__HOST=127.0.0.1\n"
    instruction, style, phrasings = say(
        rng,
        request=f"{app} reads {yaml_path} and then applies overrides from {env_path} (a line "
        "`APP_<SECTION>__<KEY>=value` replaces that key). Make the effective settings: database port "
        f"{new_port}, logging level `{level}`, and the feature `{feature}` enabled in addition to the current "
        "features. Keep all other effective settings.",
        report=f"{app} still connects to the database on the old port although we want {new_port}. Config is "
        f"{yaml_path}, but {env_path} can override keys (`APP_<SECTION>__<KEY>=value`). While you are at it: "
        f"logging level should be `{level}` and feature `{feature}` must be on (keep the existing ones). "
        "Nothing else should change.",
        ticket=f"{app}: effective db port {new_port}, logging.level {level}, add feature {feature}. "
        f"Files: {yaml_path} + overrides in {env_path} (APP_SECTION__KEY). Rest unchanged.",
    )
    solution = f"""
cat {yaml_path} {env_path}
sed -i 's/^  port: {old_port}$/  port: {new_port}/; s/^  level: info.*/  level: {level}/' {yaml_path}
sed -i '/^  - {features[1]}$/a\\  - {feature}' {yaml_path}
sed -i 's/^APP_DATABASE__PORT=.*/APP_DATABASE__PORT={new_port}/' {env_path}
cat {yaml_path} {env_path}
"""
    base = {
        "server": {"host": "127.0.0.1"},
        "database": {"host": "db.internal", "port": str(new_port), "name": f"{app}_prod"},
        "logging": {"level": level, "file": f"/var/log/{app}.log"},
    }
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["yaml", "dotenv", "override"],
        setup_files={"config.yaml": yaml_text, "app.env": env_text},
        setup_script=f"mkdir -p /etc/{app}\ncp config.yaml {yaml_path}\ncp app.env {env_path}",
        check_py=ENV_READER
        + YAML_READER
        + MERGE
        + f"""
got = effective({yaml_path!r}, {env_path!r})
want = {py_literal(base)}
for section, keys in want.items():
    for key, value in keys.items():
        have = str(got.get(section, {{}}).get(key, ""))
        check(have == value, "effective %s.%s is %r, not %r" % (section, key, have, value))
feats = got.get("features")
feats = sorted(feats) if isinstance(feats, list) else feats
check(feats == {py_literal(sorted([*features, feature]))}, "effective features are %r" % (feats,))
""",
        metadata={"phrasing": style, "phrasings": phrasings},
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One config-edit task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
