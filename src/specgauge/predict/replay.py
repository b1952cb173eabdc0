"""Per-request replay traces of a workload under one speculative config, in bench's request order.

The replay theorem (``shared/design.md``) makes a deterministic drafter's live steps on a logged output
equal to the replayed ones, so these traces are what the server will do, step by step. Requests are
planned as ``specgauge bench`` plans them (the first ``num_prompts``, cycling with ``~rN`` ids), and
stateful drafters (suffix) see them in that order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specgauge.config import SpeculativeConfig
from specgauge.drafters.base import (
    ReplayTrace,
    make_drafter,
    replay_by_stepping,
    trace_from_matches,
)
from specgauge.predict.law import is_model_method, method_kind
from specgauge.predict.schedule import PlannedRequest
from specgauge.predict.types import ProfileError


@dataclass
class LoggedRequest:
    id: str  #: the planned id (``~rN`` on cycled copies)
    base_id: str
    prompt_ids: list[int]
    output_ids: list[int]
    exact: bool  #: token ids were logged (not re-tokenised text)
    greedy: bool = True  #: temperature 0: every run reproduces the logged output


#: drafters whose proposals depend on the request alone (no state across requests)
STATELESS = ("ngram",)


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


def resolve_spec(spec: dict[str, Any] | None) -> tuple[str | None, int, SpeculativeConfig | None]:
    """(method family, k, parsed config) of a vLLM ``--speculative-config``; (None, 0, None) = off."""
    if not spec:
        return None, 0, None
    try:
        cfg = SpeculativeConfig.model_validate(spec)
    except ValueError as e:
        raise ProfileError(f"speculative config {json.dumps(spec)}: {str(e).splitlines()[-1]}") from None
    m = method_kind(cfg.method)
    return m, int(cfg.num_speculative_tokens or 0), cfg


class WorkloadReplay:
    """Loads a workload with logged responses once; gives ``PlannedRequest`` lists per config (cached)."""

    def __init__(self, workload: Sequence[Path], tokenizer: Any = None, num_prompts: int | None = None,
                 load: Any = None, segment: str | None = None) -> None:
        """``load``: ``LoadOptions`` (format, limit, segment_by); ``segment``: only that segment's requests."""
        from specgauge.workload.loaders import LoadOptions, load_workload

        items = load_workload(list(workload), load or LoadOptions())
        if segment is not None:
            items = [it for it in items if it.request.segment == segment]
        self.notes: list[str] = []
        self._tok = tokenizer
        base: list[LoggedRequest] = []
        skipped = approx = 0
        for it in items:
            resp = it.response
            if resp is None or not (resp.output_token_ids or resp.text):
                skipped += 1
                continue
            prompt, out, exact = self._ids(it)
            if not out:
                skipped += 1
                continue
            approx += not exact
            base.append(LoggedRequest(it.request.id, it.request.id, prompt, out, exact, it.request.temperature == 0))
        if not base:
            raise ProfileError(f"{', '.join(map(str, workload))}: no request has a logged response to replay; "
                               "prediction needs the target's logged outputs (token ids)")
        if skipped:
            self.notes.append(f"{skipped} request(s) without a logged output were left out of the prediction")
        if approx:
            self.notes.append(f"{approx} request(s) had no logged token ids: re-tokenised text, acceptance approximate")
        n = num_prompts or len(base)
        self.requests = []
        for i in range(n):
            r, j = divmod(i, len(base))
            b = base[j]
            self.requests.append(b if r == 0 else LoggedRequest(f"{b.id}~r{r}", b.id, b.prompt_ids, b.output_ids, b.exact, b.greedy))
        self._cache: dict[str, list[PlannedRequest]] = {}
        self._matches: dict[str, dict[str, np.ndarray]] = {}

    def _ids(self, it: Any) -> tuple[list[int], list[int], bool]:
        resp = it.response
        exact = True
        if resp.prompt_token_ids is not None:
            prompt = list(resp.prompt_token_ids)
        else:
            prompt, exact = self._tokenizer().encode_request(it.request), False
        if resp.output_token_ids is not None:
            out = list(resp.output_token_ids)
        else:
            out, exact = self._tokenizer().encode(resp.text), False
        return prompt, out, exact

    def _tokenizer(self) -> Any:
        if self._tok is None:
            from specgauge.api import resolve_tokenizer

            self._tok = resolve_tokenizer(None)
        elif isinstance(self._tok, str):
            from specgauge.api import resolve_tokenizer

            self._tok = resolve_tokenizer(self._tok)
        return self._tok

    def planned(self, spec: dict[str, Any] | None, prior: Sequence[int] = (), sampled_repeat: bool = False) -> list[PlannedRequest]:
        """Traces of the planned requests under ``spec``. ``prior``: indices of planned requests the
        server completed before this run (warm-ups, earlier runs on the same server): a stateful
        drafter (suffix decoding's global cache) learns them first — the greedy ones, which came out as
        logged; a sampled request's earlier output is unknown and left out unless ``sampled_repeat`` (a
        server that repeats its sampled outputs exactly, e.g. seeded without speculation noise). Stateless
        drafters ignore it."""
        method = resolve_spec(spec)[0]
        prior = tuple(prior) if method is not None and method not in STATELESS else ()
        sampled_repeat = sampled_repeat and bool(prior)
        key = config_key(spec) + repr(prior) + repr(sampled_repeat)
        if key not in self._cache:
            self._cache[key] = self._replay(spec, prior, sampled_repeat)
        return self._cache[key]

    def _replay(self, spec: dict[str, Any] | None, prior: tuple[int, ...] = (), sampled_repeat: bool = False) -> list[PlannedRequest]:
        method, k, cfg = resolve_spec(spec)
        out: list[PlannedRequest] = []
        if method is None:
            for r in self.requests:
                steps = max(0, len(r.output_ids) - 1)
                z = np.zeros(steps, dtype=np.int64)
                out.append(PlannedRequest(r.id, len(r.prompt_ids), len(r.output_ids), z, z, r.greedy))
            return out
        assert cfg is not None
        if is_model_method(method):
            if method != "draft_model" or not cfg.model:
                raise ProfileError(f"speculative config {json.dumps(spec)}: offline replay supports draft_model "
                                   "(greedy) but not {method}")
            matches = self._draft_matches(cfg.model)
            for r in self.requests:
                tr = trace_from_matches(matches[r.base_id], k)
                out.append(PlannedRequest(r.id, len(r.prompt_ids), len(r.output_ids), tr.drafted, tr.accepted, r.greedy))
            return out
        opts = {k2: v for k2, v in cfg.model_dump().items() if v is not None and k2 not in ("method", "model")}
        try:
            drafter = make_drafter(method, **_accepted_options(method, opts))
        except (TypeError, ValueError) as e:
            raise ProfileError(f"speculative config {json.dumps(spec)}: {e}") from None
        stateless = method in STATELESS
        for n, i in enumerate(prior):  # what the server's drafter learned before this run
            r = self.requests[i % len(self.requests)]
            if not r.greedy and not sampled_repeat:  # it came out differently then: what it taught is unknown
                continue
            fast = getattr(drafter, "replay", None)
            rid = f"{r.id}~prior{n}"
            fast(rid, r.prompt_ids, r.output_ids, k) if fast else replay_by_stepping(drafter, rid, r.prompt_ids, r.output_ids, k)
        seen: dict[str, ReplayTrace] = {}
        for r in self.requests:
            if stateless and r.base_id in seen:
                tr = seen[r.base_id]
            else:
                fast = getattr(drafter, "replay", None)
                tr = fast(r.id, r.prompt_ids, r.output_ids, k) if fast else replay_by_stepping(drafter, r.id, r.prompt_ids, r.output_ids, k)
                seen[r.base_id] = tr
            out.append(PlannedRequest(r.id, len(r.prompt_ids), len(r.output_ids), tr.drafted, tr.accepted, r.greedy))
        return out

    def _draft_matches(self, model: str) -> dict[str, np.ndarray]:
        if model not in self._matches:
            if not Path(model).is_dir():
                raise ProfileError(f"draft model {model!r}: no such directory (needed to replay its drafts)")
            d = make_drafter("draft_model", model=model, num_speculative_tokens=1)
            m: dict[str, np.ndarray] = {}
            for r in self.requests:
                if r.base_id not in m:
                    pred = d.teacher_forced_argmax(r.prompt_ids, r.output_ids)  # type: ignore[attr-defined]
                    m[r.base_id] = np.asarray(pred) == np.asarray(r.output_ids)
            self._matches[model] = m
        return self._matches[model]

    def drop(self, ids: set[str] | frozenset[str]) -> int:
        """Leave out planned requests (by planned id) that the server refused: it never ran them, so they
        take no steps and teach a stateful drafter nothing. Returns how many were dropped."""
        keep = [r for r in self.requests if r.id not in ids]
        n = len(self.requests) - len(keep)
        if n:
            self.requests = keep
            self._cache.clear()
        return n

    def live(self, spec: dict[str, Any] | None) -> Any:
        """A function from a bench record to its replay on the record's own token ids (``None`` when the
        record has none), for a stateless drafter; ``None`` for any other config. The server proposed
        from the live context, so these are its proposals even for a sampled request."""
        method, k, cfg = resolve_spec(spec)
        if method is None or method not in STATELESS or cfg is None:
            return None
        opts = {k2: v for k2, v in cfg.model_dump().items() if v is not None and k2 not in ("method", "model")}
        try:
            drafter = make_drafter(method, **_accepted_options(method, opts))
        except (TypeError, ValueError):
            return None
        greedy = {r.id: r.greedy for r in self.requests}

        def one(rec: Any) -> PlannedRequest | None:
            extra = rec.extra if isinstance(rec.extra, dict) else {}
            prompt, out = extra.get("prompt_token_ids"), extra.get("output_token_ids")
            if not isinstance(prompt, list) or not isinstance(out, list) or not out:
                return None
            fast = getattr(drafter, "replay", None)
            tr = fast(rec.id, prompt, out, k) if fast else replay_by_stepping(drafter, rec.id, prompt, out, k)
            return PlannedRequest(rec.id, len(prompt), len(out), tr.drafted, tr.accepted, greedy.get(rec.id, True))

        return one

    def sampled_ids(self) -> frozenset[str]:
        """Planned ids of the requests sent at T > 0."""
        return frozenset(r.id for r in self.requests if not r.greedy)

    def by_id(self, spec: dict[str, Any] | None, prior: Sequence[int] = (), sampled_repeat: bool = False) -> dict[str, PlannedRequest]:
        return {p.id: p for p in self.planned(spec, prior, sampled_repeat)}


def _accepted_options(method: str, opts: dict[str, Any]) -> dict[str, Any]:
    import inspect

    from specgauge.drafters.base import _REGISTRY, _load_plugins

    _load_plugins()
    factory = _REGISTRY.get(method)
    if factory is None:
        return opts
    params = inspect.signature(factory).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return opts
    return {k: v for k, v in opts.items() if k in params}
