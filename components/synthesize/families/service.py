"""A service listening on a port: start one, repair one, write one.

easy    serve a folder over HTTP on a port, in the background (one command)
medium  a provided HTTP service does not start because its config is broken: fix it and start it
hard    write a line-protocol TCP key-value service with persistence and a start script

The checks talk to the port (the process must really be listening when the
tests run); the hard check also kills the service and restarts it with the
start script to see the data survive.
"""

from __future__ import annotations

import json
import random

from components.synthesize.draft import Draft
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, name, token

__all__ = ["TAGS", "generate"]

TAGS = ["service", "networking", "background-process"]

# Polls the port for up to 30 s: the service may still be starting when the tests begin, and
# on a loaded machine a Python service takes seconds to bind (a count of tries failed there).
HTTP_GET = """
import time, urllib.request


def http_get(url, wait=30.0):
    deadline, last = time.monotonic() + wait, None
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, r.read().decode()
        except Exception as e:
            last = e
        if time.monotonic() > deadline:
            fail("nothing answers at %s after %.0f s: %r" % (url, wait, last))
        time.sleep(0.25)
"""

DETACH = "setsid nohup {cmd} > {log} 2>&1 < /dev/null &"


def _port(rng: random.Random) -> int:
    return rng.choice([rng.randint(8000, 8999), rng.randint(3000, 3999), rng.randint(9000, 9999)])


def _easy(rng: random.Random) -> Draft:
    site, port = f"/srv/{name(rng)}", _port(rng)
    page, marker = f"{rng.choice(WORDS)}.html", token(rng)
    instruction, style, phrasings = say(
        rng,
        request=f"Serve the files in {site} over HTTP on port {port}, running in the background so "
        "it keeps serving.",
        report=f"The team wants to browse what is in {site} from their machines, but nothing "
        f"serves that folder yet. Could you put it up over plain HTTP on port {port}? Start it "
        "detached, so it stays up after your shell session ends.",
        ticket=f"HTTP static server: dir {site}, port {port}. Background, must outlive the "
        "session.",
    )
    cmd = f"python3 -m http.server {port} --directory {site}"
    return Draft(
        instruction=instruction,
        solution=DETACH.format(cmd=cmd, log="/tmp/http.log"),
        tags=["http"],
        setup_files={"page.html": f"<p>{marker}</p>\n"},
        setup_script=f"mkdir -p {site}\ncp page.html {site}/{page}",
        check_py=HTTP_GET
        + f"""
status, body = http_get("http://127.0.0.1:{port}/{page}")
check(status == 200 and {marker!r} in body, "port {port} did not serve {page}: %r" % body[:200])
""",
        metadata={"port": port, "phrasing": style, "phrasings": phrasings},
    )


SERVER_PY = '''"""The NAME service: answers GET /health with its status as JSON."""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

CONFIG = "/etc/NAME/config.json"


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/health":
            self.send_error(404)
            return
        body = json.dumps({"service": "NAME", "status": "ok", "greeting": CFG["greeting"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)


with open(CONFIG) as f:
    CFG = json.load(f)
port = CFG["listen"]["port"]
if not isinstance(port, int):
    sys.exit(f"config error: listen.port must be an integer, got {port!r}")
HTTPServer((CFG["listen"].get("host", "0.0.0.0"), port), Handler).serve_forever()
'''


def _medium(rng: random.Random) -> Draft:
    svc, port = name(rng), _port(rng)
    greeting = f"hello from {svc} {token(rng, 4)}"
    good = {"listen": {"host": "0.0.0.0", "port": port}, "greeting": greeting}
    breakage = rng.choice(["trailing-comma", "port-string", "missing-brace"])
    text = json.dumps(good, indent=2)
    if breakage == "trailing-comma":
        text = text.replace(f'"port": {port}', f'"port": {port},')
    elif breakage == "port-string":
        text = text.replace(f'"port": {port}', f'"port": "{port}a"')
    else:
        text = text.rstrip().rstrip("}")
    server, config, log = f"/opt/{svc}/server.py", f"/etc/{svc}/config.json", f"/var/log/{svc}.log"
    instruction, style, phrasings = say(
        rng,
        request=f"The {svc} service ({server}, started with `python3 {server}`) does not start: "
        f"its configuration {config} is broken. Fix the configuration so the service listens on "
        f"port {port} (keep its greeting), then start the service in the background with its "
        f"output going to {log}. `curl http://127.0.0.1:{port}/health` must then answer.",
        report=f"Since someone edited {config}, the {svc} service dies right at startup and "
        f"http://127.0.0.1:{port}/health refuses connections. Please repair that config file so "
        f"the service listens on port {port} again, without touching its greeting, and bring it "
        f"back up by running `python3 {server}` in the background with stdout and stderr going to "
        f"{log}. The health endpoint should answer afterwards.",
        ticket=f"{svc} won't start: {config} broken. Fix -> listen port {port}, greeting "
        f"unchanged. Run `python3 {server}` in background, output -> {log}. Done when curl "
        f"http://127.0.0.1:{port}/health answers.",
    )
    fixed = json.dumps(good, indent=2)
    # Look at the broken file, fix it and start the service, check its log.
    solution = (
        f"cat {config}\n"
        + f"cat > {config} <<'JSON'\n{fixed}\nJSON\n"
        + DETACH.format(cmd=f"python3 {server}", log=log)
        + f"\nsleep 1; cat {log}"
    )
    check = (
        HTTP_GET
        + f"""
status, body = http_get("http://127.0.0.1:{port}/health")
try:
    doc = json.loads(body)
except ValueError:
    fail("/health did not answer JSON: %r" % body[:200])
check(doc == {{"service": {svc!r}, "status": "ok", "greeting": {greeting!r}}}, "/health answered %r" % doc)
cmdlines = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmdlines.append(open("/proc/%s/cmdline" % pid, "rb").read().replace(b"\\0", b" ").decode())
    except OSError:
        pass
check(any({server!r} in c for c in cmdlines), "{server} is not the process serving the port")
check(json.loads(read({config!r}))["listen"]["port"] == {port}, "{config} does not set port {port}")
"""
    )
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["config", "repair", "http"],
        setup_files={"server.py": SERVER_PY.replace("NAME", svc), "config.json": text + "\n"},
        setup_script=f"mkdir -p /opt/{svc} /etc/{svc}\ncp server.py {server}\ncp config.json {config}",
        check_py=check,
        metadata={"port": port, "breakage": breakage, "phrasing": style, "phrasings": phrasings},
    )


KV_SERVER = """import json, os, socketserver, threading

DATA = "DATAFILE"
lock = threading.Lock()
store = json.load(open(DATA)) if os.path.exists(DATA) else {}


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        for raw in self.rfile:
            parts = raw.decode().strip().split(" ", 2)
            with lock:
                if parts[0] == "SET" and len(parts) == 3:
                    store[parts[1]] = parts[2]
                    reply = "OK"
                elif parts[0] == "GET" and len(parts) == 2:
                    reply = store.get(parts[1], "NIL")
                elif parts[0] == "DEL" and len(parts) == 2:
                    reply = "1" if store.pop(parts[1], None) is not None else "0"
                else:
                    reply = "ERR"
                if parts[0] in ("SET", "DEL"):
                    tmp = DATA + ".tmp"
                    with open(tmp, "w") as f:
                        json.dump(store, f)
                    os.replace(tmp, DATA)
            self.wfile.write((reply + "\\n").encode())


socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("0.0.0.0", PORT), Handler).serve_forever()
"""


def _kv_check(
    port: int,
    keys: list[str],
    verbs: tuple[str, str, str],
    answers: tuple[str, str],
    data: str,
    start: str,
) -> str:
    """The key-value service's tests: the protocol over two connections, the JSON file, a restart."""
    put, get, delete = verbs
    ok, nil = answers
    return f"""
import socket, time


def session(lines, wait=30.0):
    deadline = time.monotonic() + wait
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", {port}), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                fail("nothing listens on port {port} after %.0f s" % wait)
            time.sleep(0.25)
    f = s.makefile("rw")
    out = []
    for line in lines:
        f.write(line + "\\n")
        f.flush()
        out.append(f.readline().rstrip("\\n"))
    s.close()
    return out


k1, k2, k3 = {keys!r}
v1 = "value with spaces " + str(os.getpid())
put, get, delete = {put!r}, {get!r}, {delete!r}
got = session(["%s %s %s" % (put, k1, v1), get + " " + k1, get + " " + k3, "%s %s two" % (put, k2),
               delete + " " + k2, delete + " " + k2, "BOGUS"])
check(got == [{ok!r}, v1, {nil!r}, {ok!r}, "1", "0", "ERR"], "the protocol answers were %r" % got)
check(session([get + " " + k1]) == [v1], "a second connection does not see the data")
try:
    saved = json.loads(read({data!r}))
except ValueError:
    fail("{data} is not JSON")
check(saved.get(k1) == v1 and k2 not in saved, "{data} holds %r" % saved)
sh("fuser -k -n tcp {port}")
for _ in range(40):
    if sh("fuser -n tcp {port}").returncode != 0:
        break
    time.sleep(0.25)
r = sh({start!r}, timeout=30)
check(r.returncode == 0, "{start} failed: " + r.stderr)
check(session([get + " " + k1]) == [v1], "after a restart with {start} the data is gone")
"""


def _hard(rng: random.Random) -> Draft:
    svc, port = f"{name(rng)}kv", _port(rng)
    data, start = f"/var/lib/{svc}/data.json", f"/usr/local/bin/start-{svc}"
    put, get, delete = (
        rng.choice(["SET", "PUT", "STORE"]),
        rng.choice(["GET", "FETCH", "READ"]),
        rng.choice(["DEL", "DELETE", "REMOVE"]),
    )
    nil, ok = (
        rng.choice(["NIL", "NONE", "MISSING", "NOT_FOUND"]),
        rng.choice(["OK", "STORED", "DONE"]),
    )
    instruction, style, phrasings = say(
        rng,
        request=f"Write and start a small key-value service `{svc}` on TCP port {port}. Protocol: "
        f"the client sends lines; for each line the service answers one line: `{put} <key> "
        f"<value>` (value may contain spaces) answers `{ok}`; `{get} <key>` answers the value, or "
        f"`{nil}` if the key is unknown; `{delete} <key>` answers `1` if it existed and `0` "
        "otherwise; anything else answers `ERR`. One connection may send many lines, and several "
        f"clients may connect. Every change must be saved at once to {data} as a JSON object "
        "mapping keys to values, and the data must be loaded from there when the service starts. "
        f"Also write an executable {start} that starts the service in the background and returns; "
        "use it to start the service now.",
        report="Our scripts need somewhere to share small bits of state, and there is nothing for "
        f"it on this box. Please build a little key-value server called `{svc}` that listens on "
        f"TCP port {port}, and get it running. Clients talk to it in lines and get exactly one "
        f"line back for each: `{put} <key> <value>` stores the value (which can contain spaces) "
        f"and replies `{ok}`; `{get} <key>` replies with the stored value, or `{nil}` when there "
        f"is no such key; `{delete} <key>` replies `1` if the key was there and `0` if it was not; "
        "any other line gets `ERR`. A client may keep one connection open for many lines, and "
        "several clients can be connected at the same time. Data must survive a restart: write "
        f"every change immediately to {data} as one JSON object of key -> value, and load that "
        f"file when the server starts. We also want an executable {start} that launches the server "
        "in the background and returns at once; bring the service up now with it.",
        ticket=f"New TCP key-value service `{svc}`, port {port}, line protocol, one reply line per "
        f"request line: `{put} <key> <value>` (value may contain spaces) -> `{ok}`; `{get} <key>` "
        f"-> value, or `{nil}` if unknown; `{delete} <key>` -> `1` if it existed, else `0`; "
        "anything else -> `ERR`. Many lines per connection; concurrent clients. Persist each "
        f"change immediately to {data} (JSON object key -> value); load it at startup. Executable "
        f"{start}: start in background, return. Start the service now via {start}.",
    )
    code = KV_SERVER.replace("DATAFILE", data).replace("PORT", str(port))
    for word, new in (("SET", put), ("GET", get), ("DEL", delete), ("NIL", nil), ("OK", ok)):
        code = code.replace(f'"{word}"', f'"{new}"')
    solution = f"""
mkdir -p /opt/{svc} /var/lib/{svc}
cat > /opt/{svc}/server.py <<'PY'
{code}PY
cat > {start} <<'SH'
#!/bin/bash
{DETACH.format(cmd=f"python3 /opt/{svc}/server.py", log=f"/var/log/{svc}.log")}
SH
chmod +x {start}
{start}
"""
    keys = [f"{w}:{rng.randint(1, 99)}" for w in rng.sample(NOUNS, 3)]
    check = _kv_check(port, keys, (put, get, delete), (ok, nil), data, start)
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["tcp", "protocol", "persistence"],
        check_py=check,
        uses=("fuser",),
        metadata={"port": port, "phrasing": style, "phrasings": phrasings},
        agent_timeout_sec=1200.0,
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One service task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
