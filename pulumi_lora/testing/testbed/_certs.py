"""Key material for one testbed: a throw-away CA, the apiserver's serving certificate, the
service-account signing key, and the static token file.

Generated with the ``openssl`` command-line tool (no Python crypto package is a dependency of
this project). The CA and serving certificate are written into the apiserver's ``--cert-dir`` as
``apiserver.crt``/``apiserver.key``, the file names the apiserver looks for there, as
controller-runtime's envtest does; clients then verify TLS against ``ca.crt`` instead of turning
verification off. Restarting the apiserver reuses the same files, so kubeconfigs stay valid.
"""

from __future__ import annotations

import csv
import io
import secrets
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CertificateError",
    "KeyMaterial",
    "StaticToken",
    "generate_key_material",
    "new_token",
    "write_token_file",
]

_OPENSSL_TIMEOUT = 60.0
_CERT_DAYS = "30"


class CertificateError(RuntimeError):
    """openssl is missing or failed while generating the testbed's key material."""


@dataclass(frozen=True)
class StaticToken:
    """One line of the apiserver's ``--token-auth-file``: a bearer token and who it is."""

    token: str
    """The bearer token (never logged)."""
    user: str
    """User name the apiserver authenticates the token as (what RBAC subjects name)."""
    uid: str = ""
    """User UID; defaults to the user name."""
    groups: tuple[str, ...] = field(default_factory=tuple)
    """Groups of the user, e.g. ``("system:masters",)`` for a cluster admin."""

    def __repr__(self) -> str:
        return f"StaticToken(user={self.user!r}, groups={self.groups!r}, token=<redacted>)"


@dataclass(frozen=True)
class KeyMaterial:
    """Paths of the files generated for one testbed."""

    cert_dir: Path
    """The apiserver's ``--cert-dir`` (holds ``apiserver.crt``/``apiserver.key``)."""
    ca_cert: Path
    """PEM of the CA that signed the serving certificate (what clients trust)."""
    sa_key: Path
    """RSA private key signing service-account tokens."""
    sa_pub: Path
    """Its public key, for ``--service-account-key-file``."""


def new_token() -> str:
    """A random bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def _openssl(*args: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise CertificateError("openssl not found on PATH; install it (apt-get install openssl)")
    done = subprocess.run(
        [exe, *args], capture_output=True, text=True, timeout=_OPENSSL_TIMEOUT, check=False
    )
    if done.returncode != 0:
        raise CertificateError(f"openssl {args[0]} failed: {done.stderr.strip()[-2000:]}")


def _new_key(path: Path) -> None:
    """A P-256 private key: every testbed makes three, and an EC key takes a millisecond where
    an RSA-2048 key took a few hundred (its start paid 1.3 s for them on a loaded machine)."""
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)
    )


def generate_key_material(directory: Path) -> KeyMaterial:
    """Create the CA, serving certificate (127.0.0.1, localhost, the service IP) and SA key pair.

    The serving certificate's SANs cover every address a client of the testbed uses: the loopback
    address it listens on, ``localhost``, and the first service IP ``10.0.0.1`` with the
    ``kubernetes.default`` names (what in-cluster clients would use).
    """
    cert_dir = directory / "certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = cert_dir / "ca.key", cert_dir / "ca.crt"
    key, csr, crt = (
        cert_dir / "apiserver.key",
        cert_dir / "apiserver.csr",
        cert_dir / "apiserver.crt",
    )
    ext = cert_dir / "apiserver.ext"
    sa_key, sa_pub = cert_dir / "sa.key", cert_dir / "sa.pub"

    _new_key(ca_key)
    _openssl(
        "req", "-x509", "-new", "-key", str(ca_key), "-sha256", "-days", _CERT_DAYS,
        "-subj", "/CN=pulumi-lora-testbed-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        "-addext", "subjectKeyIdentifier=hash",
        "-out", str(ca_crt),
    )  # fmt: skip
    _new_key(key)
    _openssl("req", "-new", "-key", str(key), "-subj", "/CN=kube-apiserver", "-out", str(csr))
    ext.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n"
        "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc,"
        "DNS:kubernetes.default.svc.cluster.local\n",
        encoding="utf-8",
    )
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", _CERT_DAYS, "-sha256", "-extfile", str(ext), "-out", str(crt),
    )  # fmt: skip
    _new_key(sa_key)  # the apiserver signs ServiceAccount tokens with ES256
    _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub))
    for private in (ca_key, key, sa_key):
        private.chmod(0o600)
    return KeyMaterial(cert_dir=cert_dir, ca_cert=ca_crt, sa_key=sa_key, sa_pub=sa_pub)


def write_token_file(path: Path, tokens: Iterable[StaticToken]) -> None:
    """Write a ``--token-auth-file``: ``token,user,uid,"group1,group2"`` per line (mode 0600)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    for entry in tokens:
        if any(c in entry.token for c in ',"\n'):
            raise ValueError(f"token for {entry.user!r} contains a comma, quote or newline")
        row = [entry.token, entry.user, entry.uid or entry.user]
        if entry.groups:
            row.append(",".join(entry.groups))
        writer.writerow(row)
    path.touch(mode=0o600)
    path.write_text(buffer.getvalue(), encoding="utf-8")
