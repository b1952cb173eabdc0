"""``specgauge simulate``: replay logged outputs through drafters, offline, no GPU.

One streaming pass over the workload; every (method, k) sees every request in file order (the suffix
drafter's global tree therefore learns from earlier responses in that order, as a live server would
in arrival order). With ``partition_by`` each value of that field (a server, a cache) is its own
stream with its own suffix cache, in file order within it. ``ReplayTally`` holds everything the pass
keeps and builds the result; ``specgauge.scale.replay`` feeds it the same rows in the same order from
Ray workers, so both give the same ``SimulateResult``. Exactness: logged token ids give exact acceptance (replay theorem); text-only
logs are re-tokenised with the target tokenizer and marked approximate.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from specgauge.config import ConfigError, SpeculativeConfig
from specgauge.drafters.base import (  # trace_from_matches re-exported
    Drafter,
    ReplayTrace,
    make_drafter,
    replay_by_stepping,
    trace_from_matches,
)
from specgauge.errors import UserError
from specgauge.simulate.cost_model import (
    CostProfiles,
    SpeedupPrediction,
    predict_speedup,
)
from specgauge.simulate.probabilistic import (
    ProbabilisticAccumulator,
    ProbabilisticSummary,
    alpha_lower_bound,
)
from specgauge.simulate.replay import (
    AcceptanceAccumulator,
    AcceptanceSummary,
    RequestAcceptance,
)
from specgauge.workload.loaders import (
    LoadOptions,
    LoadReport,
    iter_workload,
    segment_rule,
)
from specgauge.workload.schema import WorkloadItem
from specgauge.workload.tokenizer import Tokenizer, model_match
from specgauge.workload.tokenizer import describe as describe_tokenizer

MODEL_FREE = ("ngram", "suffix")


class SimulateError(UserError, ValueError):
    pass


class MethodSpec(BaseModel):
    """One draft method to replay: ``ngram``, ``suffix`` or ``draft_model:PATH`` (plugins by kind)."""

    label: str
    kind: str
    options: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, spec: SpeculativeConfig | None = None, draft_sampling: str = "greedy") -> MethodSpec:
        text = text.strip()
        kind, _, arg = text.partition(":")
        kind = {"draft": "draft_model", "prompt_lookup": "ngram"}.get(kind, kind)
        opts: dict[str, Any] = {}
        if spec is not None and spec.method == kind:
            opts.update({k: v for k, v in spec.model_dump().items() if v is not None and k not in ("method", "model")})
            if kind == "draft_model" and spec.model and not arg:
                arg = spec.model
        if kind == "draft_model":
            if not arg:
                raise SimulateError(f"--method {text}: a draft model needs its directory: draft_model:PATH")
            if not Path(arg).is_dir():
                raise SimulateError(f"--method {text}: no such directory {arg!r}")
            if draft_sampling not in ("greedy", "probabilistic"):
                raise SimulateError(f"--draft-sampling {draft_sampling!r}: expected greedy or probabilistic")
            return cls(label=f"draft_model:{Path(arg).name}", kind=kind, options={"model": arg, "sampling": draft_sampling})
        return cls(label=kind, kind=kind, options=opts)

    def drafter_options(self, k: int) -> dict[str, Any]:
        """Options for one k, completed with vLLM's defaults through ``SpeculativeConfig``."""
        if self.kind == "draft_model":
            return {"model": self.options["model"], "num_speculative_tokens": k}
        if self.kind in MODEL_FREE:
            cfg = SpeculativeConfig.model_validate({**self.options, "method": self.kind, "num_speculative_tokens": k})
            keep = ("prompt_lookup_min", "prompt_lookup_max") if self.kind == "ngram" else tuple(
                n for n in SpeculativeConfig.model_fields if n.startswith("suffix_decoding_")
            )
            return {"num_speculative_tokens": k, **{n: getattr(cfg, n) for n in keep}}
        return {**self.options, "num_speculative_tokens": k}


def parse_ks(text: str) -> list[int]:
    """``1-8`` or ``1,2,4`` or ``4`` → sorted unique k values ≥ 1."""
    ks: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(-?\d+)(?:-(-?\d+))?", part)
        if not m:
            raise ConfigError(f"--k {text!r}: expected e.g. 1-8 or 1,2,4")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if lo < 1 or hi < lo:
            raise ConfigError(f"--k {text!r}: k must be >= 1 and ranges increasing")
        if hi > 64:
            raise ConfigError(f"--k {text!r}: k above 64 is not a proposal length any engine uses")
        ks.update(range(lo, hi + 1))
    return sorted(ks)


class SimulateConfig(BaseModel):
    workload: list[Path]
    load: LoadOptions = Field(default_factory=LoadOptions)
    methods: list[str] = Field(default_factory=lambda: ["ngram", "suffix"])
    ks: list[int] = Field(default_factory=lambda: list(range(1, 9)))
    speculative_config: SpeculativeConfig | None = None
    tokenizer: str | None = None
    batch_sizes: list[int] = Field(default_factory=lambda: [1])
    cost_profile: Path | None = None
    #: how the draft model drafts: greedily (vLLM's way; exact replay) or by sampling (lower bound)
    draft_sampling: str = "greedy"
    #: append every per-request row (JSONL) here as it is computed; nothing per request stays in memory
    per_request_out: Path | None = None
    #: a field path (or 're:REGEX') naming the cache a request went through: one suffix cache per value
    #: (as one server per value); None: one cache over the whole log in file order
    partition_by: str | None = None


class SegmentResult(BaseModel):
    summaries: list[AcceptanceSummary]
    predictions: list[SpeedupPrediction]
    #: method -> k with the highest predicted speedup at the first batch size
    best_k: dict[str, int | None]


class SimulateResult(BaseModel):
    tokenizer: str
    exact: bool
    methods: list[str]
    ks: list[int]
    batch_sizes: list[int]
    overall: SegmentResult
    segments: dict[str, SegmentResult]
    requests_replayed: int
    skipped: dict[str, int]
    notes: list[str]
    #: sampling draft models at temperature > 0: lower bounds per segment ("" = all requests)
    probabilistic: dict[str, list[ProbabilisticSummary]] = Field(default_factory=dict)


def _token_ids(item: WorkloadItem, tok: Tokenizer) -> tuple[list[int], list[int], bool]:
    req, resp = item.request, item.response
    assert resp is not None
    exact = True
    if resp.prompt_token_ids is not None:
        prompt = resp.prompt_token_ids
    else:
        prompt = tok.encode_request(req)
        exact = tok.exact and isinstance(req.prompt, list)  # re-rendered chat prompts are approximate
    if resp.output_token_ids is not None:
        out = resp.output_token_ids
    else:
        out, exact = tok.encode(resp.text), False
    vs = tok.vocab_size
    if vs is not None and tok.exact:
        for field, ids in (("response.prompt_token_ids", prompt), ("response.output_token_ids", out)):
            bad = next((t for t in ids if t >= vs), None)
            if bad is not None:
                raise SimulateError(
                    f"{item.source}: request {req.id}: {field}: token id {bad} is outside the tokenizer's vocabulary "
                    f"(size {vs}); were these ids made by another model's tokenizer?"
                )
    return prompt, out, exact


#: drafters whose proposal depends on the request alone; every other kind (suffix, plugins) may learn
#: across requests, so its replay keeps each stream in arrival order
PER_REQUEST_KINDS = ("ngram", "draft_model")


def stream_ordered(kind: str) -> bool:
    """True when a drafter of this kind carries state from one request to the next (suffix's cache)."""
    return kind not in PER_REQUEST_KINDS


class _MethodRunner:
    """Replays one method for every k on one request."""

    def __init__(self, spec: MethodSpec, ks: Sequence[int], tok: Tokenizer) -> None:
        self.spec, self.ks = spec, list(ks)
        try:
            if spec.kind == "draft_model":
                self.model = make_drafter("draft_model", **spec.drafter_options(max(ks)), target_vocab_size=tok.vocab_size)
                self.drafters: dict[int, Drafter] = {}
            else:
                self.drafters = {k: make_drafter(spec.kind, **spec.drafter_options(k)) for k in ks}
        except (ValueError, TypeError, OSError) as e:
            raise SimulateError(f"--method {spec.label}: {e}") from None
        #: stream (partition value) -> its own drafters, for kinds that learn across requests
        self._streams: dict[str, dict[int, Drafter]] = {"": self.drafters}

    def _drafters(self, stream: str) -> dict[int, Drafter]:
        if not stream_ordered(self.spec.kind):
            return self.drafters
        d = self._streams.get(stream)
        if d is None:
            d = self._streams[stream] = {k: make_drafter(self.spec.kind, **self.spec.drafter_options(k)) for k in self.ks}
        return d

    @property
    def probabilistic(self) -> bool:
        return self.spec.options.get("sampling") == "probabilistic"

    def run(self, item: WorkloadItem, prompt: list[int], out: list[int], stream: str = "") -> dict[int, ReplayTrace]:
        return self.run_ids(item.request.id, item.source, prompt, out, stream)

    def run_ids(self, rid: str, source: str, prompt: list[int], out: list[int], stream: str = "",
                ks: Sequence[int] | None = None) -> dict[int, ReplayTrace]:
        """Traces for ``ks`` (default: every k) of one request, from its token ids; ``stream`` picks
        the cache of a stream-ordered drafter."""
        ks = self.ks if ks is None else ks
        try:
            if self.spec.kind == "draft_model":
                pred = self.model.teacher_forced_argmax(prompt, out)  # type: ignore[attr-defined]
                match = np.asarray(pred) == np.asarray(out)
                return {k: trace_from_matches(match, k) for k in ks}
            traces = {}
            drafters = self._drafters(stream)
            for k in ks:
                d = drafters[k]
                fast = getattr(d, "replay", None)
                traces[k] = fast(rid, prompt, out, k) if fast is not None else replay_by_stepping(d, rid, prompt, out, k)
            return traces
        except (ValueError, IndexError) as e:
            raise SimulateError(f"{source}: request {rid}: --method {self.spec.label}: {e}") from None

    def alphas(self, item: WorkloadItem, prompt: list[int], out: list[int]) -> np.ndarray:
        """Per-position acceptance lower bound for a sampling draft model (needs target logprobs)."""
        assert item.response is not None and item.response.top_logprobs is not None
        t = item.request.temperature or 1.0
        try:
            logq = self.model.teacher_forced_logprobs(prompt, out, temperature=t)  # type: ignore[attr-defined]
        except ValueError as e:
            raise SimulateError(f"{item.source}: request {item.request.id}: --method {self.spec.label}: {e}") from None
        return alpha_lower_bound(logq, item.response.top_logprobs)


def method_specs(cfg: SimulateConfig) -> list[MethodSpec]:
    """The configured methods, checked: k >= 1, no method twice."""
    if not cfg.ks or min(cfg.ks) < 1:
        raise ConfigError("--k: k must be >= 1")
    specs = [MethodSpec.parse(m, cfg.speculative_config, cfg.draft_sampling) for m in cfg.methods]
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--method: the same method twice ({', '.join(labels)})")
    return specs


class ReplayTally:
    """Everything one replay pass keeps, fed request by request in workload order: accumulators per
    (segment, method, k), skip counts, approximation counts, the per-request JSONL sink. ``result``
    builds the ``SimulateResult``. The order rows are added in is the order of the spread figures'
    float sums, so a merge that adds the same rows in the same order gives the same result."""

    def __init__(self, cfg: SimulateConfig, labels: list[str], tok: Tokenizer) -> None:
        self.cfg, self.labels, self.tok = cfg, labels, tok
        self.fitted = None  # a fitted step-cost law (specgauge calibrate) replaces the guessed cost model
        if cfg.cost_profile is not None:
            from specgauge.predict.profile import StepCostProfile

            if StepCostProfile.is_profile_file(cfg.cost_profile):
                self.fitted = StepCostProfile.load(cfg.cost_profile)
        self.profiles = CostProfiles() if self.fitted is not None else CostProfiles.load(cfg.cost_profile)
        self.report = LoadReport()
        self.accs: dict[tuple[str, str, int], AcceptanceAccumulator] = {}
        self.paccs: dict[tuple[str, str, int], ProbabilisticAccumulator] = {}
        self.skipped: Counter[str] = Counter()
        self.n = self.approx = 0
        self.approx_models: Counter[str] = Counter()  # re-tokenised requests: own / other model's tokenizer / unknown
        self.notes: list[str] = []
        self._sink = open(cfg.per_request_out, "a", encoding="utf-8") if cfg.per_request_out else None

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def begin_request(self, exact: bool, model_match: bool | None) -> None:
        """A request with output is about to be replayed; ``model_match`` (re-tokenised ones): is the
        tokenizer its model's (None: it names no model)."""
        if not exact:
            self.approx += 1
            self.approx_models["unknown" if model_match is None else "own" if model_match else "other"] += 1

    def add(self, row: RequestAcceptance) -> None:
        for key in (("", row.method, row.k), (row.segment, row.method, row.k)):
            if key not in self.accs:
                self.accs[key] = AcceptanceAccumulator(row.method, row.k)
            self.accs[key].add(row)
        if self._sink is not None:
            self._sink.write(row.model_dump_json() + "\n")

    def add_alphas(self, segment: str, label: str, k: int, alphas: np.ndarray) -> None:
        for key in (("", label, k), (segment, label, k)):
            self.paccs.setdefault(key, ProbabilisticAccumulator(label, k)).add(alphas)

    def end_request(self) -> int:
        self.n += 1
        if self._sink is not None:
            self._sink.flush()
        return self.n

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None

    def result(self) -> SimulateResult:
        self.close()
        cfg, tok, skipped, approx_models = self.cfg, self.tok, Counter(self.skipped), self.approx_models
        if self.report.skipped:
            skipped["invalid (skipped)"] += self.report.skipped
        notes = list(self.notes)
        if self.approx:
            whose = []
            if approx_models["own"]:
                whose.append(f"{approx_models['own']} name its model")
            if approx_models["other"]:
                whose.append(f"{approx_models['other']} name another model: its ids are not their model's, so their "
                             "acceptance says little")
            if approx_models["unknown"]:
                whose.append(f"{approx_models['unknown']} name no model, so whether it is their model's tokenizer is unknown")
            notes.append(f"{self.approx} request(s) had no logged token ids: re-tokenised with {describe_tokenizer(tok)} "
                         f"({'; '.join(whose)}); acceptance APPROXIMATE — log token ids (vLLM return_token_ids) for exact figures")
        if self.n == 0:
            notes.append("no request had a logged response with output: nothing to replay")
        accs, labels, profiles = self.accs, self.labels, self.profiles
        segments = sorted({seg for seg, _, _ in accs if seg})
        fitted = self._fitted_predictions(segments) if self.fitted is not None else None
        if fitted is not None:
            notes.append("predicted speedup: the calibrated step-cost law of cost profile "
                         f"{Path(cfg.cost_profile).name if cfg.cost_profile else ''} (server "
                         f"{self.fitted.provenance.get('model') or '?'}, {self.fitted.shape} verification), each batch size "
                         "simulated as a closed-loop bench of these requests; band from the law's bootstrap")
        else:
            what = ("the cost-ratio file " + Path(cfg.cost_profile).name) if cfg.cost_profile else "guessed costs"
            notes.append(f"predicted speedup: UNCALIBRATED cost model ({what}; not fitted on a live server); fit your "
                         "server's law with `specgauge calibrate` and pass its cost_profile.json as --cost-profile")
        return SimulateResult(
            tokenizer=tok.name, exact=self.approx == 0, methods=labels, ks=list(cfg.ks), batch_sizes=cfg.batch_sizes,
            overall=_segment("", accs, labels, cfg, profiles, fitted),
            segments={s: _segment(s, accs, labels, cfg, profiles, fitted) for s in segments},
            requests_replayed=self.n, skipped=dict(skipped), notes=notes,
            probabilistic=_probabilistic(self.paccs),
        )


    def _fitted_predictions(self, segments: list[str]) -> dict[str, dict[tuple[str, int, int], SpeedupPrediction]]:
        from specgauge.predict.bridge import predict_grid

        specs = [s for s in method_specs(self.cfg) if s.options.get("sampling") != "probabilistic"]
        assert self.fitted is not None
        grid = predict_grid(self.fitted, self.cfg.workload, [(s.label, s.kind, s.drafter_options) for s in specs],
                            self.cfg.ks, self.cfg.batch_sizes, load=self.cfg.load, segments=segments, tokenizer=self.tok)
        return {seg: {key: SpeedupPrediction(method=key[0], k=key[1], batch=key[2], tokens_per_step=None,
                                             predicted_speedup=p.speedup, low=p.speedup_low, high=p.speedup_high,
                                             extrapolated=p.extrapolated, note="; ".join(p.notes) or None,
                                             source="calibrated step-cost law")
                      for key, p in cells.items()} for seg, cells in grid.items()}


def simulate(cfg: SimulateConfig, tok: Tokenizer, on_request: Callable[[int], None] | None = None) -> SimulateResult:
    specs = method_specs(cfg)
    runners = [_MethodRunner(s, cfg.ks, tok) for s in specs]
    tally = ReplayTally(cfg, [s.label for s in specs], tok)
    stream_of = segment_rule(cfg.partition_by)
    try:
        for item in iter_workload(cfg.workload, cfg.load, tally.report):
            resp = item.response
            if resp is None:
                tally.skip("no logged response")
                continue
            prompt, out, exact = _token_ids(item, tok)
            if not out:
                tally.skip("empty logged output")
                continue
            tally.begin_request(exact, None if exact else model_match(tok, item.named_model()))
            seg = item.request.segment
            stream = stream_of(item.request) if stream_of is not None else ""
            for r in runners:
                if r.probabilistic and (item.request.temperature or 0) > 0:
                    if resp.top_logprobs is None:
                        tally.skip(f"{r.spec.label}: no target logprobs for probabilistic drafting")
                        continue
                    alphas = r.alphas(item, prompt, out)
                    for k in r.ks:
                        tally.add_alphas(seg, r.spec.label, k, alphas)
                    continue
                for k, trace in r.run(item, prompt, out, stream).items():
                    tally.add(RequestAcceptance.from_trace(trace, item.request.id, seg, r.spec.label, k, len(out), exact))
            n = tally.end_request()
            if on_request is not None:
                on_request(n)
    finally:
        tally.close()
    if stream_of is not None:
        tally.notes.append(stream_note(cfg.partition_by, specs))
    return tally.result()


def stream_note(partition_by: str | None, specs: Sequence[MethodSpec]) -> str:
    ordered = [s.label for s in specs if stream_ordered(s.kind)]
    what = ", ".join(ordered) if ordered else "no method here"
    return (f"--partition-by {partition_by}: one cache per value of {partition_by} (as one server each), each "
            f"replayed in arrival order ({what}); per-request methods do not depend on it")


def _probabilistic(paccs: dict[tuple[str, str, int], ProbabilisticAccumulator]) -> dict[str, list[ProbabilisticSummary]]:
    out: dict[str, list[ProbabilisticSummary]] = {}
    for (seg, _, _), acc in sorted(paccs.items()):
        out.setdefault(seg, []).append(acc.summary())
    return out


def _segment(
    seg: str, accs: dict[tuple[str, str, int], AcceptanceAccumulator], labels: list[str], cfg: SimulateConfig,
    profiles: CostProfiles, fitted: dict[str, dict[tuple[str, int, int], SpeedupPrediction]] | None = None,
) -> SegmentResult:
    sums, preds, best = [], [], {}
    for label in labels:
        best_val, best_k = -1.0, None
        for k in cfg.ks:
            acc = accs.get((seg, label, k)) or AcceptanceAccumulator(label, k)
            s = acc.summary()
            sums.append(s)
            for b in cfg.batch_sizes:
                p = predict_speedup(label, k, s.decode_tokens, s.steps, s.draft_tokens, b, profiles.for_method(label))
                if fitted is not None and (label, k, b) in fitted.get(seg, {}):
                    p = fitted[seg][(label, k, b)].model_copy(update={"tokens_per_step": s.tokens_per_step})
                preds.append(p)
                if b == cfg.batch_sizes[0] and p.predicted_speedup is not None and p.predicted_speedup > best_val:
                    best_val, best_k = p.predicted_speedup, k
        best[label] = best_k
    return SegmentResult(summaries=sums, predictions=preds, best_k=best)
