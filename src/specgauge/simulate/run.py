"""``specgauge simulate``: replay logged outputs through drafters, offline, no GPU.

One streaming pass over the workload; every (method, k) sees every request in file order (the suffix
drafter's global tree therefore learns from earlier responses in that order, as a live server would
in arrival order). Exactness: logged token ids give exact acceptance (replay theorem); text-only
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
from specgauge.drafters.base import Drafter, ReplayTrace, make_drafter, replay_by_stepping
from specgauge.errors import UserError
from specgauge.simulate.cost_model import CostProfiles, SpeedupPrediction, predict_speedup
from specgauge.simulate.probabilistic import ProbabilisticAccumulator, ProbabilisticSummary, alpha_lower_bound
from specgauge.simulate.replay import AcceptanceAccumulator, AcceptanceSummary, RequestAcceptance
from specgauge.workload.loaders import LoadOptions, LoadReport, iter_workload
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


def trace_from_matches(match: np.ndarray, k: int) -> ReplayTrace:
    """Greedy draft model from one teacher-forced pass: ``match[j]`` says the draft's argmax at output
    position j (given the true history) equals the logged token. A step at ``pos`` proposes k tokens;
    token i is accepted iff tokens pos..pos+i all match (after a mismatch the history diverges, but
    those tokens are rejected anyway), so accepted = min(k, run of matches from pos). Output token 0
    comes from the prefill, so the first step is at pos 1."""
    n = len(match)
    idx = np.arange(n)
    next_false = np.minimum.accumulate(np.where(match, n, idx)[::-1])[::-1] if n else idx
    run = next_false - idx
    drafted, accepted = [], []
    pos = 1
    while pos < n:
        a = min(int(run[pos]), k)
        drafted.append(k)
        accepted.append(a)
        pos += a + 1
    return ReplayTrace(np.asarray(drafted, dtype=np.int64), np.asarray(accepted, dtype=np.int64))


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

    @property
    def probabilistic(self) -> bool:
        return self.spec.options.get("sampling") == "probabilistic"

    def run(self, item: WorkloadItem, prompt: list[int], out: list[int]) -> dict[int, ReplayTrace]:
        rid = item.request.id
        try:
            if self.spec.kind == "draft_model":
                pred = self.model.teacher_forced_argmax(prompt, out)  # type: ignore[attr-defined]
                match = np.asarray(pred) == np.asarray(out)
                return {k: trace_from_matches(match, k) for k in self.ks}
            traces = {}
            for k, d in self.drafters.items():
                fast = getattr(d, "replay", None)
                traces[k] = fast(rid, prompt, out, k) if fast is not None else replay_by_stepping(d, rid, prompt, out, k)
            return traces
        except (ValueError, IndexError) as e:
            raise SimulateError(f"{item.source}: request {rid}: --method {self.spec.label}: {e}") from None

    def alphas(self, item: WorkloadItem, prompt: list[int], out: list[int]) -> np.ndarray:
        """Per-position acceptance lower bound for a sampling draft model (needs target logprobs)."""
        assert item.response is not None and item.response.top_logprobs is not None
        t = item.request.temperature or 1.0
        try:
            logq = self.model.teacher_forced_logprobs(prompt, out, temperature=t)  # type: ignore[attr-defined]
        except ValueError as e:
            raise SimulateError(f"{item.source}: request {item.request.id}: --method {self.spec.label}: {e}") from None
        return alpha_lower_bound(logq, item.response.top_logprobs)


def simulate(cfg: SimulateConfig, tok: Tokenizer, on_request: Callable[[int], None] | None = None) -> SimulateResult:
    if not cfg.ks or min(cfg.ks) < 1:
        raise ConfigError("--k: k must be >= 1")
    specs = [MethodSpec.parse(m, cfg.speculative_config, cfg.draft_sampling) for m in cfg.methods]
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--method: the same method twice ({', '.join(labels)})")
    runners = [_MethodRunner(s, cfg.ks, tok) for s in specs]
    profiles = CostProfiles.load(cfg.cost_profile)
    report = LoadReport()
    accs: dict[tuple[str, str, int], AcceptanceAccumulator] = {}
    paccs: dict[tuple[str, str, int], ProbabilisticAccumulator] = {}
    skipped: Counter[str] = Counter()
    n = approx = 0
    approx_models: Counter[str] = Counter()  # re-tokenised requests: own / other model's tokenizer / unknown
    sink = open(cfg.per_request_out, "a", encoding="utf-8") if cfg.per_request_out else None
    try:
        for item in iter_workload(cfg.workload, cfg.load, report):
            resp = item.response
            if resp is None:
                skipped["no logged response"] += 1
                continue
            prompt, out, exact = _token_ids(item, tok)
            if not out:
                skipped["empty logged output"] += 1
                continue
            if not exact:
                approx += 1
                m = model_match(tok, item.named_model())
                approx_models["unknown" if m is None else "own" if m else "other"] += 1
            seg = item.request.segment
            for r in runners:
                if r.probabilistic and (item.request.temperature or 0) > 0:
                    if resp.top_logprobs is None:
                        skipped[f"{r.spec.label}: no target logprobs for probabilistic drafting"] += 1
                        continue
                    alphas = r.alphas(item, prompt, out)
                    for k in r.ks:
                        for key in (("", r.spec.label, k), (seg, r.spec.label, k)):
                            paccs.setdefault(key, ProbabilisticAccumulator(r.spec.label, k)).add(alphas)
                    continue
                for k, trace in r.run(item, prompt, out).items():
                    row = RequestAcceptance.from_trace(trace, item.request.id, seg, r.spec.label, k, len(out), exact)
                    for key in (("", r.spec.label, k), (seg, r.spec.label, k)):
                        if key not in accs:
                            accs[key] = AcceptanceAccumulator(r.spec.label, k)
                        accs[key].add(row)
                    if sink is not None:
                        sink.write(row.model_dump_json() + "\n")
            n += 1
            if sink is not None:
                sink.flush()
            if on_request is not None:
                on_request(n)
    finally:
        if sink is not None:
            sink.close()
    if report.skipped:
        skipped["invalid (skipped)"] += report.skipped
    notes = []
    if approx:
        whose = []
        if approx_models["own"]:
            whose.append(f"{approx_models['own']} name its model")
        if approx_models["other"]:
            whose.append(f"{approx_models['other']} name another model: its ids are not their model's, so their "
                         "acceptance says little")
        if approx_models["unknown"]:
            whose.append(f"{approx_models['unknown']} name no model, so whether it is their model's tokenizer is unknown")
        notes.append(f"{approx} request(s) had no logged token ids: re-tokenised with {describe_tokenizer(tok)} "
                     f"({'; '.join(whose)}); acceptance APPROXIMATE — log token ids (vLLM return_token_ids) for exact figures")
    if n == 0:
        notes.append("no request had a logged response with output: nothing to replay")
    segments = sorted({seg for seg, _, _ in accs if seg})
    return SimulateResult(
        tokenizer=tok.name, exact=approx == 0, methods=labels, ks=list(cfg.ks), batch_sizes=cfg.batch_sizes,
        overall=_segment("", accs, labels, cfg, profiles),
        segments={s: _segment(s, accs, labels, cfg, profiles) for s in segments},
        requests_replayed=n, skipped=dict(skipped), notes=notes,
        probabilistic=_probabilistic(paccs),
    )


def _probabilistic(paccs: dict[tuple[str, str, int], ProbabilisticAccumulator]) -> dict[str, list[ProbabilisticSummary]]:
    out: dict[str, list[ProbabilisticSummary]] = {}
    for (seg, _, _), acc in sorted(paccs.items()):
        out.setdefault(seg, []).append(acc.summary())
    return out


def _segment(
    seg: str, accs: dict[tuple[str, str, int], AcceptanceAccumulator], labels: list[str], cfg: SimulateConfig,
    profiles: CostProfiles,
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
                preds.append(p)
                if b == cfg.batch_sizes[0] and p.predicted_speedup is not None and p.predicted_speedup > best_val:
                    best_val, best_k = p.predicted_speedup, k
        best[label] = best_k
    return SegmentResult(summaries=sums, predictions=preds, best_k=best)
