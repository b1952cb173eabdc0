"""The canary's guardrails on field failures (``docs/field-failures.md``): the candidate against the
baseline on the same window, each a one-sided Fisher exact test on per-request yes/no outcomes
(``stats.rates``), so one bad request in a small window trips nothing and a run of them does.

* ``guardrail:structured_outputs``: requests whose tool calls / JSON broke their own schema;
* ``guardrail:stalls``: requests whose longest gap between two output chunks is above
  ``stalls.factor`` × the window's baseline TPOT (and ``stalls.min_gap_ms``), ``stats.stalls``.

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


def field_checks(base: Sequence[Sample], cand: Sequence[Sample], baseline_expected: bool, cfg: JudgeConfig) -> list[dict[str, Any]]:
    """Every field guardrail that has something to judge in this window (``Check`` fields)."""
    out = [outputs_check(base, cand, baseline_expected, cfg), stalls_check(base, cand, baseline_expected, cfg)]
    return [c for c in out if c is not None]
