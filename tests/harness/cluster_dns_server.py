"""STAND-IN for the cluster DNS (CoreDNS's `kubernetes` plugin), the part a trainer job needs.

Run in a pod of the test node (tests/harness/cluster_dns.py) with the Python standard library only:
it answers A queries over UDP port 53 for the two kinds of names Kubernetes' DNS specification
gives pods and Services, from the API server (the pod's service account, read-only RBAC):

- `<hostname>.<subdomain>.<namespace>.svc.<domain>`: the address of the pod of that namespace whose
  `spec.hostname` and `spec.subdomain` are these, when a headless Service named `<subdomain>`
  exists there (JobSet's pods: Trainer's torch plugin sets `PET_MASTER_ADDR` to node 0's such
  name);
- `<service>.<namespace>.svc.<domain>`: the Service's cluster IP.

Any other name is NXDOMAIN; an existing name asked for another type is an empty answer (NODATA).
Nothing is cached: each query reads the API server, as the tests' few queries allow.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import struct
import sys
import urllib.error
import urllib.request
from typing import Any

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
TYPE_A, CLASS_IN = 1, 1
NOERROR, FORMERR, NXDOMAIN = 0, 1, 3


def _api(path: str) -> Any:
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ["KUBERNETES_SERVICE_PORT"]
    with open(f"{ACCOUNT}/token") as token:
        request = urllib.request.Request(
            f"https://{host}:{port}{path}", headers={"Authorization": f"Bearer {token.read()}"}
        )
    context = ssl.create_default_context(cafile=f"{ACCOUNT}/ca.crt")
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def resolve(name: str, domain: str) -> str | None:
    """The address of `name` (lower case, no trailing dot), or None."""
    suffix = f".svc.{domain}"
    if not name.endswith(suffix):
        return None
    parts = name[: -len(suffix)].split(".")
    if len(parts) == 2:
        service, namespace = parts
        found = _api(f"/api/v1/namespaces/{namespace}/services/{service}")
        ip = (found or {}).get("spec", {}).get("clusterIP")
        return ip if ip and ip != "None" else None
    if len(parts) != 3:
        return None
    hostname, subdomain, namespace = parts
    service = _api(f"/api/v1/namespaces/{namespace}/services/{subdomain}")
    if not service or service["spec"].get("clusterIP") != "None":
        return None
    for pod in _api(f"/api/v1/namespaces/{namespace}/pods")["items"]:
        spec, status = pod["spec"], pod.get("status", {})
        if spec.get("hostname") == hostname and spec.get("subdomain") == subdomain:
            if status.get("podIP") and status.get("phase") in ("Pending", "Running"):
                return str(status["podIP"])
    return None


def _question(packet: bytes) -> tuple[str, int, int, int]:
    """The first question's name, type, class and the offset after it."""
    labels, at = [], 12
    while packet[at]:
        length = packet[at]
        labels.append(packet[at + 1 : at + 1 + length].decode("ascii", "replace"))
        at += 1 + length
    kind, klass = struct.unpack("!HH", packet[at + 1 : at + 5])
    return ".".join(labels).lower(), kind, klass, at + 5


def answer(packet: bytes, domain: str) -> bytes:
    """The response to one query packet."""
    ident, flags, count = struct.unpack("!HHH", packet[:6])
    header = ident, 0x8000 | (flags & 0x0100) | 0x0400  # a response, RD copied, authoritative
    if count != 1 or flags & 0x7800:  # one standard query only
        return struct.pack("!HHHHHH", header[0], header[1] | FORMERR, 0, 0, 0, 0)
    name, kind, klass, end = _question(packet)
    address = resolve(name, domain)
    question = packet[12:end]
    if address is None:
        return struct.pack("!HHHHHH", header[0], header[1] | NXDOMAIN, 1, 0, 0, 0) + question
    if kind != TYPE_A or klass != CLASS_IN:
        return struct.pack("!HHHHHH", header[0], header[1] | NOERROR, 1, 0, 0, 0) + question
    record = struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, 5, 4) + socket.inet_aton(address)
    return struct.pack("!HHHHHH", header[0], header[1], 1, 1, 0, 0) + question + record


def main() -> int:
    domain = sys.argv[1] if len(sys.argv) > 1 else "cluster.local"
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("0.0.0.0", 53))
    print(f"cluster DNS stand-in: serving *.svc.{domain} on UDP 53", flush=True)
    while True:
        packet, peer = server.recvfrom(512)
        try:
            reply = answer(packet, domain)
        except (OSError, ValueError, KeyError, IndexError, struct.error) as error:  # SERVFAIL
            print(f"query from {peer[0]}: {error!r}", flush=True)
            reply = packet[:2] + struct.pack("!HHHHH", 0x8002, 0, 0, 0, 0)
        server.sendto(reply, peer)
        print(f"query from {peer[0]}: rcode {reply[3] & 0x0F}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
