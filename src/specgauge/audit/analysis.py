"""From stored samples to evidence and a verdict (pure: no I/O, no servers).

Two checks, each able to fail the audit:

1. **Distributions at temperature > 0**: per prompt and position j, a chi-square test of homogeneity
   (Pearson's by default, the G-test on request; ``stats.homogeneity`` says why) of the
   distribution of the token at position j, candidate vs reference (``stats`` explains the pooled
   table and why marginals). Holm's correction across all prompts x positions keeps the chance of a false
   FAIL at most ``alpha`` for the audit as a whole (the verdict fails on *any* rejection, so the
   family-wise error is the one to control; Holm holds under any dependence, and the positions of one
   completion are dependent). Each test also reports its effect sizes (TV distance and Cramér's
   V of the pooled table) and the smallest TV distance its sample sizes detect with the requested
   power at the per-test level Holm may demand (alpha / m); a test that cannot detect ``detect_tv``
   makes a non-failing audit INCONCLUSIVE and says how many samples would do (a table whose only
   column is "other" — every token rare — detects nothing: its detectable TV is reported as 1).
2. **Greedy in mixed batches**: greedy requests sent concurrently, interleaved with sampled ones,
   must come back exactly as the reference server returns them when sent alone. The same mixed
   batches on the reference itself are the control: when the reference changes its own greedy
   outputs in mixed batches, the server is not batch-invariant and speculation cannot be blamed
   (INCONCLUSIVE for that check).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from specgauge.audit.prompts import AuditPrompt
from specgauge.audit.stats import (
    END,
    OTHER,
    detectable_tv,
    first_divergence,
    holm,
    homogeneity,
    pooled_table,
    samples_needed,
    token_at,
)
from specgauge.audit.store import SampleStore

Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
EXIT_CODES: dict[str, int] = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}
MAX_EXAMPLES = 5


class StatsSettings(BaseModel):
    alpha: float = Field(default=0.05, gt=0, lt=1, description="family-wise error rate of a false FAIL")
    power: float = Field(default=0.8, gt=0, lt=1, description="power required to call a non-failing audit PASS")
    detect_tv: float = Field(default=0.2, gt=0, le=1, description="TV distance each test must be able to detect")
    test: Literal["pearson", "g"] = Field(default="pearson", description="chi-square test: Pearson's X^2 or the G-test")
    min_expected: float = Field(default=5.0, gt=0, description="smallest expected count of a table cell")
    max_categories: int = Field(default=8, ge=2, description="columns of a table, 'other' included")
    greedy_tolerance: int = Field(default=0, ge=0, description="greedy mismatches tolerated")


class DistributionTest(BaseModel):
    prompt: int
    prompt_id: str
    position: int
    columns: list[str]
    reference_counts: list[int]
    candidate_counts: list[int]
    n_reference: int
    n_candidate: int
    statistic: float
    dof: int
    p_value: float
    p_holm: float
    rejected: bool
    tv: float
    cramers_v: float
    detectable_tv: float
    samples_needed: int


class GreedyMismatch(BaseModel):
    side: str
    prompt: int
    prompt_id: str
    round: int
    first_divergence: int
    expected: list[int | str]
    got: list[int | str]


class GreedyCheck(BaseModel):
    rounds: int
    total: int = 0
    mismatches: int = 0
    control_total: int = 0
    control_mismatches: int = 0
    examples: list[GreedyMismatch] = Field(default_factory=list)


def _label(key: Hashable) -> str:
    return key if isinstance(key, str) and key in (OTHER, END) else json.dumps(key, ensure_ascii=False)


def distribution_tests(prompts: Sequence[AuditPrompt], store: SampleStore, positions: int,
                       s: StatsSettings) -> list[DistributionTest]:
    raw = []
    for i, p in enumerate(prompts):
        ref = [c.tokens for c in store.samples.get(("reference", i), [])]
        cand = [c.tokens for c in store.samples.get(("candidate", i), [])]
        for j in range(positions):
            table = pooled_table([token_at(t, j) for t in ref], [token_at(t, j) for t in cand],
                                 s.min_expected, s.max_categories)
            raw.append((i, p.id, j, table, homogeneity(table, s.min_expected, s.test)))
    real = [k for k, r in enumerate(raw) if r[4].dof > 0]
    m = max(len(real), 1)
    adjusted = dict(zip(real, holm([raw[k][4].p_value for k in real]), strict=True))
    level = s.alpha / m  # the smallest level Holm tests at: power is judged there (conservative)
    out = []
    for k, (i, pid, j, table, h) in enumerate(raw):
        n_r, n_c = table.n
        dof = max(h.dof, 1)
        p_holm = float(adjusted.get(k, 1.0))
        out.append(DistributionTest(
            prompt=i, prompt_id=pid, position=j, columns=[_label(x) for x in table.labels],
            reference_counts=table.counts[0].tolist(), candidate_counts=table.counts[1].tolist(),
            n_reference=n_r, n_candidate=n_c, statistic=h.statistic, dof=h.dof, p_value=h.p_value,
            p_holm=p_holm, rejected=p_holm < s.alpha, tv=h.tv, cramers_v=h.cramers_v,
            detectable_tv=1.0 if table.labels == [OTHER] else min(1.0, detectable_tv(n_r, n_c, level, dof, s.power)),
            samples_needed=samples_needed(s.detect_tv, level, dof, s.power),
        ))
    return out


def greedy_check(prompts: Sequence[AuditPrompt], store: SampleStore, rounds: int, control: bool) -> GreedyCheck:
    g = GreedyCheck(rounds=rounds)
    sides = ["candidate", "reference"] if control else ["candidate"]
    for side in sides:
        for r in range(rounds):
            for i, p in enumerate(prompts):
                expected = store.greedy_alone.get(("reference", i))
                got = store.greedy_mixed.get((side, r, i))
                if expected is None or got is None:
                    continue
                d = first_divergence(expected, got)
                if side == "candidate":
                    g.total += 1
                    g.mismatches += d is not None
                else:
                    g.control_total += 1
                    g.control_mismatches += d is not None
                if d is not None and len(g.examples) < MAX_EXAMPLES:
                    g.examples.append(GreedyMismatch(side=side, prompt=i, prompt_id=p.id, round=r, first_divergence=d,
                                                     expected=list(expected), got=list(got)))
    return g


def judge(tests: Sequence[DistributionTest], greedy: GreedyCheck, s: StatsSettings) -> tuple[Verdict, list[str]]:
    """PASS / FAIL / INCONCLUSIVE with one reason per finding (the evidence is in the tests)."""
    fail: list[str] = []
    unsure: list[str] = []
    ok: list[str] = []
    rejected = [t for t in tests if t.rejected]
    if rejected:
        worst = min(rejected, key=lambda t: t.p_holm)
        where = ", ".join(f"prompt {t.prompt} position {t.position}" for t in rejected[:6])
        more = f" (+{len(rejected) - 6} more)" if len(rejected) > 6 else ""
        fail.append(f"token distributions differ at temperature > 0 in {len(rejected)} of {len(tests)} tests "
                    f"({where}{more}); strongest: prompt {worst.prompt} position {worst.position}, Holm-adjusted "
                    f"p = {worst.p_holm:.3g}, TV distance {worst.tv:.2f}, Cramér's V {worst.cramers_v:.2f}")
    elif tests:
        weak = [t for t in tests if t.detectable_tv > s.detect_tv]
        if weak:
            worst = max(weak, key=lambda t: t.detectable_tv)
            need = max(t.samples_needed for t in weak)
            unsure.append(f"too few samples: {len(weak)} of {len(tests)} tests cannot detect a TV distance of "
                          f"{s.detect_tv:g} with {s.power:.0%} power (prompt {worst.prompt} position {worst.position} "
                          f"detects only {worst.detectable_tv:.2f} with {worst.n_reference}/{worst.n_candidate} "
                          f"samples); about {need} per side and prompt would (--samples {need})")
        else:
            ok.append(f"no distribution test rejects at family-wise alpha = {s.alpha:g} ({len(tests)} tests, Holm); "
                      f"each detects a TV distance >= {s.detect_tv:g} with power >= {s.power:.0%}")
    else:
        unsure.append("no distribution tests (no samples)")
    if greedy.rounds:
        if greedy.total == 0:
            unsure.append("greedy check: no greedy outputs recorded")
        elif greedy.mismatches > s.greedy_tolerance:
            first = next((e for e in greedy.examples if e.side == "candidate"), None)
            at = f"; first at token {first.first_divergence} of prompt {first.prompt}" if first else ""
            msg = (f"greedy outputs changed under speculation in batches mixed with sampled requests: "
                   f"{greedy.mismatches} of {greedy.total} differ from the reference's greedy output sent alone{at}")
            if greedy.control_total and greedy.control_mismatches > s.greedy_tolerance:
                unsure.append(msg + f"; but the reference itself changed {greedy.control_mismatches} of "
                              f"{greedy.control_total} in the same mixed batches (not batch-invariant), so "
                              "speculation is not shown to be the cause")
            else:
                ctrl = (f"; the reference kept {greedy.control_total - greedy.control_mismatches} of "
                        f"{greedy.control_total} in the same mixed batches") if greedy.control_total else ""
                fail.append(msg + ctrl)
        else:
            ok.append(f"greedy: {greedy.total - greedy.mismatches} of {greedy.total} identical to the reference "
                      "in batches mixed with sampled requests")
    if fail:
        return "FAIL", fail + unsure
    if unsure:
        return "INCONCLUSIVE", unsure + ok
    return "PASS", ok
