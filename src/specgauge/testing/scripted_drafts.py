"""What the scripted server (``scripted_server``) and its virtual clock (``virtual_bench``) answer and draft,
apart from serving: a workload request's identity (``request_key``, ``trace_key``), the logged outputs it
answers with (``load_logged``), the replayed drafts per run (``replay_traces``), and vLLM's synthetic
acceptance draws (``draw_accepted``, ``synthetic_steps``; the conditional rates are the engine's own,
``config.conditional_rates``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specgauge.config import resolve_spec


def request_key(body: dict[str, Any]) -> str:
    """What identifies a workload request in its HTTP body (the prompt and the sampling settings)."""
    content = body.get("messages") if "messages" in body else body.get("prompt")
    return json.dumps([content, body.get("temperature"), body.get("seed"), body.get("top_p")], sort_keys=True)


def trace_key(prompt: Sequence[int], output: Sequence[int]) -> str:
    """What identifies a logged request in a traces file: its prompt and output token ids."""
    return hashlib.sha1(json.dumps([list(map(int, prompt)), list(map(int, output))]).encode()).hexdigest()[:16]


#: traces of one config: per run on its server, request -> (drafted per decode step, accepted per step)
Traces = list[dict[str, tuple[list[int], list[int]]]]


def replay_traces(replay: Any, spec: dict[str, Any] | None, runs: int = 1) -> Traces:
    """Per-step drafts of every planned request of ``replay`` (a ``WorkloadReplay``) under ``spec``, for a
    server's runs 0..runs-1 over the same requests (run r: the suffix cache holds the r earlier runs).
    A synthetic config's steps depend on its draws, so its traces are per output position instead
    (``WorkloadReplay.positions``: what the drafter proposes at each position)."""
    from specgauge.predict.replay import prior_requests

    out: Traces = []
    by_id = {r.id: r for r in replay.requests}
    n = len(replay.requests)
    cfg = resolve_spec(spec)[2]
    for run in range(runs):
        tr: dict[str, tuple[list[int], list[int]]] = {}
        prior = prior_requests(n, 0, run)
        if cfg is not None and cfg.synthetic:
            for lr, pt in zip(replay.requests, replay.positions(spec, prior), strict=True):
                tr[trace_key(lr.prompt_ids, lr.output_ids)] = (pt.drafted.astype(int).tolist(), pt.accepted.astype(int).tolist())
        else:
            for p in replay.planned(spec, prior):
                lr = by_id[p.id]
                tr[trace_key(lr.prompt_ids, lr.output_ids)] = (p.drafted.astype(int).tolist(), p.accepted.astype(int).tolist())
        out.append(tr)
    return out


def draw_accepted(drafted: int, rates: Sequence[float], rng: np.random.Generator) -> int:
    """vLLM's synthetic rejection rule: position i of a draft is accepted with its conditional rate while
    every position before it was (one draw per position reached)."""
    a = 0
    while a < drafted and rng.random() < rates[a]:
        a += 1
    return a


def synthetic_steps(drafted_at: Sequence[int], out_len: int, rates: Sequence[float],
                    rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """(drafted, accepted) per decode step of one request under synthetic acceptance, drawn as the server
    draws them: a step starting with ``pos`` tokens emitted drafts ``drafted_at[pos]`` (the drafter's
    proposal there; 0 past the table) and emits accepted + 1 tokens (the prefill emitted token 0)."""
    ds: list[int] = []
    acc: list[int] = []
    pos = 1
    while pos < out_len:
        d = drafted_at[pos] if pos < len(drafted_at) else 0
        a = draw_accepted(d, rates, rng)
        ds.append(d)
        acc.append(a)
        pos += min(a + 1, out_len - pos)
    return ds, acc


def load_logged(workload: Sequence[Path]) -> dict[str, tuple[list[int], list[int]]]:
    """request key -> (prompt ids, output ids) for every request with logged token ids."""
    from specgauge.workload.loaders import LoadOptions, load_workload

    out: dict[str, tuple[list[int], list[int]]] = {}
    for it in load_workload(list(workload), LoadOptions()):
        r = it.response
        if r is None or r.output_token_ids is None or r.prompt_token_ids is None:
            continue
        out.setdefault(request_key(it.request.body()), (list(r.prompt_token_ids), list(r.output_token_ids)))
    return out
