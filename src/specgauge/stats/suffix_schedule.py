"""The embedded engine's suffix cache, replayed from bench records in the engine's own call order.

The embedded server's per-request ``metrics.speculative_decoding`` (``detailed``) carries
``specgauge_prefill_step`` and ``specgauge_admitted`` (``engine.spec_stats.SpecStats.schedule``). When
the records (plus the run's warm-ups, ``RunRecord.warmups``) hold *every* request the server admitted
— admissions 0..n-1, each with its token ids — the cache's whole history is known and
``drafters._suffix_schedule.replay_schedule`` gives the server's drafts exactly, requests that
overlapped in time included. Records of several runs on one server (a sweep's concurrencies) are
one schedule. Boundary: records in, traces out; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from specgauge.drafters._suffix_schedule import ScheduledRequest, ScheduleError, replay_schedule
from specgauge.drafters.base import ReplayTrace, make_drafter
from specgauge.i18n import en
from specgauge.records import RequestRecord
from specgauge.stats.record_fields import per_step, spec_decoding, token_ids


def schedule_of(extra: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(prefill step, admission number) the embedded server reported for one request, or None."""
    sd = spec_decoding(dict(extra) if extra else None)
    if sd is None:
        return None
    p, a = sd.get("specgauge_prefill_step"), sd.get("specgauge_admitted")
    return (p, a) if isinstance(p, int) and isinstance(a, int) else None


def scheduled_requests(records: Iterable[RequestRecord], warmups: Iterable[Mapping[str, Any]] = ()
                       ) -> tuple[list[ScheduledRequest] | None, str]:
    """Every request the server admitted, as a schedule; (None, why) when one is missing or unplaced."""
    items = [(str(w.get("id")), w) for w in warmups if w.get("ok")]
    items += [(r.id, r.extra or {}) for r in records if r.ok]
    out: list[ScheduledRequest] = []
    for rid, extra in items:
        ids, sc = token_ids(dict(extra)), schedule_of(extra)
        if sc is None:
            return None, en("rc.s.no_schedule", id=rid)
        if ids is None:
            return None, en("rc.s.no_ids", id=rid)
        steps = per_step(dict(extra))
        out.append(ScheduledRequest(rid, ids[0], ids[1], sc[0], sc[1], steps[-1][1] if steps else None))
    if not out:
        return None, en("rc.s.none")
    adm = sorted(r.admitted for r in out)
    if len(set(adm)) != len(adm):
        return None, en("rc.s.shared")
    if adm != list(range(len(adm))):
        missing = adm[-1] + 1 - len(adm)
        return None, en("rc.s.missing", n=missing)
    return out, ""


def schedule_traces(requests: Sequence[ScheduledRequest], drafter_options: Mapping[str, Any], k: int,
                    max_model_len: int | None) -> dict[int, ReplayTrace] | None:
    """Replay ``requests`` through a fresh suffix drafter in the engine's order: traces by admission number
    (None: an inconsistent schedule)."""
    drafter = make_drafter("suffix", **{**drafter_options, "num_speculative_tokens": k, "max_model_len": max_model_len})
    try:
        return replay_schedule(drafter, requests, k, max_model_len)
    except ScheduleError:
        return None

