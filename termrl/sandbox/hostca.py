"""The host's CA certificates, injected into builds and egress sandboxes at run time.

Egress from many machines and clusters goes through a TLS-inspecting
proxy whose CA is written at boot to ``/usr/local/share/ca-certificates``. A
sandbox with network needs it, but a cached image must never contain it (the
image outlives the CA and moves to other machines), so it is mounted when a
build or a sandbox runs:

- builds: the bundle is bind-mounted read-only over the image's
  ``/etc/ssl/certs/ca-certificates.crt`` for every RUN step (not committed);
- sandboxes: mounted at ``SANDBOX_PATH``, copied over the system bundle in the
  sandbox's own writable layer, and named by ``CA_ENV`` for tools that keep
  their own store (pip from PyPI, requests, node).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["CA_ENV", "SANDBOX_PATH", "SYSTEM_BUNDLE", "host_ca_bundle", "install_command"]

SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
SANDBOX_PATH = "/run/termrl/host-ca.crt"
_HOST_BUNDLES = (SYSTEM_BUNDLE, "/etc/pki/tls/certs/ca-bundle.crt")
_HOST_EXTRA_DIR = Path("/usr/local/share/ca-certificates")

CA_ENV = {
    name: SYSTEM_BUNDLE
    for name in (
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "PIP_CERT",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "NODE_EXTRA_CA_CERTS",
    )
}


def host_ca_bundle(cache_dir: Path) -> Path | None:
    """A PEM bundle of the host's trusted CAs plus any local extra CA not yet in it.

    Written under ``cache_dir`` (content-addressed, so concurrent callers agree);
    None when the host has no CA bundle at all.
    """
    parts: list[bytes] = []
    for candidate in _HOST_BUNDLES:
        if os.path.isfile(candidate):
            parts.append(Path(candidate).read_bytes())
            break
    if _HOST_EXTRA_DIR.is_dir():
        have = b"".join(parts)
        for extra in sorted(_HOST_EXTRA_DIR.rglob("*.crt")):
            pem = extra.read_bytes()
            if pem.strip() and pem.strip() not in have:
                parts.append(pem if pem.endswith(b"\n") else pem + b"\n")
    if not parts:
        return None
    bundle = b"".join(parts)
    path = cache_dir / f"host-ca-{hashlib.sha256(bundle).hexdigest()[:16]}.crt"
    if not path.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(bundle)
        os.replace(tmp, path)
    return path


def install_command() -> str:
    """Shell line run at sandbox start: put the mounted bundle where the system looks."""
    return f"[ -d /etc/ssl/certs ] && cat {SANDBOX_PATH} > {SYSTEM_BUNDLE} 2>/dev/null; "
