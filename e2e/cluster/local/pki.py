"""Certificates and kubeconfigs for the local control plane, made with the openssl CLI.

One throw-away CA signs everything: the etcd and API server serving certificates, the
Kueue webhook serving certificate (IP SAN 127.0.0.1, since the API server calls Kueue's
webhooks by URL on loopback), and the client certificates whose subject is the identity
RBAC sees (``O=system:masters`` for the admin, ``CN=system:kube-scheduler`` and
``CN=system:kube-controller-manager`` for the two components that have bootstrap roles).
Keys are ECDSA P-256: fast to make, accepted by every component.
"""

from __future__ import annotations

import base64
import dataclasses
import pathlib
import subprocess

import yaml

_OPENSSL_TIMEOUT_S = 60


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True,
                   timeout=_OPENSSL_TIMEOUT_S)


@dataclasses.dataclass(frozen=True)
class KeyPair:
    cert: pathlib.Path
    key: pathlib.Path


class Authority:
    """A CA in ``directory`` that issues server and client certificates."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = KeyPair(directory / "ca.crt", directory / "ca.key")
        if not self.ca.cert.exists():
            _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                     "-nodes", "-keyout", str(self.ca.key), "-out", str(self.ca.cert),
                     "-days", "30", "-subj", "/CN=fitgate-e2e-ca",
                     "-addext", "basicConstraints=critical,CA:TRUE",
                     "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")

    def ca_bundle_b64(self) -> str:
        return base64.b64encode(self.ca.cert.read_bytes()).decode()

    def issue(self, name: str, subject: str, *, ips: tuple[str, ...] = (),
              dns: tuple[str, ...] = ()) -> KeyPair:
        """A key and a certificate good for both server and client auth."""
        pair = KeyPair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        if pair.cert.exists():
            return pair
        csr = self.directory / f"{name}.csr"
        ext = self.directory / f"{name}.ext"
        sans = [f"IP:{ip}" for ip in ips] + [f"DNS:{d}" for d in dns]
        lines = ["basicConstraints=CA:FALSE",
                 "keyUsage=critical,digitalSignature,keyEncipherment",
                 "extendedKeyUsage=serverAuth,clientAuth"]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", str(pair.key), "-out", str(csr), "-subj", subject)
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca.cert),
                 "-CAkey", str(self.ca.key), "-CAcreateserial", "-out", str(pair.cert),
                 "-days", "30", "-extfile", str(ext))
        csr.unlink()
        ext.unlink()
        return pair

    def service_account_key(self) -> KeyPair:
        """The key pair that signs and verifies service-account tokens."""
        pair = KeyPair(self.directory / "sa.pub", self.directory / "sa.key")
        if not pair.key.exists():
            _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                     "-out", str(pair.key))
            _openssl("pkey", "-in", str(pair.key), "-pubout", "-out", str(pair.cert))
        return pair


def write_kubeconfig(path: pathlib.Path, server: str, ca: pathlib.Path, client: KeyPair,
                     user: str) -> pathlib.Path:
    """A kubeconfig with absolute paths to the CA and the client certificate."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fitgate-e2e",
                      "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(client.cert),
                                          "client-key": str(client.key)}}],
        "contexts": [{"name": "fitgate-e2e", "context": {"cluster": "fitgate-e2e",
                                                          "user": user}}],
        "current-context": "fitgate-e2e",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def write_token_kubeconfig(path: pathlib.Path, server: str, ca: pathlib.Path, token: str,
                           user: str, namespace: str) -> pathlib.Path:
    """A kubeconfig that authenticates with a bearer token only (no client certificate);
    its context defaults to ``namespace``. Readable by its owner only."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fitgate-e2e",
                      "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "fitgate-e2e", "context": {"cluster": "fitgate-e2e",
                                                          "user": user,
                                                          "namespace": namespace}}],
        "current-context": "fitgate-e2e",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
