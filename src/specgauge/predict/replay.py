"""Per-request replay traces of a workload under one speculative config, in bench's request order.

The replay theorem (``shared/design.md``) makes a deterministic drafter's live steps on a logged output
equal to the replayed ones, so these traces are what the server will do, step by step. Requests are
planned as ``specgauge bench`` plans them (``workload.plan``: the first ``num_prompts``, cycling with
``~rN`` ids), and stateful drafters (suffix) see them in that order. Loading, token ids and the replay
itself are ``specgauge.offline``'s; this module adds the plan, the server's earlier requests and a cache.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from specgauge.config import SpeculativeConfig, resolve_spec
from specgauge.i18n import en
from specgauge.drafters.base import (
    ReplayTrace,
    accepted_prefix,
    drafter_factory,
    is_stateful,
    offers_whole_output,
    trace_from_runs,
)
from specgauge.offline.traces import PlannedRequest, PositionTrace
from specgauge.offline.replay import (
    LazyTokenizer,
    MethodReplay,
    MethodSpec,
    ReplayedRequest,
    ReplayError,
    replayed_request,
)
from specgauge.predict.law import is_model_method
from specgauge.predict.types import ProfileError
from specgauge.workload.plan import plan_cycle

#: teacher-forced accepted runs are computed capped at this k at least (one pass serves k <= it)
WHOLE_OUTPUT_KMAX = 8
#: vLLM's switch for verification lengths chosen per request from a confidence (DSpark; ``positions``)
ADAPTIVE_KEY = "enable_adaptive_verification"


@dataclass
class LoggedRequest:
    id: str  #: the planned id (``~rN`` on cycled copies)
    base_id: str
    prompt_ids: list[int]
    output_ids: list[int]
    exact: bool  #: token ids were logged (not re-tokenised text)
    greedy: bool = True  #: temperature 0: every run reproduces the logged output


def prior_requests(n: int, warmup: int = 0, earlier_runs: int = 0) -> list[int]:
    """Planned-request indices a server completed before a run: ``earlier_runs`` bench runs over the
    same ``n`` requests (each with its ``warmup`` requests first, as bench sends them), then this run's
    own warm-ups."""
    if n <= 0:
        return []
    warm = [i % n for i in range(warmup)]
    return (warm + list(range(n))) * earlier_runs + warm


def config_key(spec: dict[str, Any] | None) -> str:
    return json.dumps(spec or {}, sort_keys=True)


class WorkloadReplay:
    """Loads a workload with logged responses once; gives ``PlannedRequest`` lists per config (cached)."""

    def __init__(self, workload: Sequence[Path], tokenizer: Any = None, num_prompts: int | None = None,
                 load: Any = None, segment: str | None = None) -> None:
        """``load``: ``LoadOptions`` (format, limit, segment_by); ``segment``: only that segment's requests;
        ``tokenizer``: a tokenizer or its spec, loaded only if a request logs no token ids."""
        from specgauge.workload.loaders import LoadOptions, load_workload

        items = load_workload(list(workload), load or LoadOptions())
        if segment is not None:
            items = [it for it in items if it.request.segment == segment]
        tok = LazyTokenizer(tokenizer)
        replayed = [replayed_request(it, tok) for it in items]
        reqs = [r for r in replayed if isinstance(r, ReplayedRequest)]
        self._init(reqs, len(replayed) - len(reqs), num_prompts, ", ".join(map(str, workload)))

    @classmethod
    def from_replayed(cls, requests: Sequence[ReplayedRequest], skipped: int = 0, where: str = "the workload") -> WorkloadReplay:
        """Over requests already tokenised (``specgauge.offline``), each once; ``skipped``: those left out
        for lack of a logged output."""
        self = cls.__new__(cls)
        self._init(list(requests), skipped, None, where)
        return self

    def _init(self, reqs: list[ReplayedRequest], skipped: int, num_prompts: int | None, where: str) -> None:
        if not reqs:
            raise ProfileError(f"{where}: no request has a logged response to replay; "
                               "prediction needs the target's logged outputs (token ids)")
        self.notes: list[str] = []
        if skipped:
            self.notes.append(en("predict.n.no_output", n=skipped))
        approx = sum(not r.exact for r in reqs)
        if approx:
            self.notes.append(en("predict.n.approx", n=approx))
        base = [LoggedRequest(id=r.id, base_id=r.id, prompt_ids=r.prompt_ids, output_ids=r.output_ids, exact=r.exact,
                              greedy=r.greedy) for r in reqs]
        self.requests = plan_cycle(base, num_prompts, lambda b, rid: replace(b, id=rid), lambda b: b.id)
        self._cache: dict[str, list[PlannedRequest]] = {}
        self._pos_cache: dict[str, list[PositionTrace]] = {}
        self._runs: dict[str, tuple[int, dict[str, np.ndarray]]] = {}

    def seed(self, spec: dict[str, Any] | None, traces: Sequence[ReplayTrace]) -> None:
        """Traces replayed elsewhere (simulate's pass), one per planned request in order, as this
        config's cold-server plan (no earlier requests)."""
        self._cache[_cache_key(spec, (), False)] = [self._planned(r, t) for r, t in zip(self.requests, traces, strict=True)]

    @staticmethod
    def _planned(r: LoggedRequest, tr: ReplayTrace) -> PlannedRequest:
        return PlannedRequest(id=r.id, prompt_tokens=len(r.prompt_ids), output_tokens=len(r.output_ids), drafted=tr.drafted,
                              accepted=tr.accepted, greedy=r.greedy)

    def planned(self, spec: dict[str, Any] | None, prior: Sequence[int] = (), sampled_repeat: bool = False) -> list[PlannedRequest]:
        """Traces of the planned requests under ``spec``. ``prior``: indices of planned requests the
        server completed before this run (warm-ups, earlier runs on the same server): a stateful
        drafter (suffix decoding's global cache) learns them first — the greedy ones, which came out as
        logged; a sampled request's earlier output is unknown and left out unless ``sampled_repeat`` (a
        server that repeats its sampled outputs exactly, e.g. seeded without speculation noise). Stateless
        drafters ignore it."""
        method = resolve_spec(spec)[0]
        prior = tuple(prior) if method is not None and is_stateful(method) else ()
        sampled_repeat = sampled_repeat and bool(prior)
        key = _cache_key(spec, prior, sampled_repeat)
        if key not in self._cache:
            self._cache[key] = self._replay(spec, prior, sampled_repeat)
        return self._cache[key]

    def _replay(self, spec: dict[str, Any] | None, prior: tuple[int, ...] = (), sampled_repeat: bool = False) -> list[PlannedRequest]:
        method, k, cfg = resolve_spec(spec)
        if method is None:
            out: list[PlannedRequest] = []
            for r in self.requests:
                z = np.zeros(max(0, len(r.output_ids) - 1), dtype=np.int64)
                out.append(PlannedRequest(id=r.id, prompt_tokens=len(r.prompt_ids), output_tokens=len(r.output_ids),
                                          drafted=z, accepted=z, greedy=r.greedy))
            return out
        assert cfg is not None
        mspec = MethodSpec.from_config(cfg, method)
        if offers_whole_output(method):
            runs = self._whole_output_runs(mspec, k, spec)
            return [self._planned(r, trace_from_runs(runs[r.base_id], k)) for r in self.requests]
        if is_model_method(method) and drafter_factory(method) is None:
            raise ProfileError(f"speculative config {json.dumps(spec)}: no offline replay of {method} here "
                               "(its drafter is not installed)")
        mr = self._method(mspec, k, spec)
        for n, i in enumerate(prior):  # what the server's drafter learned before this run
            r = self.requests[i % len(self.requests)]
            if not r.greedy and not sampled_repeat:  # it came out differently then: what it taught is unknown
                continue
            mr.traces(f"{r.id}~prior{n}", "the server's earlier requests", r.prompt_ids, r.output_ids)
        seen: dict[str, ReplayTrace] = {}
        out = []
        for r in self.requests:
            if not mr.stateful and r.base_id in seen:
                tr = seen[r.base_id]
            else:
                tr = seen[r.base_id] = mr.traces(r.id, "the planned requests", r.prompt_ids, r.output_ids)[k]
            out.append(self._planned(r, tr))
        return out

    def positions(self, spec: dict[str, Any], prior: Sequence[int] = ()) -> list[PositionTrace]:
        """Every planned request's proposal at every output position under ``spec`` (its k the largest),
        in plan order (``schedule.PositionTrace``). A whole-output drafter (a draft model) gives them
        from its one pass; any other drafter is called at each position in turn (for a stateful one,
        suffix decoding, that call order is not the server's: its cache learns the same requests, but
        a request's own tree sees every position — the figure is the replay's, not a bound). ``prior``:
        as ``planned``."""
        method, k, cfg = resolve_spec(spec)
        if method is None or cfg is None:
            raise ProfileError("positions: a speculative config is needed")
        prior = tuple(prior) if is_stateful(method) else ()
        key = "positions" + _cache_key(spec, prior, False)
        if key not in self._pos_cache:
            self._pos_cache[key] = self._positions(spec, method, k, cfg, prior)
        return self._pos_cache[key]

    def _positions(self, spec: dict[str, Any], method: str, k: int, cfg: SpeculativeConfig,
                   prior: tuple[int, ...]) -> list[PositionTrace]:
        mspec = MethodSpec.from_config(cfg, method)
        if spec.get(ADAPTIVE_KEY):
            return self._adaptive_positions(mspec, method, k, spec)
        if offers_whole_output(method):
            runs = self._whole_output_runs(mspec, k, spec)
            out_w = []
            for r in self.requests:
                n = len(r.output_ids)
                out_w.append(PositionTrace(np.full(n, k, dtype=np.int64), np.minimum(runs[r.base_id][:n], k).astype(np.int64)))
            return out_w
        mr = self._method(mspec, k, spec)
        for n, i in enumerate(prior):  # what the server's drafter learned before this run (as ``_replay``)
            r = self.requests[i % len(self.requests)]
            if r.greedy:
                mr.traces(f"{r.id}~prior{n}", "the server's earlier requests", r.prompt_ids, r.output_ids)
        drafter = mr.drafters()[k]
        runs_at = getattr(drafter, "runs_at", None)
        if runs_at is not None:  # a block drafter (DFlash, DSpark): k drafts a step, its accepted run per position
            return [PositionTrace(np.full(len(r.output_ids), k, dtype=np.int64),
                                  np.minimum(runs_at(r.prompt_ids, r.output_ids, k), k).astype(np.int64)) for r in self.requests]
        seen: dict[str, PositionTrace] = {}
        out: list[PositionTrace] = []
        for r in self.requests:
            if not mr.stateful and r.base_id in seen:
                out.append(seen[r.base_id])
                continue
            seen[r.base_id] = pt = _every_position(drafter, r.id, r.prompt_ids, r.output_ids, k)
            out.append(pt)
        return out

    def _adaptive_positions(self, mspec: MethodSpec, method: str, k: int, spec: dict[str, Any]) -> list[PositionTrace]:
        """The seam for verification lengths a server picks per request (DSpark's
        ``enable_adaptive_verification``: vLLM verifies fewer than k drafts, chosen from the head's confidences
        and cost tables profiled on the serving GPU — neither is in a log). A drafter that replays it offers
        ``adaptive_positions(prompt_ids, output_ids, kmax) -> PositionTrace`` (per output position: the drafts
        verified, and how many the output continues); none in the registry does yet. ``ADAPTIVE_KEY: "oracle"``
        asks instead for the policy no server beats: each step verifies exactly the drafts that will be
        accepted (fewest steps, no rejected token in any forward) — an upper bound, never a prediction."""
        mr = self._method(mspec, k, spec)
        drafter = mr.model if mr.whole_output else mr.drafters()[k]
        fn = getattr(drafter, "adaptive_positions", None)
        if fn is not None and spec.get(ADAPTIVE_KEY) != "oracle":
            return [fn(r.prompt_ids, r.output_ids, k) for r in self.requests]
        runs_at = getattr(drafter, "runs_at", None)
        if spec.get(ADAPTIVE_KEY) != "oracle" or (runs_at is None and not mr.whole_output):
            raise ProfileError(f"speculative config {json.dumps(spec)}: no replay of adaptive verification for {method} "
                               "(its drafter offers no adaptive_positions)")
        out = []
        for r in self.requests:
            run = runs_at(r.prompt_ids, r.output_ids, k) if runs_at is not None else drafter.accept_runs(r.prompt_ids, r.output_ids, k)
            best = np.minimum(run[: len(r.output_ids)], k).astype(np.int64)
            out.append(PositionTrace(best, best.copy()))
        return out

    @staticmethod
    def _method(mspec: MethodSpec, k: int, spec: dict[str, Any] | None) -> MethodReplay:
        try:
            return MethodReplay(mspec, [k], where=f"speculative config {json.dumps(spec)}")
        except ReplayError as e:
            raise ProfileError(str(e)) from None

    def _whole_output_runs(self, mspec: MethodSpec, k: int, spec: dict[str, Any] | None) -> dict[str, np.ndarray]:
        """Accepted runs per base request of a whole-output drafter (a draft model: one teacher-forced
        pass each), cached per model and reused for every k up to the cap they were computed at."""
        key = json.dumps(mspec.options, sort_keys=True, default=str)
        kmax, runs = self._runs.get(key, (0, {}))
        if k > kmax:
            model = mspec.options.get("model")
            if model is not None and not Path(model).is_dir():
                raise ProfileError(f"draft model {model!r}: no such directory (needed to replay its drafts)")
            kmax = max(k, WHOLE_OUTPUT_KMAX)
            mr = self._method(mspec, kmax, spec)
            runs = {}
            for r in self.requests:
                if r.base_id not in runs:
                    runs[r.base_id] = mr.model.accept_runs(r.prompt_ids, r.output_ids, kmax)
            self._runs[key] = (kmax, runs)
        return runs

    def drop(self, ids: set[str] | frozenset[str]) -> int:
        """Leave out planned requests (by planned id) that the server refused: it never ran them, so they
        take no steps and teach a stateful drafter nothing. Returns how many were dropped."""
        keep = [r for r in self.requests if r.id not in ids]
        n = len(self.requests) - len(keep)
        if n:
            self.requests = keep
            self._cache.clear()
            self._pos_cache.clear()
        return n

    def live(self, spec: dict[str, Any] | None) -> Any:
        """A function from a bench record to its replay on the record's own token ids (``None`` when the
        record has none), for a stateless drafter without a model (n-gram); ``None`` for any other config.
        The server proposed from the live context, so these are its proposals even for a sampled request."""
        method, k, cfg = resolve_spec(spec)
        if method is None or cfg is None or is_stateful(method) or offers_whole_output(method) or is_model_method(method):
            return None
        try:
            mr = MethodReplay(MethodSpec.from_config(cfg, method), [k])
        except ReplayError:
            return None
        greedy = {r.id: r.greedy for r in self.requests}

        def one(rec: Any) -> PlannedRequest | None:
            extra = rec.extra if isinstance(rec.extra, dict) else {}
            prompt, out = extra.get("prompt_token_ids"), extra.get("output_token_ids")
            if not isinstance(prompt, list) or not isinstance(out, list) or not out:
                return None
            tr = mr.traces(rec.id, "the bench record", prompt, out)[k]
            return PlannedRequest(id=rec.id, prompt_tokens=len(prompt), output_tokens=len(out), drafted=tr.drafted,
                                  accepted=tr.accepted, greedy=greedy.get(rec.id, True))

        return one

    def sampled_ids(self) -> frozenset[str]:
        """Planned ids of the requests sent at T > 0."""
        return frozenset(r.id for r in self.requests if not r.greedy)

    def by_id(self, spec: dict[str, Any] | None, prior: Sequence[int] = (), sampled_repeat: bool = False) -> dict[str, PlannedRequest]:
        return {p.id: p for p in self.planned(spec, prior, sampled_repeat)}


def _every_position(drafter: Any, rid: str, prompt: list[int], out: list[int], k: int) -> PositionTrace:
    """One request's proposal at every output position 1..L-1 (``begin``, a ``propose`` per position on
    the logged history, ``end``): what a step starting there drafts, and how much of it the output continues."""
    n = len(out)
    drafted = np.zeros(n, dtype=np.int64)
    accepted = np.zeros(n, dtype=np.int64)
    drafter.begin(rid, prompt)
    history = list(prompt) + out[:1]
    for pos in range(1, n):
        d = list(drafter.propose(rid, history, k))[:k]
        drafted[pos], accepted[pos] = len(d), accepted_prefix(d, out, pos)
        history.append(out[pos])
    drafter.end(rid, out)
    return PositionTrace(drafted, accepted)


def _cache_key(spec: dict[str, Any] | None, prior: tuple[int, ...], sampled_repeat: bool) -> str:
    return config_key(spec) + repr(prior) + repr(sampled_repeat)
