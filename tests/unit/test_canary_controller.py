"""The weight schedule's state machine (promote / hold / rollback / complete, the failure limit, the
margin rule), its restart-safe state file, and the decision log's append/read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgauge.canary.controller import Action, CanaryStateError, Controller, StateFile, fingerprint
from specgauge.canary.eventlog import DecisionLog, read_events
from specgauge.canary.judge import EQUIVALENT, GAIN, Judgement, Outcome

STEPS = [1.0, 5.0, 25.0, 50.0, 100.0]


def j(outcome: Outcome, critical: bool = False, speed: str | None = EQUIVALENT) -> Judgement:
    return Judgement(outcome=outcome, critical=critical, speed=speed, speed_metric="tpot", reasons=[f"because {outcome.value}"])


def ctl(limit: int = 3, cap: float = 50.0) -> Controller:
    return Controller.fresh(STEPS, limit, cap, "fp")


def test_passes_climb_to_the_cap_then_need_a_gain() -> None:
    c = ctl(cap=50.0)
    assert c.weight == 1.0
    seen = []
    for _ in range(3):
        d = c.decide(j(Outcome.PASS))
        seen.append((d.action, d.to_weight))
    assert seen == [(Action.promote, 5.0), (Action.promote, 25.0), (Action.promote, 50.0)]
    d = c.decide(j(Outcome.PASS, speed=EQUIVALENT))
    assert d.action is Action.hold and c.weight == 50.0 and not d.new_window  # keeps gathering evidence
    assert "need a measured speedup" in d.reason
    d = c.decide(j(Outcome.PASS, speed=GAIN))
    assert d.action is Action.promote and d.to_weight == 100.0 and "speedup" in d.reason
    d = c.decide(j(Outcome.PASS, speed=None))
    assert d.action is Action.complete and c.state.status == "complete"
    d = c.decide(j(Outcome.PASS))
    assert d.action is Action.hold and c.state.status == "complete"


def test_inconclusive_holds_and_keeps_the_window() -> None:
    c = ctl()
    for _ in range(5):
        d = c.decide(j(Outcome.INCONCLUSIVE))
        assert d.action is Action.hold and not d.new_window and c.weight == 1.0
    assert c.state.failed_evaluations == 0 and c.state.evaluations == 5


def test_failure_limit_rolls_back_and_rollback_is_final() -> None:
    c = ctl(limit=2)
    c.decide(j(Outcome.PASS))
    d = c.decide(j(Outcome.FAIL))
    assert d.action is Action.hold and d.failed_evaluations == 1 and d.new_window
    c.decide(j(Outcome.PASS))  # a pass in between does not forgive the first failure
    d = c.decide(j(Outcome.FAIL))
    assert d.action is Action.rollback and d.to_weight == 0.0 and c.weight == 0.0
    assert "2 failed evaluations (--failure-limit 2)" in d.reason and c.state.status == "rolled_back"
    d = c.decide(j(Outcome.PASS, speed=GAIN))
    assert d.action is Action.hold and c.weight == 0.0


def test_critical_guardrail_rolls_back_at_once() -> None:
    c = ctl(limit=5)
    c.decide(j(Outcome.PASS))
    d = c.decide(j(Outcome.FAIL, critical=True))
    assert d.action is Action.rollback and d.from_weight == 5.0 and "critical guardrail" in d.reason
    assert c.state.rollback_reason == d.reason


def test_state_survives_a_restart(tmp_path: Path) -> None:
    f = StateFile(tmp_path / "state.json")
    c = ctl(limit=3)
    c.decide(j(Outcome.PASS))
    c.decide(j(Outcome.FAIL))
    f.save(c.state)
    again = Controller(STEPS, 3, 50.0, f.load())  # a new process
    assert again.weight == 5.0 and again.state.failed_evaluations == 1 and again.state.step == 1
    again.decide(j(Outcome.FAIL))
    d = again.decide(j(Outcome.FAIL))
    assert d.action is Action.rollback  # the count carried over: 3 failures in all
    f.save(again.state)
    assert Controller(STEPS, 3, 50.0, f.load()).weight == 0.0
    assert not (tmp_path / "state.json.tmp").exists()
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(CanaryStateError, match="--reset-state"):
        f.load()
    assert StateFile(tmp_path / "none.json").load() is None
    assert fingerprint("a", "b", STEPS, "live") != fingerprint("a", "b", STEPS, "shadow")


def test_decision_log_appends_and_survives_a_torn_line(tmp_path: Path) -> None:
    p = tmp_path / "decisions.jsonl"
    log = DecisionLog(p).open()
    log.append({"event": "start", "t": 1.0, "value": float("inf"), "path": tmp_path / "x", "judgement": j(Outcome.PASS)})
    log.append({"event": "evaluation", "t": 2.0})
    log.close()
    with open(p, "a") as fh:
        fh.write('{"event": "evalu')  # a crash mid-write
    log = DecisionLog(p).open()
    assert log.seq == 2
    log.append({"event": "stop", "t": 3.0})
    log.close()
    events = read_events(p)
    assert [e["event"] for e in events] == ["start", "evaluation", "stop"]
    assert [e["seq"] for e in events] == [0, 1, 2]
    assert events[0]["value"] is None and events[0]["path"] == "x" and events[0]["judgement"]["outcome"] == "PASS"
    assert all(json.loads(line) for line in p.read_text().splitlines())
