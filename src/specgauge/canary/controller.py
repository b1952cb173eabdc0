"""The weight schedule as a state machine: a judgement in, a decision out; the state survives restarts.

Rules (one call of ``Controller.decide`` per evaluation):
- a failed *critical* guardrail → **rollback** at once (weight 0);
- FAIL → one more failed evaluation; the ``failure_limit``-th of the run → **rollback**, else hold;
- INCONCLUSIVE → **hold**, the window keeps growing (never promotes);
- PASS → **promote** to the next step when that step is at most ``max_weight_without_speedup``, or
  when the speed metric showed a gain beyond the margin; otherwise **hold** (equivalent is safe, but
  no reason to move more traffic). A PASS at the last step → **complete** (the weight stays there;
  guardrails keep being checked and can still roll back).
A rollback is final for the run: the candidate gets no traffic until the state is reset.
The state is written atomically (temp file + rename) after every decision, so a restarted proxy
resumes at the same weight with the same count of failed evaluations, and stays rolled back.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from enum import Enum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from specgauge.canary.judge import GAIN, Judgement, Outcome
from specgauge.errors import UserError


class CanaryStateError(UserError):
    """state.json is unreadable or belongs to another canary."""


class Action(str, Enum):
    promote = "promote"
    hold = "hold"
    rollback = "rollback"
    complete = "complete"


class Decision(BaseModel):
    action: Action
    from_weight: float
    to_weight: float
    reason: str
    failed_evaluations: int
    new_window: bool  #: start a fresh window (after a promotion, a failure or a rollback)


class CanaryState(BaseModel):
    status: Literal["running", "complete", "rolled_back"] = "running"
    step: int = 0  #: index into the steps
    weight: float
    failed_evaluations: int = 0
    evaluations: int = 0
    rollback_reason: str | None = None
    fingerprint: str
    started_at: float
    updated_at: float


def fingerprint(baseline: str, candidate: str, steps: list[float], mode: str) -> str:
    """What makes a saved state belong to this canary (same upstreams, steps and mode)."""
    text = json.dumps([baseline, candidate, steps, mode])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class StateFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> CanaryState | None:
        if not self.path.exists():
            return None
        try:
            return CanaryState.model_validate_json(self.path.read_text(encoding="utf-8"))
        except (OSError, ValidationError, ValueError) as e:
            raise CanaryStateError(f"{self.path}: not a canary state ({str(e).splitlines()[0]}); "
                                   "remove it or pass --reset-state") from None

    def save(self, state: CanaryState) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(state.model_dump_json(indent=2))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


class Controller:
    def __init__(self, steps: list[float], failure_limit: int, max_weight_without_speedup: float, state: CanaryState) -> None:
        self.steps = steps
        self.failure_limit = failure_limit
        self.cap = max_weight_without_speedup
        self.state = state

    @classmethod
    def fresh(cls, steps: list[float], failure_limit: int, cap: float, fp: str) -> Controller:
        now = time.time()
        return cls(steps, failure_limit, cap, CanaryState(weight=steps[0], fingerprint=fp, started_at=now, updated_at=now))

    @property
    def weight(self) -> float:
        return self.state.weight

    @property
    def last_step(self) -> bool:
        return self.state.step >= len(self.steps) - 1

    def decide(self, j: Judgement) -> Decision:
        st = self.state
        w0 = st.weight
        st.evaluations += 1
        st.updated_at = time.time()
        if st.status == "rolled_back":
            return Decision(action=Action.hold, from_weight=w0, to_weight=w0, reason="rolled back earlier: the candidate gets no traffic",
                            failed_evaluations=st.failed_evaluations, new_window=True)
        why = "; ".join(j.reasons)
        if j.critical:
            return self._rollback(f"critical guardrail failed: {why}")
        if j.outcome is Outcome.FAIL:
            st.failed_evaluations += 1
            if st.failed_evaluations >= self.failure_limit:
                return self._rollback(f"{st.failed_evaluations} failed evaluations (--failure-limit {self.failure_limit}): {why}")
            return Decision(action=Action.hold, from_weight=w0, to_weight=w0, new_window=True,
                            failed_evaluations=st.failed_evaluations,
                            reason=f"failed evaluation {st.failed_evaluations} of {self.failure_limit} allowed: {why}")
        if j.outcome is Outcome.INCONCLUSIVE:
            return Decision(action=Action.hold, from_weight=w0, to_weight=w0, new_window=False,
                            failed_evaluations=st.failed_evaluations, reason=f"inconclusive, weight held: {why}")
        if self.last_step:
            if st.status != "complete":
                st.status = "complete"
                return Decision(action=Action.complete, from_weight=w0, to_weight=w0, new_window=True,
                                failed_evaluations=st.failed_evaluations,
                                reason=f"passed at the last step ({w0:g}%): roll-out complete; {why}")
            return Decision(action=Action.hold, from_weight=w0, to_weight=w0, new_window=True,
                            failed_evaluations=st.failed_evaluations, reason=f"complete; still passing: {why}")
        nxt = self.steps[st.step + 1]
        if nxt <= self.cap or j.speed == GAIN:
            st.step += 1
            st.weight = nxt
            basis = (f"{j.speed_metric} speedup: {j.speed}" if j.speed == GAIN
                     else f"safe (next step {nxt:g}% is within --max-weight-without-speedup {self.cap:g}%)")
            return Decision(action=Action.promote, from_weight=w0, to_weight=nxt, new_window=True,
                            failed_evaluations=st.failed_evaluations, reason=f"passed, {basis}: {why}")
        return Decision(action=Action.hold, from_weight=w0, to_weight=w0, new_window=False,
                        failed_evaluations=st.failed_evaluations,
                        reason=(f"passed, but steps above {self.cap:g}% need a measured speedup beyond the margin "
                                f"and {j.speed_metric or 'the speed metric'} shows {j.speed or 'nothing yet'}: holding at {w0:g}%"))

    def _rollback(self, reason: str) -> Decision:
        st = self.state
        w0 = st.weight
        st.status = "rolled_back"
        st.weight = 0.0
        st.rollback_reason = reason
        return Decision(action=Action.rollback, from_weight=w0, to_weight=0.0, reason=reason,
                        failed_evaluations=st.failed_evaluations, new_window=True)
