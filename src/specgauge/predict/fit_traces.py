"""Which replayed traces a calibration run's requests followed, and their check against its live counts.

A stateless drafter's traces depend on the workload alone. A stateful one (suffix decoding's shared
cache) remembers what its server saw before, so ``best_traces`` tries the server states a run could
have had and keeps the one that reproduces it best; on the embedded engine, which reports each request's
place in its schedule, ``engine_order_traces`` replays the cache in the engine's own call order instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specgauge.offline.traces import PlannedRequest, replay_check
from specgauge.predict.runs import RunData


def best_traces(replay: Any, rd: RunData, runs: Sequence[RunData]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Replay traces for one run, and their check against its live counts. A stateful drafter (suffix)
    remembers what its server saw before — warm-ups, and earlier runs when one server served several
    concurrencies (as a sweep does) — so the candidates are 0..n earlier runs, with or without the
    sampled requests' earlier outputs. The winner reproduces the most requests exactly, less one request
    per request's worth of acceptance gap (requests × |live − replayed acceptance|): a candidate that
    gets one more greedy request right but misses the run's acceptance by 30 points (sampled outputs
    that did not repeat, because other drafts drew other random numbers) is the wrong server state.
    Ties (a cache that stopped learning after two runs replays the same after three) go to the count
    the runs' send times give, which is exact when one server served every run of the config."""
    from specgauge.drafters.base import is_stateful
    from specgauge.predict.replay import prior_requests

    live = engine_order_traces(replay, rd, runs)
    if live is not None:
        return live
    cfg = rd.run.get("config") or {}
    warm = int(cfg.get("warmup") or 0)
    n = len(replay.requests)
    same = sum(1 for r in runs if r.cell.label == rd.cell.label)
    mine = _first_send(rd)
    chrono = sum(1 for r in runs if r.cell.label == rd.cell.label and _first_send(r) < mine)
    best: tuple[dict[str, Any], dict[str, Any]] | None = None
    best_key: tuple[float, int] | None = None
    for earlier in range(same if rd.method is not None and is_stateful(rd.method) else 1):
        prior = prior_requests(n, warm, earlier)
        for repeat in (False, True) if prior else (False,):
            traces = replay.by_id(rd.cell.speculative_config, prior, repeat)
            chk = replay_check(rd.records, traces)
            if earlier:
                chk["earlier_runs_on_this_server"] = earlier
            if repeat:
                chk["sampled_outputs_repeat"] = True
            key = (_trace_score(chk), -abs(earlier - chrono))
            if best_key is None or key > best_key:
                best, best_key = (traces, chk), key
    assert best is not None
    return best


def engine_order_traces(replay: Any, rd: RunData, runs: Sequence[RunData]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Suffix runs of the embedded engine, which reports each request's place in its schedule: the cache is
    replayed from the live records (warm-ups and every run this server served before) in the engine's own
    call order (``offline.schedule``), so the server state is known, not guessed. None elsewhere."""
    if rd.method != "suffix":
        return None
    from specgauge.config import resolve_spec
    from specgauge.offline.record_fields import max_model_len_of_server, token_ids
    from specgauge.offline.schedule import schedule_of, schedule_traces, scheduled_requests

    same = [r for r in runs if r.cell.label == rd.cell.label]
    sched, _ = scheduled_requests([x for r in same for x in r.records], [w for r in same for w in r.run.get("warmups") or []])
    if sched is None:  # not one server for all of them: this run alone
        same = [rd]
        sched, _ = scheduled_requests(rd.records, rd.run.get("warmups") or [])
    _, k, cfg = resolve_spec(rd.cell.speculative_config)
    if sched is None or cfg is None:
        return None
    opts = {n: v for n, v in cfg.model_dump().items() if n.startswith("suffix_decoding_") and v is not None}
    traces = schedule_traces(sched, opts, k, max_model_len_of_server(rd.run.get("server") or {}))
    if traces is None:
        return None
    greedy = {r.id: r.greedy for r in replay.requests}
    planned: dict[str, Any] = {}
    for rec in rd.records:
        sc, ids = schedule_of(rec.extra), token_ids(rec.extra)
        if rec.ok and sc is not None and ids is not None and sc[1] in traces:
            tr = traces[sc[1]]
            planned[rec.id] = PlannedRequest(id=rec.id, prompt_tokens=len(ids[0]), output_tokens=len(ids[1]), drafted=tr.drafted,
                                           accepted=tr.accepted, greedy=greedy.get(rec.id, True))
    chk = replay_check(rd.records, planned)
    chk["replayed_from"] = "the live outputs, in the engine's own call order"
    first = min((sc[1] for x in rd.records if (sc := schedule_of(x.extra)) is not None), default=0)
    earlier = sum(1 for r in same if r is not rd and any((sc := schedule_of(x.extra)) is not None and sc[1] < first
                                                          for x in r.records))
    if earlier:
        chk["earlier_runs_on_this_server"] = earlier
    return planned, chk


def _first_send(rd: RunData) -> float:
    return min((r.started_at for r in rd.records), default=0.0)


def _trace_score(chk: Mapping[str, Any]) -> float:
    gap = chk.get("gap")
    return float(chk["identical_requests"]) - float(chk.get("requests") or 0) * (abs(gap) if gap is not None else 0.0)
