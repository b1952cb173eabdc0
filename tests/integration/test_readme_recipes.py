"""The README's recipes, executed as written.

Every command in README.md's ```bash blocks runs here, in the README's order, in a fresh directory where
``examples/`` is this checkout's, with ``specgauge`` on the PATH meaning this checkout's CLI. The embedded
server is really started (``specgauge serve``, two of them), so are the canary proxy and every command
after them, over real HTTP. What the test changes, and why:

- the ports 8000, 8001 and 8080 become free ports (a CI machine may have those taken);
- ``specgauge serve`` and ``specgauge canary`` run until stopped, in "a terminal of their own" as the
  README says: the test starts them in the background, waits until they answer, and stops them with
  SIGINT (Ctrl-C) where a comment before the next command says "Ctrl-C", else at the end.

A command succeeds when it exits 0 (``compare`` and ``canary``: a verdict, 0, 1 or 3 as documented) and
prints no traceback; a service must answer, and stop on Ctrl-C (``serve``: 0, or 130 as a shell reports
Ctrl-C). Commands that need something absent here are skipped, each listed in SKIPPED with its reason;
nothing else is.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specgauge.models import available
from tests._markdown import ROOT, Command, commands, fenced_blocks
from tests.integration._http import free_port

pytestmark = pytest.mark.slow

SKIPPED: dict[str, str] = {
    # a fresh venv, a pip install from an index and the ~10 min demo: tests/integration/test_demo.py runs
    # the demo (smaller), scripts/test_wheel.sh installs the package into a fresh venv
    "python3 -m venv .venv": "creates a venv and installs from a package index; the demo alone takes ~10 min "
                             "(test_demo.py and scripts/test_wheel.sh cover both)",
    # the suite itself: running it from inside the suite would recurse
    "bash scripts/test.sh": "it is the test suite that runs this test",
}
# exit statuses that are verdicts, not failures (the commands' --help says so)
VERDICT_STATUS = {"compare": {0, 1, 3}, "canary": {0, 1, 3}}
# a server stopped by Ctrl-C: 0, or 130 (128 + SIGINT, what a shell reports for Ctrl-C)
STOPPED_STATUS = {"serve": {0, 130}}
SERVICES = ("serve", "canary")
# what the recipes must cover (issue 40: own logs and own server, tuning, roll-out)
COVERED = {"profile", "simulate", "report", "serve", "bench", "compare", "sweep", "recommend", "calibrate",
           "predict", "canary"}
PORTS = (8000, 8001, 8080)
TRANSCRIPT = os.environ.get("SPECGAUGE_README_TRANSCRIPT")  # a directory: each command's output is written there


@dataclass
class Service:
    cmd: str
    sub: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    t0: float = field(default_factory=time.monotonic)


@dataclass
class Session:
    cwd: Path
    env: dict[str, str]
    ports: dict[int, int]
    services: list[Service] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    n: int = 0

    def substitute(self, text: str) -> str:
        return re.sub(r"(?<![\d.])(8000|8001|8080)(?!\d)", lambda m: str(self.ports[int(m.group(1))]), text)

    def record(self, cmd: str, out: str, seconds: float) -> None:
        self.n += 1
        if TRANSCRIPT:
            Path(TRANSCRIPT).mkdir(parents=True, exist_ok=True)
            (Path(TRANSCRIPT) / f"{self.n:02d}.txt").write_text(f"$ {cmd}\n# {seconds:.1f} s\n{out}", encoding="utf-8")


def subcommand(cmd: str) -> str | None:
    words = shlex.split(cmd, comments=True)
    return words[1] if len(words) > 1 and words[0] == "specgauge" else None


def wait_ready(svc: Service, timeout_s: float = 180.0) -> None:
    path = "/canary/status" if svc.sub == "canary" else "/health"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if svc.proc.poll() is not None:
            raise AssertionError(f"{svc.cmd}\nexited {svc.proc.returncode} before answering:\n"
                                 + svc.log.read_text(errors="replace")[-3000:])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{svc.port}{path}", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{svc.cmd}\ndid not answer {path} within {timeout_s:.0f} s")


def stop(s: Session, svc: Service) -> None:
    svc.proc.send_signal(signal.SIGINT)  # Ctrl-C
    try:
        rc = svc.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        svc.proc.kill()
        raise AssertionError(f"{svc.cmd}\ndid not stop within 60 s of Ctrl-C") from None
    out = svc.log.read_text(errors="replace")
    s.record(svc.cmd, out, time.monotonic() - svc.t0)
    s.services.remove(svc)
    ok = VERDICT_STATUS.get(svc.sub) or STOPPED_STATUS.get(svc.sub, {0})
    assert rc in ok and "Traceback" not in out, f"{svc.cmd}\nexit {rc} after Ctrl-C:\n{out[-3000:]}"


def launch(s: Session, raw: str, sub: str) -> Service:
    cmd = s.substitute(raw)
    m = re.search(r"--port[ =](\d+)", cmd)
    assert m, f"{raw}: a service recipe names its --port"
    log = s.cwd / f"service-{len(s.services)}.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(["bash", "-c", "exec " + cmd], cwd=s.cwd, env=s.env, stdout=fh, stderr=subprocess.STDOUT)
    svc = Service(cmd, sub, proc, log, int(m.group(1)))
    s.services.append(svc)
    return svc


def start(s: Session, raw: str, sub: str) -> None:
    """A service the README starts here: already launched ahead (a server needs nothing before it), or now."""
    cmd = s.substitute(raw)
    svc = next((x for x in s.services if x.cmd == cmd), None) or launch(s, raw, sub)
    wait_ready(svc)


def run(s: Session, c: Command) -> None:
    if any("ctrl-c" in x.lower() for x in c.comments_before):
        assert s.services, f"README line {c.line}: 'Ctrl-C' but nothing is running"
        stop(s, s.services[-1])
    if any(c.text.startswith(p) for p in SKIPPED):
        return
    sub = subcommand(c.text)
    assert sub is not None, f"README line {c.line}: {c.text!r} is neither a specgauge command nor in SKIPPED"
    s.ran.append(sub)
    if sub in SERVICES:
        start(s, c.text, sub)
        return
    cmd = s.substitute(c.text)
    t0 = time.monotonic()
    r = subprocess.run(["bash", "-c", cmd], cwd=s.cwd, env=s.env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    s.record(cmd, out, time.monotonic() - t0)
    ok = VERDICT_STATUS.get(sub, {0})
    assert r.returncode in ok and "Traceback" not in out, (
        f"README line {c.line}: {cmd}\nexit {r.returncode}:\n{out[-4000:]}{failed_records(s.cwd, cmd)}")


def failed_records(cwd: Path, cmd: str) -> str:
    """The failed requests of a bench run, for the failure message (the summary only counts them)."""
    m = re.search(r"(?:-o|--output-dir)[ =](\S+)", cmd)
    f = cwd / m.group(1) / "results.jsonl" if m else None
    if f is None or not f.is_file():
        return ""
    bad = [ln for ln in f.read_text(errors="replace").splitlines() if '"ok": false' in ln or '"ok":false' in ln]
    return "\nfailed records:\n" + "\n".join(ln[:1500] for ln in bad[:5]) if bad else ""


def session(tmp: Path) -> Session:
    bindir = tmp / "bin"
    bindir.mkdir()
    exe = bindir / "specgauge"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m specgauge "$@"\n')
    exe.chmod(0o755)
    work = tmp / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "SPECGAUGE_LANG"))}
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", LANG="C.UTF-8", COLUMNS="110",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH")])))
    return Session(work, env, {p: free_port() for p in PORTS})


@pytest.mark.skipif(not available(), reason="shipped tiny models missing")
def test_readme_recipes_run_as_written(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    cmds = [c for b in fenced_blocks(text) if b.lang in ("bash", "sh") for c in commands(b)]
    assert cmds, "no ```bash blocks in README.md"
    s = session(tmp_path)
    try:
        # the servers start while the offline recipes run (as a reader would start them in other terminals
        # while reading on); each is still waited for where the README starts it
        for c in cmds:
            if subcommand(c.text) == "serve":
                launch(s, c.text, "serve")
        for c in cmds:
            run(s, c)
        for svc in list(reversed(s.services)):
            stop(s, svc)
    finally:
        for svc in s.services:
            svc.proc.kill()
            svc.proc.wait()
    assert COVERED <= set(s.ran), f"the README's recipes no longer run {sorted(COVERED - set(s.ran))}"
    for name in ("offline.html", "ab.html", "canary.html", "sweep/sweep.json", "calibration/cost_profile.json"):
        assert (s.cwd / name).is_file(), f"{name} was not written"


def test_skipped_commands_are_in_the_readme() -> None:
    """A skip that no longer matches a README command is stale: remove it, or the list lies."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    cmds = [c.text for b in fenced_blocks(text) if b.lang in ("bash", "sh") for c in commands(b)]
    for prefix in SKIPPED:
        assert any(c.startswith(prefix) for c in cmds), f"SKIPPED names {prefix!r}, which the README no longer has"
