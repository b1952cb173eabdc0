"""GO / NO-GO / INCONCLUSIVE with reasons, SLO parsing, exit codes, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specgauge.cli import app
from specgauge.records import ResultsFile
from specgauge.stats.verdict import RunInfo, Verdict, VerdictCriteria, VerdictError, decide, parse_slo
from tests.unit.test_compare import rec, run

INFO = (RunInfo(label="base", path="a", kind="bench"), RunInfo(label="cand", path="b", kind="bench"))


def verdict(base, cand, **kw):  # type: ignore[no-untyped-def]
    crit = VerdictCriteria(**{k: v for k, v in kw.items() if k in VerdictCriteria.model_fields})
    rest = {k: v for k, v in kw.items() if k not in VerdictCriteria.model_fields}
    return decide(base, cand, *INFO, criteria=crit, **rest)


def test_twice_as_fast_is_go_with_ci_around_2() -> None:
    res = verdict(run(), run(scale=0.5), temperature=0.0)
    v = res.verdict.overall
    assert v.verdict is Verdict.GO and res.verdict.exit_code == 0
    assert "faster" in v.reasons[0] and "2.000×" in v.reasons[0]
    assert res.overall.speedup.low == pytest.approx(2.0)  # type: ignore[union-attr]
    assert set(res.verdict.segments) == {"a", "b"} and all(s.verdict is Verdict.GO for s in res.verdict.segments.values())


def test_same_distribution_is_inconclusive_with_an_n_estimate() -> None:
    res = verdict(run(seed=0, noise=0.3), [r.model_copy(update={"id": f"r{i}"}) for i, r in enumerate(run(seed=1, noise=0.3))])
    v = res.verdict.overall
    assert v.verdict is Verdict.INCONCLUSIVE and res.verdict.exit_code == 3
    assert v.more_requests is not None and v.more_requests > 0
    assert "more paired requests" in (v.more_requests_reason or "")


def test_identical_runs_are_inconclusive_and_say_more_requests_will_not_help() -> None:
    base = run()
    res = verdict(base, [r.model_copy() for r in base])
    v = res.verdict.overall
    assert v.verdict is Verdict.INCONCLUSIVE
    assert v.more_requests is None and "no difference" in (v.more_requests_reason or "")


def test_n_estimate_scales_the_ci_half_width_as_one_over_sqrt_n() -> None:
    from specgauge.stats.verdict import _needed

    # half-width 0.02, effect 0.01 from the threshold: n' = n·(h/d)² = 4n, so 3n more
    assert _needed(100, 1.01, 0.99, 1.03, 1.0) == 300
    assert _needed(100, 1.02, 1.00, 1.04, 1.0) == 0
    assert _needed(100, 1.0, 0.98, 1.02, 1.0) is None  # no effect: no n settles it
    assert _needed(50, -3.0, -9.0, 3.0, 0.0) == 150  # latency delta: h = 6, d = 3


def test_slo_violated_is_no_go_with_the_reason() -> None:
    res = verdict(run(), run(scale=0.5), slo_ms=parse_slo("e2e_p95_ms=100,ttft_p95_ms=1000"))
    v = res.verdict.overall
    assert v.verdict is Verdict.NO_GO and res.verdict.exit_code == 1
    assert any("misses the SLO E2E latency p95 ≤ 100 ms" in r for r in v.reasons)
    assert any("meets the SLO TTFT p95" in n for n in v.notes)


def test_slower_candidate_is_no_go() -> None:
    res = verdict(run(), run(scale=1.3))
    assert res.verdict.overall.verdict is Verdict.NO_GO
    assert "slower" in res.verdict.overall.reasons[0]


def test_more_failures_is_no_go() -> None:
    cand = run(scale=0.5)
    for i in range(0, 200, 5):
        cand[i] = rec(i, 1.0, ok=False, segment=cand[i].segment)
    res = verdict(run(), cand)
    v = res.verdict.overall
    assert v.verdict is Verdict.NO_GO and any("more requests fail" in r for r in v.reasons)


def test_divergence_at_temperature_0_beyond_tolerance_is_no_go_within_is_a_note() -> None:
    base = run(n=100)
    cand = run(n=100, scale=0.5)
    cand[7] = cand[7].model_copy(update={"text": "changed"})
    ok = verdict(base, cand, temperature=0.0)
    assert ok.verdict.overall.verdict is Verdict.GO
    assert any("rare divergence: 1 of 100" in n for n in ok.verdict.overall.notes)
    for i in (8, 9, 10):
        cand[i] = cand[i].model_copy(update={"text": "changed"})
    bad = verdict(base, cand, temperature=0.0)
    assert bad.verdict.overall.verdict is Verdict.NO_GO
    assert any("outputs changed: 4 of 100" in r for r in bad.verdict.overall.reasons)


def test_too_few_pairs_is_inconclusive() -> None:
    res = verdict(run(n=4), run(n=4, scale=0.5))
    v = res.verdict.overall
    assert v.verdict is Verdict.INCONCLUSIVE and v.more_requests == 6


def test_parse_slo() -> None:
    assert parse_slo("e2e_p95_ms=500, ttft_p95_ms=200,tpot_p50_ms=20") == {"e2e_p95": 500.0, "ttft_p95": 200.0, "tpot_p50": 20.0}
    assert parse_slo(None) == {}
    for bad, msg in (("e2e=5", "name a statistic"), ("e2e_p95_ms", "NAME=MILLISECONDS"), ("e2e_p95_ms=x", "not a number"),
                     ("e2e_p95_ms=-1", "> 0")):
        with pytest.raises(VerdictError, match=msg):
            parse_slo(bad)


def _dir(d: Path, records) -> Path:  # type: ignore[no-untyped-def]
    d.mkdir()
    f = ResultsFile(d / "results.jsonl").open()
    for r in records:
        f.append(r)
    f.close()
    return d


def test_cli_exit_codes_and_json(tmp_path: Path) -> None:
    a, b = _dir(tmp_path / "a", run(n=40)), _dir(tmp_path / "b", run(n=40, scale=0.5))
    cli = CliRunner()
    go = cli.invoke(app, ["compare", str(a), str(b), "--json"])
    assert go.exit_code == 0, go.output
    data = json.loads(go.stdout)
    assert data["kind"] == "specgauge.compare" and data["verdict"]["overall"]["verdict"] == "GO"
    nogo = cli.invoke(app, ["compare", str(a), str(b), "--slo", "e2e_p95_ms=1"])
    assert nogo.exit_code == 1 and "NO-GO" in nogo.stdout and "misses the SLO" in nogo.stdout
    same = cli.invoke(app, ["compare", str(a), str(a)])
    assert same.exit_code == 3 and "INCONCLUSIVE" in same.stdout
    bad = cli.invoke(app, ["compare", str(a), str(b), "--slo", "latency=5"])
    assert bad.exit_code == 2 and "--slo" in bad.output
    missing = cli.invoke(app, ["compare", str(a), str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "nope: no such file" in missing.output


def test_too_few_pairs_never_gives_a_ci_based_verdict() -> None:
    """Two pairs make a degenerate bootstrap 'interval': no NO-GO (or GO) may rest on it."""
    res = verdict(run(n=2), run(n=2, scale=2.0), temperature=0.0)  # clearly slower, but only 2 pairs
    v = res.verdict.overall
    assert v.verdict is Verdict.INCONCLUSIVE
    assert any("too few pairs" in n for n in v.notes)
    slow = verdict(run(), run(scale=2.0), temperature=0.0)  # the same with 200 pairs is NO-GO
    assert slow.verdict.overall.verdict is Verdict.NO_GO
