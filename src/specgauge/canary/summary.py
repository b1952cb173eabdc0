"""The canary's final report as data (``summary.json``) and as plain text for the console.

Exit status of ``specgauge canary``: 0 when the roll-out completed (the last step passed), 1 when
it rolled back, 3 when it ended undecided (stopped while promoting or holding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from specgauge.canary.config import CanaryConfig
from specgauge.canary.controller import CanaryState, Decision
from specgauge.canary.judge import Judgement, WindowInput
from specgauge.canary.observe import Role, Side
from specgauge.distributions import describe
from specgauge.records import RequestRecord, SpecCounts

EXIT_CODES = {"complete": 0, "rolled_back": 1, "running": 3}


@dataclass
class RunTotals:
    """Counts over the whole run (windows come and go)."""

    requests: dict[str, dict[str, int]] = field(default_factory=lambda: {s.value: {} for s in Side})
    failed: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in Side})
    retried_on_baseline: int = 0
    client_visible_failures: int = 0  #: failures a client saw (the baseline's, and candidate streams broken after bytes)
    candidate_broken_after_bytes: int = 0
    client_gone: int = 0
    client_errors: int = 0
    pairs: int = 0
    pairs_matched: int = 0

    def add(self, side: Side, role: Role, rec: RequestRecord, *, counted: bool, client_gone: bool, client_error: bool) -> None:
        by_role = self.requests[side.value]
        by_role[role.value] = by_role.get(role.value, 0) + 1
        facts = rec.extra.get("canary", {})
        if client_gone:
            self.client_gone += 1
            return
        if client_error:
            self.client_errors += 1
            return
        if facts.get("retried_on_baseline"):
            self.retried_on_baseline += 1
        if rec.ok:
            return
        self.failed[side.value] += 1
        if role is Role.shadow:
            return
        if side is Side.baseline or (facts.get("bytes_sent") and not facts.get("retried_on_baseline")):
            self.client_visible_failures += 1
            if side is Side.candidate:
                self.candidate_broken_after_bytes += 1

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "failed": self.failed, "retried_on_baseline": self.retried_on_baseline,
                "client_visible_failures": self.client_visible_failures,
                "candidate_broken_after_bytes": self.candidate_broken_after_bytes, "client_gone": self.client_gone,
                "client_errors": self.client_errors, "greedy_pairs": self.pairs, "greedy_pairs_matched": self.pairs_matched}


def _ms(samples: list[Any], metric: str, p: float) -> float | None:
    vals = [getattr(s, metric) for s in samples if s.ok and getattr(s, metric) is not None]
    if not vals:
        return None
    v = describe(vals, (p,)).pct(p)
    return None if math.isnan(v) else round(v * 1000.0, 3)


def window_latency(inp: WindowInput) -> dict[str, dict[str, dict[str, float | None]]]:
    """metric -> side -> {"p50", "p95"} in ms over a window's successful requests (None without data)."""
    sides = {"baseline": inp.baseline, "candidate": inp.candidate}
    return {m: {k: {"p50": _ms(v, m, 50.0), "p95": _ms(v, m, 95.0)} for k, v in sides.items()} for m in ("ttft", "tpot", "e2e")}


class WindowRow(BaseModel):
    """One evaluation, flattened: what the report plots and the console prints."""

    t: float
    start: float
    weight: float  #: the weight the window was judged at
    to_weight: float
    outcome: str
    action: str
    score: float | None
    speed: str | None
    baseline: int
    candidate: int
    baseline_failed: int
    candidate_failed: int
    retried_on_baseline: int
    p95_ms: dict[str, dict[str, float | None]] = Field(default_factory=dict)  #: metric -> side -> p95
    p50_ms: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    acceptance_rate: float | None = None
    exact_match_rate: float | None = None
    reason: str = ""

    @classmethod
    def of(cls, *, event_t: float, window: dict[str, Any], inp: WindowInput, j: Judgement, d: Decision,
           spec: SpecCounts | None) -> WindowRow:
        lat = window.get("latency_ms") or window_latency(inp)
        pairs = inp.pairs
        rate = spec.acceptance_rate if spec is not None else math.nan
        return cls(
            t=event_t, start=window["start"], weight=window["weight"], to_weight=d.to_weight, outcome=j.outcome.value,
            action=d.action.value, score=j.score, speed=j.speed, baseline=len(inp.baseline), candidate=len(inp.candidate),
            baseline_failed=sum(1 for s in inp.baseline if not s.ok), candidate_failed=sum(1 for s in inp.candidate if not s.ok),
            retried_on_baseline=window.get("retried_on_baseline", 0),
            p95_ms={m: {k: v["p95"] for k, v in by_side.items()} for m, by_side in lat.items()},
            p50_ms={m: {k: v["p50"] for k, v in by_side.items()} for m, by_side in lat.items()},
            acceptance_rate=None if math.isnan(rate) else rate,
            exact_match_rate=(sum(p.match for p in pairs) / len(pairs)) if pairs else None,
            reason=d.reason,
        )


class CanaryResult(BaseModel):
    kind: str = "specgauge.canary.summary"
    mode: str
    status: str  #: running (undecided when it stopped), complete, rolled_back
    weight: float
    steps: list[float]
    step: int
    evaluations: int
    failed_evaluations: int
    failure_limit: int
    rollback_reason: str | None
    decisions: dict[str, int]
    duration_s: float
    totals: dict[str, Any]
    greedy_pairs: int
    exact_match_rate: float | None
    shadow_skipped: int = 0
    windows: list[WindowRow] = Field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.status, 3)

    def headline(self) -> dict[str, Any]:
        return {"status": self.status, "weight": self.weight, "evaluations": self.evaluations,
                "failed_evaluations": self.failed_evaluations, "rollback_reason": self.rollback_reason,
                "exact_match_rate": self.exact_match_rate, "greedy_pairs": self.greedy_pairs,
                "client_visible_failures": self.totals.get("client_visible_failures")}


def build_result(cfg: CanaryConfig, state: CanaryState, rows: list[WindowRow], totals: RunTotals, duration_s: float,
                 shadow_skipped: int = 0) -> CanaryResult:
    decisions: dict[str, int] = {}
    for r in rows:
        decisions[r.action] = decisions.get(r.action, 0) + 1
    return CanaryResult(
        mode=cfg.mode, status=state.status, weight=state.weight, steps=cfg.steps, step=state.step,
        evaluations=state.evaluations, failed_evaluations=state.failed_evaluations, failure_limit=cfg.failure_limit,
        rollback_reason=state.rollback_reason, decisions=decisions, duration_s=round(duration_s, 3), totals=totals.as_dict(),
        greedy_pairs=totals.pairs, exact_match_rate=(totals.pairs_matched / totals.pairs) if totals.pairs else None,
        shadow_skipped=shadow_skipped, windows=rows,
    )


def _f(v: float | None, spec: str = "{:.1f}") -> str:
    return "-" if v is None else spec.format(v)


def format_summary(r: CanaryResult) -> str:
    """Plain text (the CLI prints it without markup), in the current language (``specgauge.i18n``)."""
    from specgauge.i18n import t, translate, word

    share = t("canary.sum.share_shadow") if r.mode == "shadow" else t("canary.sum.share_live")
    tt = r.totals
    lines = [
        t("canary.sum.head", mode=word("canary.mode", r.mode), head=t(f"canary.head.{r.status}")),
        t("canary.sum.progress", share=share, w=f"{r.weight:g}", steps=", ".join(f"{s:g}" for s in r.steps), n=r.evaluations,
          failed=r.failed_evaluations, limit=r.failure_limit, s=f"{r.duration_s:.0f}"),
    ]
    if r.rollback_reason:
        lines.append(t("canary.sum.why", text=translate(r.rollback_reason)))
    req = tt["requests"]
    lines.append(t("canary.sum.requests", nb=sum(req["baseline"].values()), b=req["baseline"], nc=sum(req["candidate"].values()),
                   c=req["candidate"], failed=tt["failed"]))
    lines.append(t("canary.sum.retried", r=tt["retried_on_baseline"], v=tt["client_visible_failures"],
                   broken=tt["candidate_broken_after_bytes"]))
    if r.greedy_pairs:
        lines.append(t("canary.sum.greedy", m=tt["greedy_pairs_matched"], n=r.greedy_pairs,
                       pct=_f(r.exact_match_rate and r.exact_match_rate * 100)))
    else:
        lines.append(t("canary.sum.no_greedy"))
    if r.shadow_skipped:
        lines.append(t("canary.sum.shadow_skipped", n=r.shadow_skipped))
    if r.windows:
        lines.append(t("canary.sum.evaluations"))
        lines.append(f"    {t('canary.sum.c.weight'):>6} {t('canary.sum.c.outcome'):<12} {t('canary.sum.c.action'):<9} "
                     f"{t('canary.sum.c.score'):>5} {'n_b':>5} {'n_c':>5} {'fail_c':>6} "
                     f"{'TTFT95 b/c ms':>15} {'E2E95 b/c ms':>15} {t('canary.sum.c.accept'):>6}")
        for w in r.windows:
            ttft = f"{_f(w.p95_ms['ttft']['baseline'], '{:.0f}')}/{_f(w.p95_ms['ttft']['candidate'], '{:.0f}')}"
            e2e = f"{_f(w.p95_ms['e2e']['baseline'], '{:.0f}')}/{_f(w.p95_ms['e2e']['candidate'], '{:.0f}')}"
            action = word("canary.action", w.action) + ("->" + format(w.to_weight, "g") if w.to_weight != w.weight else "")
            lines.append(f"    {w.weight:>6g} {word('canary.outcome', w.outcome):<12} {action:<9} "
                         f"{_f(w.score, '{:.0f}'):>5} {w.baseline:>5} {w.candidate:>5} {w.candidate_failed:>6} {ttft:>15} {e2e:>15} "
                         f"{_f(w.acceptance_rate and w.acceptance_rate * 100, '{:.0f}%'):>6}")
    return "\n".join(lines)
