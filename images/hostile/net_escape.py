"""net-escape: on every request, tries to reach anything outside the container.

Only ever run this image in a container with no network (``--network=none``): there, every
attempt fails inside the container's own network namespace and nothing leaves the machine.
It tries TCP to the host's services on loopback and to the usual host/gateway addresses, TCP and
a UDP DNS query to public resolvers, and a DNS lookup. Every attempt is reported on stderr; the
forecast's mean is 1.0 if any attempt succeeded, else 0.0.
"""

import socket
import struct
import sys

from _common import constant, log, serve

TIMEOUT_S = 0.5
TCP_TARGETS = [
    ("127.0.0.1", 5000),  # the host's OCI registry (reachable only without a network namespace)
    ("127.0.0.1", 8333),  # the host's S3 server
    ("10.0.2.2", 80),  # slirp4netns / QEMU user-mode host
    ("10.88.0.1", 80),  # podman's default bridge gateway
    ("172.17.0.1", 80),  # docker's default bridge gateway
    ("192.168.1.1", 80),  # a typical home router
    ("1.1.1.1", 53),
    ("8.8.8.8", 53),
]
UDP_DNS_SERVERS = ["8.8.8.8", "1.1.1.1"]
HOST_PORTS = [80, 5000, 8333]  # tried on every address the names below resolve to
LOCAL_NAMES = ["host.containers.internal", "host.docker.internal", "gateway"]  # /etc/hosts entries


def _gateways() -> list[str]:
    """Default gateways from /proc/net/route (none in a container without a network)."""
    found = []
    try:
        with open("/proc/net/route") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if len(fields) > 2 and fields[1] == "00000000" and fields[2] != "00000000":
                    found.append(socket.inet_ntoa(struct.pack("<L", int(fields[2], 16))))
    except OSError as exc:
        log(f"route table unreadable: {exc!r}")
    return found


def _tcp(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S):
            log(f"ESCAPE tcp {host}:{port} connected")
            return True
    except OSError as exc:
        log(f"tcp {host}:{port} failed: {exc!r}")
        return False


def _dns_query() -> bytes:
    header = struct.pack(">HHHHHH", 0x4654, 0x0100, 1, 0, 0, 0)
    name = b"".join(bytes([len(p)]) + p for p in b"example.com".split(b".")) + b"\x00"
    return header + name + struct.pack(">HH", 1, 1)


def _udp_dns(server: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(TIMEOUT_S)
            s.sendto(_dns_query(), (server, 53))
            data, peer = s.recvfrom(4096)
            log(f"ESCAPE udp dns {server}:53 answered {len(data)} bytes from {peer}")
            return True
    except OSError as exc:
        log(f"udp dns {server}:53 failed: {exc!r}")
        return False


def _resolve(name: str) -> list[str]:
    try:
        addresses = sorted({str(info[4][0]) for info in socket.getaddrinfo(name, 80)})
    except OSError as exc:
        log(f"resolve {name} failed: {exc!r}")
        return []
    log(f"resolved {name} to {addresses}")
    return addresses


def probe() -> bool:
    """True if anything outside the container answered. Resolving a name from /etc/hosts is not
    an escape by itself (podman writes host.containers.internal there even with no network),
    so local names only add addresses to try; a DNS answer for example.com is an escape."""
    targets = TCP_TARGETS + [(g, 80) for g in _gateways()]
    for name in LOCAL_NAMES:
        targets += [(a, p) for a in _resolve(name) for p in HOST_PORTS]
    results = [_tcp(h, p) for h, p in targets]
    results += [_udp_dns(s) for s in UDP_DNS_SERVERS]
    public = _resolve("example.com")
    if public:
        log(f"ESCAPE a DNS server answered for example.com: {public}")
    return any(results) or bool(public)


if __name__ == "__main__":
    sys.exit(serve(lambda request: constant(request, 1.0 if probe() else 0.0)))
