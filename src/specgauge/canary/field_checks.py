"""The canary's guardrails on field failures (``docs/field-failures.md``): the candidate against the
baseline on the same window, each a one-sided Fisher exact test on per-request yes/no outcomes
(``stats.rates``), so one bad request in a small window trips nothing and a run of them does.

* ``guardrail:structured_outputs``: requests whose tool calls / JSON broke their own schema;
* ``guardrail:stalls``: requests whose longest gap between two output chunks is above
  ``stalls.factor`` × the window's baseline TPOT (and ``stalls.min_gap_ms``), ``stats.stalls``;
* ``guardrail:acceptance_replay`` (with ``canary --speculative-config``): the candidate's acceptance
  far below the replay of its own outputs through the same drafter, overall, past a prompt length or
  from a draft position (``stats.collapse``): a broken drafter, kernel or config.

Pure: the window's samples in, ``Check`` records out (``canary.judge`` runs them with the other
guardrails); the reasons are English (``en``), stored in the decision log, translated when shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from specgauge.canary.config import JudgeConfig
from specgauge.canary.window import Sample
from specgauge.i18n import en
from specgauge.stats.rates import compare_rates
from specgauge.stats.replay_check import ReplayCheck


def outputs_check(base: Sequence[Sample], cand: Sequence[Sample], baseline_expected: bool, cfg: JudgeConfig) -> dict[str, Any] | None:
    """The structured-output guardrail as ``Check`` fields; None when no request asked for one."""
    jb = [s for s in base if s.invalid is not None]
    jc = [s for s in cand if s.invalid is not None]
    name, crit = "guardrail:structured_outputs", "structured_outputs" in cfg.guardrails.critical
    if not jc:
        return None
    kc = sum(1 for s in jc if s.invalid)
    if not baseline_expected or not jb:
        return dict(name=name, kind="guardrail", status="skipped", critical=crit,
                    reason=en("canary.j.outputs_alone", kc=kc, nc=len(jc)),
                    evidence={"candidate_invalid": kc, "candidate_judged": len(jc)})
    kb = sum(1 for s in jb if s.invalid)
    rc = compare_rates(kb, len(jb), kc, len(jc), [s.error or "" for s in jc if s.invalid][:3])
    bad = rc.worse(cfg.alpha)
    p = "n/a" if rc.p_value is None else f"{rc.p_value:.2g}"
    reason = (en("canary.j.outputs_bad", kc=kc, nc=len(jc), kb=kb, nb=len(jb), p=p, alpha=f"{cfg.alpha:g}") if bad
              else en("canary.j.outputs_ok", kc=kc, nc=len(jc), kb=kb, nb=len(jb), p=p))
    return dict(name=name, kind="guardrail", status="fail" if bad else "pass", critical=crit, reason=reason,
                evidence={"candidate_invalid": kc, "candidate_judged": len(jc), "baseline_invalid": kb,
                          "baseline_judged": len(jb), "p_value": rc.p_value, "examples": rc.examples,
                          "test": "Fisher exact, one-sided"})


def stalls_check(base: Sequence[Sample], cand: Sequence[Sample], baseline_expected: bool, cfg: JudgeConfig) -> dict[str, Any] | None:
    """The stall guardrail: requests whose longest gap is above factor × the window's baseline TPOT."""
    name, crit = "guardrail:stalls", "stalls" in cfg.guardrails.critical
    gc = [s for s in cand if s.longest_gap is not None]
    gb = [s for s in base if s.longest_gap is not None]
    if not gc:
        return None
    if not baseline_expected or not gb:
        return dict(name=name, kind="guardrail", status="skipped", critical=crit,
                    reason=en("canary.j.stalls_alone", nc=len(gc)), evidence={"candidate_requests": len(gc)})
    tp = [s.tpot for s in base if s.ok and s.tpot]
    ref = float(np.median(tp)) if tp else None
    thr = cfg.stalls.threshold_s(ref)
    kb = sum(1 for s in gb if (s.longest_gap or 0) > thr)
    stalled = sorted((s for s in gc if (s.longest_gap or 0) > thr), key=lambda s: -(s.longest_gap or 0))
    ex = [f"{1000 * (s.longest_gap or 0):.0f} ms" + (f" → {s.gap_text!r}" if s.gap_text is not None else "") for s in stalled[:3]]
    rc = compare_rates(kb, len(gb), len(stalled), len(gc), ex)
    bad = rc.worse(cfg.alpha)
    p = "n/a" if rc.p_value is None else f"{rc.p_value:.2g}"
    args = {"kc": len(stalled), "nc": len(gc), "kb": kb, "nb": len(gb), "p": p, "thr": f"{1000 * thr:.0f}"}
    reason = en("canary.j.stalls_bad", **args, alpha=f"{cfg.alpha:g}", first=ex[0] if ex else "") if bad else en("canary.j.stalls_ok", **args)
    return dict(name=name, kind="guardrail", status="fail" if bad else "pass", critical=crit, reason=reason,
                evidence={"candidate_stalled": len(stalled), "candidate_requests": len(gc), "baseline_stalled": kb,
                          "baseline_requests": len(gb), "threshold_ms": round(1000 * thr, 3),
                          "tpot_ref_ms": None if ref is None else round(1000 * ref, 3), "p_value": rc.p_value,
                          "longest": ex, "test": "Fisher exact, one-sided"})


def replay_check(replay: ReplayCheck | None, cfg: JudgeConfig) -> dict[str, Any] | None:
    """The acceptance-replay guardrail: the candidate's acceptance against the replay of its own outputs."""
    prof = replay.profile if replay is not None and replay.available else None
    if replay is None:
        return None
    name, crit = "guardrail:acceptance_replay", "acceptance_replay" in cfg.guardrails.critical
    if prof is None or not prof.requests:
        why = replay.reason or en("canary.j.replay_no_counts")
        return dict(name=name, kind="guardrail", status="skipped", critical=crit, reason=en("canary.j.replay_none", why=why),
                    evidence={"requests": replay.requests})
    ev = {"requests": prof.requests, "server_rate": prof.server_rate, "replay_rate": prof.replay_rate,
          "bands": [b.model_dump() for b in prof.bands], "positions": [p.model_dump() for p in prof.positions],
          "method": replay.method, "k": replay.k}
    if prof.collapse is not None:
        return dict(name=name, kind="guardrail", status="fail", critical=crit, reason=prof.collapse.summary,
                    evidence={**ev, "collapse": prof.collapse.model_dump()})
    return dict(name=name, kind="guardrail", status="pass", critical=crit, evidence=ev,
                reason=en("canary.j.replay_ok", n=prof.requests, srv=_pct(prof.server_rate), rep=_pct(prof.replay_rate)))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def field_checks(base: Sequence[Sample], cand: Sequence[Sample], baseline_expected: bool, cfg: JudgeConfig,
                 replay: ReplayCheck | None = None) -> list[dict[str, Any]]:
    """Every field guardrail that has something to judge in this window (``Check`` fields)."""
    out = [outputs_check(base, cand, baseline_expected, cfg), stalls_check(base, cand, baseline_expected, cfg),
           replay_check(replay, cfg)]
    return [c for c in out if c is not None]
