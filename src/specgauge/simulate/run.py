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

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field, model_validator

from specgauge.config import ConfigError, SpeculativeConfig
from specgauge.drafters.base import ReplayTrace, ServerReport, is_stateful, trace_from_matches  # noqa: F401  (trace_from_matches: re-exported)
from specgauge.i18n import en
from specgauge.offline.replay import (
    MethodReplay,
    MethodSpec,
    ReplayedRequest,
    ReplayError,
    prefetched,
    replayed_request,
)
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
from specgauge.units import parse_ks  # noqa: F401  (the CLI imports it from here)
from specgauge.workload.loaders import (
    LoadOptions,
    LoadReport,
    iter_workload,
    segment_rule,
)
from specgauge.workload.schema import WorkloadItem
from specgauge.workload.tokenizer import Tokenizer
from specgauge.workload.tokenizer import describe as describe_tokenizer

#: simulate's errors are the offline replay's (a bad --method, a request that cannot be replayed)
SimulateError = ReplayError


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
    #: the target model directory of a hidden-state head (``eagle3:DIR``, ``mtp:DIR``) whose config names
    #: none found here; default: the one its config names, else ``tokenizer`` when that is a model directory
    target_model: Path | None = None
    #: hidden-state heads: where the target and head run (cpu | cuda | auto) and in which dtype (auto: float32
    #: on the CPU, bfloat16 on a GPU)
    device: str = "cpu"
    dtype: str = "auto"
    #: hidden-state heads: a directory of vLLM's own hidden-state dumps read instead of running the target
    hidden_states: Path | None = None
    #: hidden-state heads: padded tokens of the requests whose target passes run together (0: one request
    #: per pass); None: the drafter's default for the device (``drafters._hidden.default_batch_tokens``)
    replay_batch_tokens: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _from_speculative_config(self) -> SimulateConfig:
        """``speculative_config`` names the method and k, unless ``methods`` / ``ks`` are given too."""
        spec = self.speculative_config
        if spec is not None:
            if "methods" not in self.model_fields_set:
                self.methods = [spec.method or "draft_model"]
            if "ks" not in self.model_fields_set and spec.num_speculative_tokens:
                self.ks = [spec.num_speculative_tokens]
        return self


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


def alphas(runner: MethodReplay, item: WorkloadItem, req: ReplayedRequest) -> np.ndarray:
    """Per-position acceptance lower bound for a sampling draft model (needs target logprobs)."""
    assert item.response is not None and item.response.top_logprobs is not None
    t = item.request.temperature or 1.0
    try:
        logq = runner.model.teacher_forced_logprobs(req.prompt_ids, req.output_ids, temperature=t)
    except ValueError as e:
        raise SimulateError(f"{item.source}: request {req.id}: --method {runner.spec.label}: {e}") from None
    return alpha_lower_bound(logq, item.response.top_logprobs)


def method_replays(specs: Sequence[MethodSpec], ks: Sequence[int], tok: Tokenizer) -> list[MethodReplay]:
    """One ``MethodReplay`` per method (a draft model checked against the target's vocabulary)."""
    return [MethodReplay(s, ks, target_vocab_size=tok.vocab_size, bounds=True) for s in specs]  # bounds: suffix's


def method_specs(cfg: SimulateConfig) -> list[MethodSpec]:
    """The configured methods, checked: k >= 1, no method twice; a drafter that reads a target model
    (a hidden-state head: its factory takes ``target``) gets ``--target-model`` and, as its fallback,
    the ``--tokenizer`` directory when that holds a model."""
    if not cfg.ks or min(cfg.ks) < 1:
        raise ConfigError("--k: k must be >= 1")
    specs = [MethodSpec.parse(m, cfg.speculative_config, cfg.draft_sampling) for m in cfg.methods]
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--method: the same method twice ({', '.join(labels)})")
    return _with_targets(specs, cfg)


def _takes_target(kind: str) -> bool:
    import inspect

    from specgauge.drafters.base import drafter_factory

    factory = drafter_factory(kind)
    return factory is not None and "target" in inspect.signature(factory).parameters


def model_dir(spec: str | Path | None) -> str | None:
    """``spec`` when it is a local model directory (config.json and safetensors weights), else None."""
    if spec is None or not Path(spec).is_dir():
        return None
    d = Path(spec)
    return str(d) if (d / "config.json").is_file() and any(d.glob("*.safetensors")) else None


def _with_targets(specs: list[MethodSpec], cfg: SimulateConfig) -> list[MethodSpec]:
    takes = [_takes_target(s.kind) for s in specs]
    if cfg.target_model is not None:
        if not Path(cfg.target_model).is_dir() and str(cfg.target_model).count("/") != 1:
            raise ConfigError(f"--target-model {cfg.target_model}: no such directory (nor a Hub id such as org/name)")
    if cfg.hidden_states is not None and not Path(cfg.hidden_states).is_dir():
        raise ConfigError(f"--hidden-states {cfg.hidden_states}: no such directory")
    if cfg.target_model is not None or cfg.hidden_states is not None:
        if not any(takes):
            flag = "--target-model" if cfg.target_model is not None else "--hidden-states"
            raise ConfigError(f"{flag}: only for methods that read a target model's hidden states "
                              "(eagle3:DIR, mtp:DIR, dflash:DIR); none of --method does")
    extra = {"target": str(cfg.target_model) if cfg.target_model is not None else None,
             "default_target": model_dir(cfg.tokenizer),
             "device": cfg.device if cfg.device != "cpu" else None, "dtype": cfg.dtype if cfg.dtype != "auto" else None,
             "hidden_states": str(cfg.hidden_states) if cfg.hidden_states is not None else None,
             "replay_batch_tokens": cfg.replay_batch_tokens}
    extra = {k: v for k, v in extra.items() if v is not None}
    if not extra:
        return specs
    return [s.model_copy(update={"options": {**s.options, **extra}}) if t else s for s, t in zip(specs, takes, strict=True)]


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
        self.tool_calls: Counter[str] = Counter()  # replies whose tool calls were written back: template / hermes
        self.notes: list[str] = []
        self._sink = open(cfg.per_request_out, "a", encoding="utf-8") if cfg.per_request_out else None
        #: for the calibrated law: the replayed requests and their traces per (method, k), kept from this
        #: one pass (``add_traces``), so the prediction neither reloads nor replays the workload
        self.kept: list[ReplayedRequest] = []
        self.kept_traces: dict[tuple[str, int], list[ReplayTrace]] = {}
        self.kept_skips: Counter[str] = Counter()  # requests without output, per segment ("" = all)

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def skip_request(self, reason: str, segment: str) -> None:
        """A workload request with nothing to replay (``reason``: no response, empty output)."""
        self.skip(reason)
        if self.fitted is not None:
            self.kept_skips.update(["", segment] if segment else [""])

    def add_traces(self, req: ReplayedRequest, label: str, traces: dict[int, ReplayTrace], keep: bool = True) -> None:
        """One request's traces for one method: a row per k, and (``keep``) the traces for the law."""
        for k, trace in traces.items():
            self.add(RequestAcceptance.from_trace(trace, req.id, req.segment, label, k, len(req.output_ids), req.exact,
                                                  greedy=req.greedy))
        if keep and self.fitted is not None:
            if not self.kept or self.kept[-1] is not req:
                self.kept.append(req)
            for k, trace in traces.items():
                self.kept_traces.setdefault((label, k), []).append(trace)

    def begin_request(self, exact: bool, model_match: bool | None, tool_calls: str | None = None) -> None:
        """A request with output is about to be replayed; ``model_match`` (re-tokenised ones): is the
        tokenizer its model's (None: it names no model); ``tool_calls``: how its logged tool calls were
        written back as text (``ReplayedRequest.tool_calls``)."""
        if tool_calls is not None:
            self.tool_calls[tool_calls] += 1
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
            whose = [en(f"simulate.n.whose_{who}", n=approx_models[who]) for who in ("own", "other", "unknown")
                     if approx_models[who]]
            notes.append(en("simulate.n.approx", n=self.approx, tok=describe_tokenizer(tok), whose="; ".join(whose)))
        for how, n in sorted(self.tool_calls.items()):  # approximate like any re-tokenised reply, and said why
            notes.append(en(f"simulate.n.tool_calls_{how}", n=n, tok=tok.name))
        if self.n == 0:
            notes.append(en("simulate.n.nothing"))
        accs, labels, profiles = self.accs, self.labels, self.profiles
        segments = sorted({seg for seg, _, _ in accs if seg})
        fitted = self._fitted_predictions(segments) if self.fitted is not None else None
        if fitted is not None:
            notes.append(en("simulate.n.fitted", file=Path(cfg.cost_profile).name if cfg.cost_profile else "",
                            model=self.fitted.provenance.get("model") or "?", shape=self.fitted.shape))
        else:
            what = en("simulate.n.ratio_file", file=Path(cfg.cost_profile).name) if cfg.cost_profile else en("simulate.n.guessed")
            notes.append(en("simulate.n.uncalibrated", what=what))
        return SimulateResult(
            # exact: every replayed request had logged token ids, and there was at least one (nothing is not exact)
            tokenizer=tok.name, exact=self.n > 0 and self.approx == 0, methods=labels, ks=list(cfg.ks), batch_sizes=cfg.batch_sizes,
            overall=_segment("", accs, labels, cfg, profiles, fitted),
            segments={s: _segment(s, accs, labels, cfg, profiles, fitted) for s in segments},
            requests_replayed=self.n, skipped=dict(skipped), notes=notes,
            probabilistic=_probabilistic(self.paccs),
        )


    def _fitted_predictions(self, segments: list[str]) -> dict[str, dict[tuple[str, int, int], SpeedupPrediction]]:
        from specgauge.predict.bridge import predict_grid, replays_from_traces
        from specgauge.predict.replay import WorkloadReplay

        specs = [s for s in method_specs(self.cfg) if not s.probabilistic]
        methods = [(s.label, s.kind, s.drafter_options) for s in specs]
        assert self.fitted is not None
        if self.kept or not self.n:  # this pass kept what the law needs
            replays = replays_from_traces(self.kept, self.kept_traces, self.kept_skips, methods, segments,
                                          ", ".join(map(str, self.cfg.workload)))
        else:  # rows merged from elsewhere (--ray): the planner replays the workload itself
            replays = {seg: WorkloadReplay(self.cfg.workload, self.tok, None, load=self.cfg.load, segment=seg or None)
                       for seg in ["", *segments]}
        grid = predict_grid(self.fitted, replays, methods, self.cfg.ks, self.cfg.batch_sizes)
        return {seg: {key: SpeedupPrediction(method=key[0], k=key[1], batch=key[2], tokens_per_step=None,
                                             predicted_speedup=p.speedup, low=p.speedup_low, high=p.speedup_high,
                                             extrapolated=p.extrapolated, note="; ".join(p.notes) or None,
                                             source="calibrated step-cost law")
                      for key, p in cells.items()} for seg, cells in grid.items()}


def simulate(cfg: SimulateConfig, tok: Tokenizer, on_request: Callable[[int], None] | None = None) -> SimulateResult:
    """One pass over the workload: each request tokenised once and replayed through every method at
    every k (``specgauge.offline``); the tables and, with a fitted ``--cost-profile``, the calibrated
    predictions come from this one replay."""
    specs = method_specs(cfg)
    runners = method_replays(specs, cfg.ks, tok)
    tally = ReplayTally(cfg, [s.label for s in specs], tok)
    stream_of = segment_rule(cfg.partition_by)
    report = server_report if len(cfg.ks) == 1 else (lambda _resp: None)
    pairs = ((item, replayed_request(item, tok, stream_of(item.request) if stream_of is not None else ""))
             for item in iter_workload(cfg.workload, cfg.load, tally.report))
    try:  # a hidden-state head's target passes run a block of requests together (offline.replay.prefetched)
        for item, req in prefetched(pairs, _ids, runners):
            if isinstance(req, str):
                tally.skip_request(req, item.request.segment)
                continue
            tally.begin_request(req.exact, req.model_match, req.tool_calls)
            for r in runners:
                if r.spec.probabilistic and (req.temperature or 0) > 0:
                    if item.response is None or item.response.top_logprobs is None:
                        tally.skip(f"{r.spec.label}: no target logprobs for probabilistic drafting")
                        continue
                    a = alphas(r, item, req)
                    for k in r.ks:
                        tally.add_alphas(req.segment, r.spec.label, k, a)
                    continue
                tally.add_traces(req, r.spec.label, r.traces(req.id, req.source, req.prompt_ids, req.output_ids, req.stream,
                                                             server=report(item.response)), keep=not r.spec.probabilistic)
            n = tally.end_request()
            if on_request is not None:
                on_request(n)
    finally:
        tally.close()
    if stream_of is not None:
        tally.notes.append(stream_note(cfg.partition_by, specs))
    return tally.result()


def _ids(pair: tuple[WorkloadItem, ReplayedRequest | str]) -> tuple[list[int], list[int]] | None:
    req = pair[1]
    return None if isinstance(req, str) else (req.prompt_ids, req.output_ids)


def nothing_to_replay(result: SimulateResult, workload: Sequence[Path]) -> str | None:
    """Why a result replayed nothing (a prompts file, responses without output), as one line naming the
    files and the skip counts; None when something was replayed."""
    if result.requests_replayed:
        return None
    why = ", ".join(en("simulate.e.skips", n=n, why=reason) for reason, n in result.skipped.items()) or en("simulate.e.no_requests")
    return en("simulate.e.nothing", files=", ".join(Path(p).name for p in workload), why=why)


def server_report(resp: object) -> ServerReport | None:
    """The server's final-step accepted count where the log holds vLLM's per-request counters
    (``metrics.speculative_decoding``, ``detailed``): suffix pins the tail past the cut with it, and
    leaves it out where the server drafted more than the replay's k (``SuffixDrafter.replay``). Only
    for a simulation of one k (the logged server's, as the user names it: ``--speculative-config`` or
    ``--k``): at other k the counts are another server's, and what it learned past the cuts its own.
    (The other steps' counts could fix uncertain paths too, ``ServerReport.steps``; not passed: seed 134 of
    ``tests/unit/test_suffix_bounds.py`` shows a request outside its bounds with them.)"""
    from specgauge.offline.record_fields import per_step

    steps = per_step(getattr(resp, "extra", None))
    return ServerReport(final_accepted=steps[-1][1], max_drafted=max(d for d, _ in steps)) if steps else None


def stream_note(partition_by: str | None, specs: Sequence[MethodSpec]) -> str:
    ordered = [s.label for s in specs if is_stateful(s.kind)]
    what = ", ".join(ordered) if ordered else en("simulate.n.no_stateful")
    return en("simulate.n.stream", by=partition_by, what=what)


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
