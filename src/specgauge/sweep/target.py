"""Where a sweep's servers come from: the embedded engine, a command template, or running servers.

- ``embedded``: ``specgauge serve`` on the shipped tiny target (or ``model``), one child process per
  configuration, ``max_batch`` ≥ the sweep's largest concurrency.
- ``command``: the user's own server from a template such as
  ``vllm serve MODEL --port {port} --speculative-config {spec}``. Placeholders: ``{port}`` (a free
  port), ``{spec}`` (the config's JSON, one argument), ``{model}`` (``--model``). For the baseline the
  ``{spec}`` argument — and the flag just before it — is left out, and so is every word written
  ``{spec:WORD}`` (a flag only a speculative server takes, e.g.
  ``{spec:--per-request-spec-decode-metrics=detailed}``: vLLM refuses it without speculation; with
  speculation it becomes ``WORD``). Leading ``NAME=value`` words set
  environment variables. No shell runs the command (nothing in a config can inject one). Healthy when
  ``/health`` or ``/v1/models`` answers 200; its log is kept; it is stopped after its cells.
- ``urls``: servers already running, ``label -> base URL``; nothing is started or stopped.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from specgauge.config import ConfigError
from specgauge.paths import public_url
from specgauge.servers import (
    ManagedServer,
    ServerStartError,
    embedded_server,
    free_port,
)

_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SPEC_ONLY = re.compile(r"^\{spec:(.+)\}$")  #: a word only a speculative server gets
_SECRET_FLAG = re.compile(r"(key|token|secret|passw)", re.IGNORECASE)
HEALTH_PATHS = ("/health", "/v1/models")


class ServerTarget(BaseModel):
    """How the sweep reaches a server for each configuration (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    kind: Literal["embedded", "command", "urls"] = "embedded"
    model: str | None = None  #: embedded: the target model directory (None: the shipped tiny target); command: {model}
    command: str | None = None
    urls: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)  #: extra environment for started servers
    threads: int = Field(default=1, ge=1)  #: embedded: torch threads per server
    health_timeout_s: float = Field(default=600.0, gt=0)
    #: niceness of started servers (0: as the caller): on a host where the load generator shares cores
    #: with the server, a niced server cannot starve the client's timestamps
    nice: int = Field(default=0, ge=0, le=19)
    api_key: SecretStr | None = None  #: sent by bench; never written

    @classmethod
    def embedded(cls, model: str | Path | None = None, threads: int = 1, nice: int = 0) -> ServerTarget:
        return cls(kind="embedded", model=None if model is None else str(model), threads=threads, nice=nice)

    @classmethod
    def from_command(cls, command: str, model: str | None = None, env: dict[str, str] | None = None,
                     health_timeout_s: float = 600.0, nice: int = 0) -> ServerTarget:
        t = cls(kind="command", command=command, model=model, env=env or {}, health_timeout_s=health_timeout_s, nice=nice)
        t.check_command()
        return t

    @classmethod
    def from_urls(cls, urls: dict[str, str]) -> ServerTarget:
        for name, url in urls.items():
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"--url {name}={url}: not an http(s) URL")
        return cls(kind="urls", urls={k: v.rstrip("/") for k, v in urls.items()})

    def check_command(self) -> None:
        assert self.command is not None
        try:
            words = shlex.split(self.command)
        except ValueError as e:
            raise ConfigError(f"--server-cmd: cannot split into words: {e}") from None
        if not words:
            raise ConfigError("--server-cmd is empty")
        if not any("{port}" in w for w in words):
            raise ConfigError("--server-cmd must contain {port} (the sweep picks a free port per server)")
        if any("{model}" in w for w in words) and not self.model:
            raise ConfigError("--server-cmd uses {model}: pass --model")

    def check_labels(self, labels: list[str], speculative: dict[str, bool]) -> None:
        """Every configuration has a way to its server."""
        if self.kind == "urls":
            missing = [lb for lb in labels if lb not in self.urls]
            if missing:
                raise ConfigError(f"--url: no server given for {', '.join(missing)}; pass --url {missing[0]}=http://HOST:PORT "
                                  "(the baseline without speculation is 'off')")
        if self.kind == "command" and any(speculative.values()):
            assert self.command is not None
            if "{spec}" not in self.command:
                raise ConfigError("--server-cmd must contain {spec} where the speculative config goes, "
                                  "e.g. --speculative-config {spec}")

    def secrets(self) -> list[str]:
        """Values that must never reach a file: the API key and secret-looking flag values in the command."""
        out = [self.api_key.get_secret_value()] if self.api_key else []
        if self.command:
            words = shlex.split(self.command)
            for i, w in enumerate(words):
                flag, eq, val = w.partition("=")
                if flag.startswith("-") and _SECRET_FLAG.search(flag):
                    if eq and val:
                        out.append(val)
                    elif i + 1 < len(words):
                        out.append(words[i + 1])
                elif _ENV_WORD.match(w) and _SECRET_FLAG.search(flag):
                    out.append(val)
        out += [v for k, v in self.env.items() if _SECRET_FLAG.search(k)]
        return [s for s in out if s]

    def public(self) -> dict[str, Any]:
        """A description safe to write beside the results: secrets masked, URL credentials dropped."""
        d: dict[str, Any] = {"kind": self.kind}
        if self.kind == "embedded":
            d["model"] = self.model or "tiny-target (shipped)"
            d["threads"] = self.threads
        if self.command:
            d["command"] = scrub(self.command, self.secrets())
            if self.model:
                d["model"] = self.model
        if self.urls:
            d["urls"] = {k: public_url(v) for k, v in self.urls.items()}
        if self.nice:
            d["nice"] = self.nice
        if self.env:
            d["env"] = {k: ("***" if _SECRET_FLAG.search(k) else v) for k, v in self.env.items()}
        d["api_key_set"] = self.api_key is not None
        return d


def scrub(text: str, secrets: list[str]) -> str:
    for s in secrets:
        text = text.replace(s, "***")
    return text


def render_command(template: str, *, port: int, spec: dict[str, Any] | None, model: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment for one server from a ``--server-cmd`` template.

    ``{spec}`` becomes the config's JSON as one argument; without speculation the word holding
    ``{spec}`` is dropped, and so is the flag right before it when ``{spec}`` stood alone, and so is
    every ``{spec:WORD}`` (which is ``WORD`` with speculation)."""
    words = shlex.split(template)
    env: dict[str, str] = {}
    while words and _ENV_WORD.match(words[0]):
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    out: list[str] = []
    for w in words:
        only = _SPEC_ONLY.match(w)
        if only:
            if spec is None:
                continue
            w = only.group(1)
        if "{spec}" in w and spec is None:
            if w == "{spec}" and out and out[-1].startswith("-"):
                out.pop()
            continue
        w = w.replace("{port}", str(port))
        if "{model}" in w:
            w = w.replace("{model}", model or "")
        if "{spec}" in w:
            w = w.replace("{spec}", json.dumps(spec, separators=(",", ":")))
        out.append(w)
    if not out:
        raise ConfigError(f"--server-cmd {template!r}: no command left after the environment words")
    return out, env


def _log_path(log: Path) -> Path:
    """``server.log``, or ``server-2.log`` … when an earlier session's log is there (kept)."""
    if not log.exists():
        return log
    n = 2
    while (p := log.with_name(f"{log.stem}-{n}{log.suffix}")).exists():
        n += 1
    return p


@contextmanager
def open_server(target: ServerTarget, label: str, spec: dict[str, Any] | None, log: Path, max_batch: int) -> Iterator[tuple[str, Path | None]]:
    """Yields (base URL, log path) of a healthy server for one configuration; stops it afterwards."""
    if target.kind == "urls":
        yield target.urls[label], None
        return
    log = _log_path(log)
    srv: ManagedServer
    if target.kind == "embedded":
        from specgauge.models import target_dir

        model = Path(target.model) if target.model else target_dir()
        srv = embedded_server(model, log, spec, max_batch=max_batch, threads=target.threads)
        srv.env.update(target.env)
        srv.nice = target.nice
    else:
        assert target.command is not None
        port = free_port()
        argv, env = render_command(target.command, port=port, spec=spec, model=target.model)
        srv = ManagedServer(f"server for {label} ({argv[0]})", argv, port, log, env={**target.env, **env},
                            health_timeout=target.health_timeout_s, health_paths=HEALTH_PATHS, nice=target.nice)
    secrets = target.secrets()

    def scrub_log() -> None:
        if secrets and log.exists():
            log.write_text(scrub(log.read_text(errors="replace"), secrets))

    try:
        srv.start()
    except OSError as e:  # the executable is missing or not runnable
        raise ServerStartError(scrub(f"cannot start the server for {label}: {e}", secrets)) from None
    except ServerStartError as e:
        scrub_log()
        raise ServerStartError(scrub(str(e), secrets)) from None
    except BaseException:  # Ctrl-C while waiting for health: the server runs in its own session, stop it
        srv.stop()
        scrub_log()
        raise
    try:
        yield srv.base_url, log
    finally:
        srv.stop()
        scrub_log()
