"""Which part of speculative decoding failed, from a comparison and the runs' replay checks.

Two independent checks name the part:

* the *target* side: outputs changed under speculation — temperature-0 outputs that differ from the
  no-speculation baseline, or sampled outputs whose distribution differs (``stats.equivalence``);
  speculative decoding must not change what the target emits;
* the *drafter* side: the candidate server accepted fewer draft tokens than its own outputs allow
  (``stats.replay_check``, recorded by ``bench`` in ``summary.json``): its drafter or verifier does
  not do what the replay of the same drafter on the same outputs does.

Boundary: a ``ComparisonResult`` and the two runs' ``summary.json`` data in, a ``Diagnosis`` out.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from specgauge.i18n import en
from specgauge.stats.equivalence import EquivalenceResult

Part = Literal["target", "drafter"]


class Diagnosis(BaseModel):
    failed: list[Part] = Field(default_factory=list)  #: the parts shown to have failed
    cause: str  #: one sentence naming them (or saying none was found, or what could not be checked)
    target: str  #: what the output comparison says
    drafter: str  #: what the replay check says
    concurrency: int | None = None  #: the candidate's max concurrency
    #: the candidate server's acceptance collapsed against its own outputs' replay (``stats.collapse``): the problem, named
    collapse: str | None = None


def _target(eq: EquivalenceResult | None, alpha: float) -> tuple[bool | None, str]:
    if eq is None:
        return None, "outputs were not compared"
    gr, sp = eq.greedy, eq.sampled
    changed = gr.pairs - gr.matches if gr.pairs else 0
    parts: list[str] = []
    if changed:
        parts.append(f"{changed} of {gr.pairs} temperature-0 outputs differ from the baseline")
    for name, t in (("output lengths", sp.length_ks), ("output tokens", sp.unigram_tvd)):
        if t.p_value is not None and t.p_value < alpha:
            parts.append(f"sampled {name} differ in distribution (p = {t.p_value:.2g})")
    if parts:
        return True, "outputs changed under speculation: " + "; ".join(parts)
    if gr.pairs:
        return False, f"all {gr.pairs} temperature-0 outputs equal the baseline's"
    return None, "no temperature-0 pair to compare outputs on"


def _drafter(check: Any) -> tuple[bool | None, str]:
    if not isinstance(check, dict):
        return None, "the candidate run has no replay check (bench from before specgauge 0.x, or not a bench run)"
    if not check.get("available"):
        return None, f"no replay check: {check.get('reason') or 'unavailable'}"
    collapse = _collapse(check)
    if collapse is not None:
        return True, en("diagnosis.collapse", text=collapse)
    if check.get("gap"):
        return True, f"the drafter lost acceptance on its own outputs: {check.get('gap_summary')}"
    n, m, u = check.get("requests", 0), check.get("matching", 0), check.get("uncertain", 0)
    rate = check.get("server_acceptance_rate")
    if n and check.get("no_server_counts", 0) == n:  # no per-request counts: the run's totals were compared, if any
        if not isinstance(rate, (int, float)):
            return None, en("diagnosis.drafter_no_counts")
        return False, en("diagnosis.drafter_ok_totals", pct=f"{100 * rate:.1f}")
    rate_s = f" ({100 * rate:.1f} % accepted)" if isinstance(rate, (int, float)) else ""
    tail = f"; {u} more could not be vouched for" if u else ""
    return False, f"the drafter accepts what its own outputs allow: {m} of {n} requests equal the replay{rate_s}{tail}"


def _collapse(check: Any) -> str | None:
    """The replay check's named collapse (its summary), if it found one."""
    col = ((check.get("profile") if isinstance(check, dict) else None) or {}).get("collapse") or {}
    return col.get("summary") if isinstance(col, dict) and col.get("summary") else None


def diagnose(equivalence: EquivalenceResult | None, candidate_summary: dict[str, Any] | None,
             candidate_concurrency: int | None = None, alpha: float = 0.01) -> Diagnosis:
    """Name the failed part(s) of the candidate's speculative decoding."""
    check = ((candidate_summary or {}).get("specgauge") or {}).get("replay_check")
    t_failed, t_text = _target(equivalence, alpha)
    d_failed, d_text = _drafter(check)
    failed: list[Part] = [p for p, f in (("target", t_failed), ("drafter", d_failed)) if f]
    at = f" at concurrency {candidate_concurrency}" if candidate_concurrency else ""
    if failed == ["target", "drafter"]:
        cause = f"both parts failed{at}: {t_text}; and {d_text}"
    elif failed == ["target"]:
        also = "; the drafter did not also lose acceptance on its own outputs" if d_failed is False else (
            f"; whether the drafter also lost acceptance is unknown ({d_text})")
        cause = f"the target failed{at}: {t_text}{also}"
    elif failed == ["drafter"]:
        cause = f"the drafter failed{at}: {d_text}; the outputs did not change"
    elif t_failed is False and d_failed is False:
        cause = "no failure found: outputs unchanged, and the server accepts what its outputs allow"
    else:
        cause = f"no failure found in what could be checked ({t_text}; {d_text})"
    return Diagnosis(failed=failed, cause=cause, target=t_text, drafter=d_text, concurrency=candidate_concurrency,
                     collapse=_collapse(check))
