"""Scripted servers (``testing.scripted_server``) in a process of their own, one per config, each on its
own port: their steps never wait for the caller's GIL (a bench client in the same process would delay
them). ``with ServerProcess(workload, {label: spec}) as sp: sp.urls`` — stopped when the block ends."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from specgauge.testing.scripted_drafts import Traces


class ServerProcess:
    """Scripted servers (one per config, each on its own port) in a process of their own, so that their
    steps never wait for the caller's GIL: ``with ServerProcess(...) as sp: sp.urls`` ({label: URL})."""

    def __init__(self, workload: Sequence[Path], configs: dict[str, dict[str, Any] | None], *,
                 law: dict[str, float] | None = None, gpu_curve: Path | None = None, gpu_costs: Any = None,
                 traces: dict[str, Traces] | None = None, work_dir: Path | None = None) -> None:
        import subprocess
        import sys
        import tempfile

        args = [sys.executable, "-m", "specgauge.testing.scripted_server", "--law", json.dumps(law or {})]
        for w in workload:
            args += ["--workload", str(w)]
        if gpu_curve is not None:
            args += ["--gpu-curve", str(gpu_curve)]
        if gpu_costs is not None:
            args += ["--gpu-costs", gpu_costs.model_dump_json() if hasattr(gpu_costs, "model_dump_json") else json.dumps(gpu_costs)]
        if traces:
            d = Path(work_dir or tempfile.mkdtemp(prefix="specgauge-traces-"))
            d.mkdir(parents=True, exist_ok=True)
            tf = d / "traces.json"
            tf.write_text(json.dumps(traces), encoding="utf-8")
            args += ["--traces", str(tf)]
        for label, spec in configs.items():
            args += ["--config", f"{label}={json.dumps(spec) if spec else 'off'}"]
        self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self.close()
            raise RuntimeError("the scripted servers did not start")
        self.urls: dict[str, str] = json.loads(line)

    def close(self) -> None:
        import subprocess

        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
