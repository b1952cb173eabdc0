"""The proxy's own ``/metrics`` (Prometheus text), in a registry of its own (no global state).

- ``specgauge_canary_weight_percent``: the candidate's current share (the mirrored share in shadow mode)
- ``specgauge_canary_state{state}``: 1 for the current state (running, complete, rolled_back)
- ``specgauge_canary_failed_evaluations``: failed evaluations so far
- ``specgauge_canary_decisions_total{action}``: promote / hold / rollback / complete
- ``specgauge_canary_requests_total{upstream,role,outcome}``: outcome ok | failed | client_gone | client_error
- ``specgauge_canary_retried_on_baseline_total``: candidate requests that failed before their first
  byte and were served by the baseline instead (the client saw no error)
- ``specgauge_canary_ttft_seconds{upstream}``, ``specgauge_canary_e2e_seconds{upstream}``: histograms
- ``specgauge_canary_candidate_acceptance_rate``: accepted / drafted tokens in the last judged window
- ``specgauge_canary_greedy_exact_match_ratio``: exact-match rate of greedy output pairs, whole run
- ``specgauge_canary_shadow_skipped``: mirrored copies not sent so far (too many in flight)
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
STATES = ("running", "complete", "rolled_back")


class ProxyMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.weight = Gauge("specgauge_canary_weight_percent", "Candidate share of traffic (mirrored share in shadow mode), percent", registry=r)
        self.state = Gauge("specgauge_canary_state", "1 for the canary's current state", ["state"], registry=r)
        self.failed_evaluations = Gauge("specgauge_canary_failed_evaluations", "Failed evaluations so far", registry=r)
        self.decisions = Counter("specgauge_canary_decisions", "Decisions taken", ["action"], registry=r)
        self.requests = Counter("specgauge_canary_requests", "Proxied requests by upstream, role and outcome",
                                ["upstream", "role", "outcome"], registry=r)
        self.retried = Counter("specgauge_canary_retried_on_baseline", "Candidate requests failed before the first byte, served by the baseline", registry=r)
        self.ttft = Histogram("specgauge_canary_ttft_seconds", "Time to first output chunk, per upstream", ["upstream"], buckets=_BUCKETS, registry=r)
        self.e2e = Histogram("specgauge_canary_e2e_seconds", "Request end-to-end latency, per upstream", ["upstream"], buckets=_BUCKETS, registry=r)
        self.acceptance = Gauge("specgauge_canary_candidate_acceptance_rate", "Candidate draft acceptance (accepted/drafted) in the last judged window", registry=r)
        self.exact_match = Gauge("specgauge_canary_greedy_exact_match_ratio", "Exact-match rate of greedy output pairs over the run", registry=r)
        self.shadow_skipped = Gauge("specgauge_canary_shadow_skipped", "Mirrored copies not sent so far: too many in flight", registry=r)
        self.acceptance.set(float("nan"))
        self.exact_match.set(float("nan"))

    def set_state(self, state: str, weight: float, failed: int) -> None:
        for s in STATES:
            self.state.labels(state=s).set(1.0 if s == state else 0.0)
        self.weight.set(weight)
        self.failed_evaluations.set(failed)

    def render(self) -> bytes:
        return generate_latest(self.registry)
