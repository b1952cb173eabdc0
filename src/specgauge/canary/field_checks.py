"""The canary's guardrails on field failures (``docs/field-failures.md``): the candidate against the
baseline on the same window, each a one-sided Fisher exact test on per-request yes/no outcomes
(``stats.rates``), so one bad request in a small window trips nothing and a run of them does.

* ``guardrail:structured_outputs``: requests whose tool calls / JSON broke their own schema.

Pure: the window's samples in, ``Check`` records out (``canary.judge`` runs them with the other
guardrails); the reasons are English (``en``), stored in the decision log, translated when shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


def field_checks(base: Sequence[Sample], cand: Sequence[Sample], baseline_expected: bool, cfg: JudgeConfig) -> list[dict[str, Any]]:
    """Every field guardrail that has something to judge in this window (``Check`` fields)."""
    out = [outputs_check(base, cand, baseline_expected, cfg)]
    return [c for c in out if c is not None]
