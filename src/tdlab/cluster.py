"""Ray, for the ``ray`` backends of ``tdlab sweep``, ``tdlab atlas run`` and ``tdlab batch``: one way to connect.

``--address HOST:PORT`` names an existing cluster (``ray start --head`` prints it). Where nothing answers
there, or something that is not a Ray head (any other server on that port), ``ray.init`` retries for minutes,
printing a warning every few seconds, before it gives up; so the address is checked first
(:func:`check_address`: its form, then one TCP connection with a short timeout that opens an HTTP/2 connection,
the transport of Ray's gRPC services, and waits for the server's SETTINGS frame) and a wrong one is one line
naming ``--address``, before anything is written. Without an address a local
Ray instance is started for the call and shut down after it.
"""

from __future__ import annotations

import socket
from typing import Any

from tdlab.config import ConfigError, echo, one_line

__all__ = ["check_address", "connect", "disconnect"]

CONNECT_TIMEOUT_S = 5.0  # a cluster's head answers a TCP connection at once; an address that does not is wrong
MAX_ADDRESS_CHARS = 300  # far longer than any host name and port (a host name is at most 253 characters)
# HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113 §3.4): a gRPC server answers with a
# SETTINGS frame of its own (frame type 0x4); a server of another protocol does not
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SCHEME = "ray://"  # Ray Client's form of an address (ray.init takes it as it is)


def _host_port(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT``, ``[IPv6]:PORT`` or ``ray://HOST:PORT``.

    Raises:
        ConfigError: naming ``--address``, when it has no host or no port in 1..65535.
    """
    rest = address[len(SCHEME) :] if address.startswith(SCHEME) else address
    host, sep, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    number = port.isascii() and port.isdigit() and len(port) <= 5  # '²' is a digit to str.isdigit
    if len(address) > MAX_ADDRESS_CHARS or not sep or not host or not number or not 1 <= int(port) <= 65535:
        raise ConfigError(
            f"--address: {echo(address)} is not a Ray cluster address; allowed: HOST:PORT (as `ray start --head` "
            "prints it), ray://HOST:PORT or auto"
        )
    return host, int(port)


def check_address(address: str | None, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Check that a Ray cluster may answer at ``address`` (``None`` or ``auto``: nothing to check).

    Raises:
        ConfigError: naming ``--address``: not of the form HOST:PORT, or nothing accepts a connection there
            within ``timeout_s`` (refused, unreachable, a host that does not resolve).
    """
    if address is None or address == "auto":
        return
    host, port = _host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            speaks = _speaks_http2(conn)
    except (OSError, UnicodeError, ValueError) as exc:  # UnicodeError: a host label IDNA cannot encode
        why = "timed out" if isinstance(exc, TimeoutError) else (getattr(exc, "strerror", None) or type(exc).__name__)
        raise ConfigError(
            f"--address: nothing answers at {echo(address)} ({why}); start a cluster there "
            f"(`ray start --head --port {port}`) or give the address its head printed"
        ) from None
    if not speaks:
        raise ConfigError(
            f"--address: something answers at {echo(address)}, but not a Ray head (no HTTP/2, the transport of "
            "Ray's gRPC services); give the address `ray start --head` printed"
        )


def _speaks_http2(conn: socket.socket) -> bool:
    """Whether the server on ``conn`` answers HTTP/2's connection preface with a SETTINGS frame (a gRPC server
    does at once; an HTTP/1 server, a database, a silent port do not) within the connection's timeout."""
    try:
        conn.sendall(H2_PREFACE)
        head = b""
        while len(head) < 9:
            chunk = conn.recv(9 - len(head))
            if not chunk:
                return False
            head += chunk
    except OSError:
        return False
    return head[3] == 0x04  # the frame type of its first frame: SETTINGS


def connect(address: str | None, num_cpus: int | None = None) -> tuple[Any, bool]:
    """``(ray, started)``: Ray connected to the cluster at ``address`` (checked first), or a local instance
    started for this call (``num_cpus`` of it; ``None``: the machine's) where ``address`` is ``None``;
    ``started`` is False where Ray was connected already (the caller then leaves it so).

    Raises:
        ConfigError: Ray is not installed, :func:`check_address` refuses ``address``, or Ray finds no cluster
            there (a port that answers but is not a Ray head's: Ray gives up after its own timeout).
    """
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend: ray is not installed; pip install 'tdlab[ray]' or use --backend local") from None
    if ray.is_initialized():
        return ray, False
    if address:
        check_address(address)
        try:
            ray.init(address=address, log_to_driver=False)
        except ConnectionError as exc:  # something answered there, but no Ray cluster's head
            raise ConfigError(f"--address: no Ray cluster at {echo(address)} ({one_line(str(exc))})") from None
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    return ray, True


def disconnect(ray: Any, started: bool) -> None:
    """Shut down what :func:`connect` started (a session connected before it is left as it was)."""
    if started:
        ray.shutdown()
