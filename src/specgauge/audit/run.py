"""``run_audit(config)``: start or reach the two servers, collect samples, judge, write ``audit.json``.

The candidate serves with speculation, the reference is the same server binary and model without
it: given as two URLs, started from a ``--server-cmd`` template (``{port}``, ``{spec}``, ``{model}``
as for ``specgauge sweep``: the reference's command leaves ``{spec}`` and its flag out), or two
embedded engines (``specgauge serve``). Every completion is
appended to ``samples.jsonl`` as it arrives, so a fault loses nothing and ``resume`` continues.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
from pydantic import BaseModel, Field, model_validator

from specgauge.audit.analysis import (
    EXIT_CODES,
    DistributionTest,
    GreedyCheck,
    StatsSettings,
    Verdict,
    distribution_tests,
    greedy_check,
    judge,
)
from specgauge.audit.client import AuditError, ServerInfo, SideClient
from specgauge.audit.prompts import (
    AuditPrompt,
    builtin_prompts,
    fingerprint,
    workload_prompts,
)
from specgauge.audit.store import SampleStore
from specgauge.config import ConfigError, SpeculativeConfig
from specgauge.paths import public_url

#: the embedded candidate's default: n-gram that drafts on short prompts (vLLM's default 5/5 may not)
DEFAULT_SPECULATIVE_CONFIG = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}'
SIDES = ("reference", "candidate")
Progress = Callable[[str], None]


class AuditConfig(BaseModel):
    base_url: str | None = Field(default=None, description="candidate server (speculation on)")
    reference_url: str | None = Field(default=None, description="reference server (same binary, speculation off)")
    embedded: bool = False
    server_cmd: str | None = Field(default=None, description="command template with {port} and {spec} (as for sweep)")
    model_dir: Path | None = Field(default=None, description="embedded: the model directory (default: shipped tiny "
                                   "target); server-cmd: what {model} stands for")
    speculative_config: str | None = Field(default=None, description="embedded / server-cmd: the candidate's config (JSON)")
    workaround: str | None = Field(default=None, description="server-cmd: a specgauge workaround on both servers' PYTHONPATH")
    model: str | None = Field(default=None, description="model name in requests (default: each server's first)")
    workload: list[Path] | None = None
    num_prompts: int = Field(default=4, ge=1)
    samples: int = Field(default=300, ge=1, description="sampled completions per prompt and side")
    positions: int = Field(default=4, ge=1, description="first positions tested (= max_tokens of a sample)")
    temperature: float = Field(default=0.8, gt=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    samples_per_request: int = Field(default=50, ge=1, description="OpenAI n per request, where the server takes it")
    concurrency: int = Field(default=4, ge=1, description="sampling requests in flight per side")
    greedy_rounds: int = Field(default=3, ge=0, description="rounds of mixed batches (0: no greedy check)")
    greedy_tokens: int = Field(default=32, ge=1)
    mixed_concurrency: int = Field(default=4, ge=2, description="requests in flight in a mixed batch")
    control: bool = Field(default=True, description="also send the mixed batches to the reference")
    stats: StatsSettings = Field(default_factory=StatsSettings)
    output_dir: Path = Path("results/audit")
    resume: bool = False
    timeout: float = Field(default=300.0, gt=0)
    api_key: str | None = Field(default=None, exclude=True, repr=False)

    @model_validator(mode="after")
    def _one_mode(self) -> AuditConfig:
        urls = self.base_url is not None or self.reference_url is not None
        modes = [m for m, on in (("--base-url/--reference-url", urls), ("--embedded", self.embedded),
                                 ("--server-cmd", self.server_cmd is not None)) if on]
        if len(modes) != 1:
            raise ConfigError("audit: give exactly one of --base-url with --reference-url, --embedded, --server-cmd"
                              + (f" (got {' and '.join(modes)})" if modes else ""))
        if urls and (self.base_url is None or self.reference_url is None):
            raise ConfigError("--base-url and --reference-url go together: the candidate and the reference server")
        if self.server_cmd is not None:
            if "{port}" not in self.server_cmd:
                raise ConfigError("--server-cmd: the template must contain {port} (each server gets a free port)")
            if "{spec}" not in self.server_cmd:
                raise ConfigError("--server-cmd: the template must contain {spec} where the candidate's speculative "
                                  "config goes, e.g. --speculative-config {spec} (left out for the reference)")
            if self.speculative_config is None:
                raise ConfigError("--server-cmd needs --speculative-config (the candidate's)")
        if urls and self.speculative_config is not None:
            raise ConfigError("--speculative-config: only with --embedded or --server-cmd (the servers at the URLs "
                              "are already configured)")
        if self.workaround is not None and self.server_cmd is None:
            raise ConfigError("--workaround: only with --server-cmd (specgauge starts those servers)")
        if self.speculative_config is not None:
            SpeculativeConfig.from_json(self.speculative_config)  # errors name the key
        return self


class AuditResult(BaseModel):
    verdict: Verdict
    exit_code: int
    reasons: list[str]
    method: str
    settings: dict[str, Any]
    servers: dict[str, ServerInfo]
    prompts: list[str]
    samples: dict[str, list[int]]
    tests: list[DistributionTest]
    greedy: GreedyCheck
    skipped_lines: int = 0


METHOD = ("per prompt and position j: chi-square test of homogeneity (scipy chi2_contingency; Pearson, or G) of the "
          "distribution of the token at position j, candidate vs reference, rare tokens pooled into 'other'; "
          "Holm across all tests; greedy requests in batches mixed with sampled ones vs the reference's greedy "
          "output sent alone, the reference's own mixed batches as control")


def run_audit(cfg: AuditConfig, progress: Progress | None = None) -> AuditResult:
    say = progress or (lambda _msg: None)
    prompts = workload_prompts(cfg.workload, cfg.num_prompts) if cfg.workload else builtin_prompts(cfg.num_prompts)
    out = cfg.output_dir
    store = SampleStore(out / "samples.jsonl", _header(cfg, prompts), cfg.resume)
    try:
        with _servers(cfg, say) as (candidate_url, reference_url):
            infos = asyncio.run(_collect(cfg, prompts, store, {"candidate": candidate_url, "reference": reference_url}, say))
    except AuditError as e:
        raise AuditError(f"{e} (what was measured is kept in {store.path}; rerun with --resume to continue)") from None
    tests = distribution_tests(prompts, store, cfg.positions, cfg.stats)
    greedy = greedy_check(prompts, store, cfg.greedy_rounds, cfg.control)
    verdict, reasons = judge(tests, greedy, cfg.stats)
    result = AuditResult(
        verdict=verdict, exit_code=EXIT_CODES[verdict], reasons=reasons, method=METHOD, settings=_settings(cfg),
        servers={k: v.model_copy(update={"base_url": public_url(v.base_url)}) for k, v in infos.items()},
        prompts=[p.id for p in prompts],
        samples={side: [store.count(side, i) for i in range(len(prompts))] for side in SIDES},
        tests=tests, greedy=greedy, skipped_lines=store.skipped_lines,
    )
    tmp = out / "audit.json.tmp"
    tmp.write_text(json.dumps(result.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out / "audit.json")
    return result


# ------------------------------------------------------------------------------------ collection


async def _collect(cfg: AuditConfig, prompts: list[AuditPrompt], store: SampleStore, urls: dict[str, str],
                   say: Progress) -> dict[str, ServerInfo]:
    limits = aiohttp.TCPConnector(limit=max(cfg.concurrency, cfg.mixed_concurrency) * 2)
    async with aiohttp.ClientSession(connector=limits) as session:
        clients = {side: SideClient(side=side, base_url=urls[side], session=session, api_key=cfg.api_key,
                                    model=cfg.model, timeout=cfg.timeout) for side in SIDES}
        infos = {side: await c.probe(prompts[0], cfg.samples_per_request) for side, c in clients.items()}
        for i, p in enumerate(prompts):
            for side in SIDES:
                await _sample(cfg, clients[side], i, p, store)
            say(f"prompt {i + 1}/{len(prompts)}: {store.count('candidate', i)} candidate and "
                f"{store.count('reference', i)} reference samples")
        if cfg.greedy_rounds:
            ref = clients["reference"]
            for i, p in enumerate(prompts):  # greedy, one at a time: the expected outputs
                if ("reference", i) not in store.greedy_alone:
                    (c,) = await ref.complete(p, cfg.greedy_tokens, 0.0)
                    store.add({"type": "greedy_alone", "side": "reference", "prompt": i, "tokens": c.tokens})
            for side in (("candidate", "reference") if cfg.control else ("candidate",)):
                for r in range(cfg.greedy_rounds):
                    if all((side, r, i) in store.greedy_mixed for i in range(len(prompts))):
                        continue
                    await _mixed_round(cfg, clients[side], r, prompts, store)
                say(f"greedy in mixed batches on the {side}: {cfg.greedy_rounds} rounds")
    return infos


async def _gather_all(coros: list[Any]) -> None:
    """Run all; whatever finished is stored by the coroutines themselves; then raise the first error."""
    results = await asyncio.gather(*coros, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r


async def _sample(cfg: AuditConfig, client: SideClient, i: int, prompt: AuditPrompt, store: SampleStore) -> None:
    assert client.info is not None
    need = cfg.samples - store.count(client.side, i)
    if need <= 0:
        return
    per = cfg.samples_per_request if client.info.supports_n else 1
    sizes = [per] * (need // per) + ([need % per] if need % per else [])
    sem = asyncio.Semaphore(cfg.concurrency)

    async def one(n: int) -> None:
        async with sem:
            for c in await client.complete(prompt, cfg.positions, cfg.temperature, cfg.top_p, n):
                store.add_sample(client.side, i, c)

    await _gather_all([one(n) for n in sizes])


async def _mixed_round(cfg: AuditConfig, client: SideClient, r: int, prompts: list[AuditPrompt],
                       store: SampleStore) -> None:
    """Greedy and sampled requests interleaved (g0, s0, g1, s1, ...), ``mixed_concurrency`` in flight."""
    sem = asyncio.Semaphore(cfg.mixed_concurrency)

    async def greedy(i: int) -> None:
        async with sem:
            (c,) = await client.complete(prompts[i], cfg.greedy_tokens, 0.0)
            store.add({"type": "greedy_mixed", "side": client.side, "round": r, "prompt": i, "tokens": c.tokens})

    async def sampled(i: int) -> None:
        async with sem:
            await client.complete(prompts[i], cfg.greedy_tokens, cfg.temperature, cfg.top_p)

    await _gather_all([f(i) for i in range(len(prompts)) for f in (greedy, sampled)])


# ----------------------------------------------------------------------------------- servers


@contextlib.contextmanager
def _servers(cfg: AuditConfig, say: Progress) -> Iterator[tuple[str, str]]:
    """(candidate URL, reference URL), starting the servers as ``specgauge sweep`` does (same
    ``--server-cmd`` template rules) when the config says so."""
    if cfg.base_url is not None and cfg.reference_url is not None:
        yield cfg.base_url, cfg.reference_url
        return
    from specgauge.sweep.target import open_server

    spec = json.loads(cfg.speculative_config or DEFAULT_SPECULATIVE_CONFIG)
    target = _target(cfg)
    max_batch = max(8, cfg.concurrency, cfg.mixed_concurrency)
    say("starting the reference server (no speculation) and the candidate server")
    with open_server(target, "reference", None, cfg.output_dir / "reference.log", max_batch) as (ref, _), \
            open_server(target, "candidate", spec, cfg.output_dir / "candidate.log", max_batch) as (cand, _):
        yield cand, ref


def _target(cfg: AuditConfig) -> Any:
    from specgauge.sweep.target import ServerTarget

    if cfg.embedded:
        return ServerTarget.embedded(cfg.model_dir)
    assert cfg.server_cmd is not None
    env: dict[str, str] = {}
    if cfg.workaround:
        from specgauge.workarounds import pythonpath_env

        env = pythonpath_env(cfg.workaround)
    return ServerTarget.from_command(cfg.server_cmd, model=None if cfg.model_dir is None else str(cfg.model_dir),
                                     env=env)


# ----------------------------------------------------------------------------------- records


def _header(cfg: AuditConfig, prompts: list[AuditPrompt]) -> dict[str, Any]:
    """What a sample means; a resumed audit must agree on all of it (sample counts may grow)."""
    return {"prompts": fingerprint(prompts), "temperature": cfg.temperature, "top_p": cfg.top_p,
            "positions": cfg.positions, "greedy_tokens": cfg.greedy_tokens}


def _portable(value: Any) -> Any:
    """Absolute paths -> their last component (results carry no machine paths)."""
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_portable(v) for v in value]
    if isinstance(value, str) and os.path.isabs(value):
        return Path(value).name
    return value


def _settings(cfg: AuditConfig) -> dict[str, Any]:
    d = cfg.model_dump(mode="json", exclude={"api_key", "output_dir", "resume", "server_cmd"})
    for k in ("base_url", "reference_url"):
        if d.get(k):
            d[k] = public_url(d[k])
    if cfg.speculative_config is not None or cfg.embedded:
        d["speculative_config"] = json.loads(cfg.speculative_config or DEFAULT_SPECULATIVE_CONFIG)
    if cfg.server_cmd is not None:
        words = [w for w in shlex.split(cfg.server_cmd) if "=" not in w.split("/")[0]]  # no NAME=value words
        d["server_cmd"] = words[0].rsplit("/", 1)[-1] if words else ""  # the program's name only
    return _portable(d)
