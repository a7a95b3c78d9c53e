"""A Ray cluster's address: its form and whether anything answers there are checked before anything is written,
so a wrong ``--address`` is one line naming it (exit 2), not minutes of Ray's retries."""

from __future__ import annotations

import socket
import sys
import types

import pytest
from typer.testing import CliRunner

from tdlab.cli import app
from tdlab.cluster import check_address, connect
from tdlab.config import ConfigError


@pytest.fixture
def closed_port() -> int:
    """A local port that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def open_port():
    """A local port that accepts connections while the test runs, and says nothing (not a Ray head)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _serve(reply: bytes):
    """A local server that answers every connection with ``reply`` once it has read the client's first bytes."""
    import threading

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    s.settimeout(0.2)
    done = threading.Event()

    def loop() -> None:
        while not done.is_set():
            try:
                conn, _ = s.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(64)
                    conn.sendall(reply)
                except OSError:
                    pass

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return s, done, t


@pytest.fixture
def ray_like_port():
    """A local port that answers HTTP/2's preface with a SETTINGS frame, as a Ray head's gRPC server does."""
    s, done, t = _serve(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
    yield s.getsockname()[1]
    done.set()
    t.join()
    s.close()


@pytest.fixture
def http1_port():
    """A local port with a server of another protocol (HTTP/1)."""
    s, done, t = _serve(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    yield s.getsockname()[1]
    done.set()
    t.join()
    s.close()


@pytest.mark.parametrize(
    "address",
    [
        "nohost", "host:", ":6379", "host:port", "host:0", "host:70000", "ray://", "127.0.0.1:²",
        "127.0.0.1:99999999999999999999", "abcdefghijklmnopqrstuvwxyzabcd", "a" * 100_000 + ":6379",
    ],
)  # fmt: skip
def test_an_address_not_of_the_form_host_port_is_refused_naming_the_option(address):
    with pytest.raises(ConfigError, match=r"^--address: .* is not a Ray cluster address; allowed: HOST:PORT"):
        check_address(address)


def test_an_address_where_nothing_listens_is_refused_and_one_that_answers_passes(closed_port, ray_like_port):
    with pytest.raises(ConfigError, match=rf"^--address: nothing answers at '127.0.0.1:{closed_port}'"):
        check_address(f"127.0.0.1:{closed_port}")
    for form in (
        f"127.0.0.1:{ray_like_port}",
        f"ray://127.0.0.1:{ray_like_port}",
        f"[::ffff:127.0.0.1]:{ray_like_port}",
    ):
        check_address(form)
    check_address(None)  # a local instance: nothing to check
    check_address("auto")  # Ray's own lookup of a running cluster


def test_a_port_that_answers_another_protocol_is_refused_at_once_not_after_rays_retries(open_port, http1_port):
    """A silent port and an HTTP/1 server pass a TCP connection; neither answers HTTP/2's preface, so neither is
    handed to ray.init (which would retry for minutes)."""
    import time

    for port in (open_port, http1_port):
        t0 = time.monotonic()
        with pytest.raises(ConfigError, match=r"^--address: something answers at '127.0.0.1:\d+', but not a Ray head"):
            check_address(f"127.0.0.1:{port}", timeout_s=1.0)
        assert time.monotonic() - t0 < 10
    with pytest.raises(ConfigError, match=r"^--address: nothing answers"):
        check_address("label-" + "x" * 70 + ".example:6379", timeout_s=1.0)  # a label IDNA cannot encode


def test_a_port_that_answers_but_is_no_ray_head_is_one_line_not_rays_traceback(monkeypatch, ray_like_port):
    """Ray gives up on such an address after its own timeout with ConnectionError: said as --address."""
    calls = []

    def init(**kwargs):
        calls.append(kwargs)
        raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:1\nmore")

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.raises(ConfigError, match=r"^--address: no Ray cluster at '127.0.0.1:\d+' \(Failed to connect"):
        connect(f"127.0.0.1:{ray_like_port}")
    assert calls and calls[0]["address"] == f"127.0.0.1:{ray_like_port}"


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "SPEC", "--backend", "ray", "--out", "OUT"],
        ["batch", "markov-rank", "--backend", "ray", "--out", "OUT", "--results", ""],
        ["atlas", "run", "markov-landscape", "--backend", "ray", "--runs", "OUT"],
    ],
)
def test_the_ray_backends_refuse_a_dead_address_in_one_line_and_write_nothing(tmp_path, closed_port, args):
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: s\nexperiment: markov-landscape\npoints: [{t_end: 500.0}]\n")
    out = tmp_path / "out"
    argv = [str(spec) if a == "SPEC" else str(out) if a == "OUT" else a for a in args]
    res = CliRunner().invoke(app, [*argv, "--address", f"127.0.0.1:{closed_port}"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        f"error: --address: nothing answers at '127.0.0.1:{closed_port}' (Connection refused); start a cluster "
        f"there (`ray start --head --port {closed_port}`) or give the address its head printed"
    ]
    assert not out.exists()
