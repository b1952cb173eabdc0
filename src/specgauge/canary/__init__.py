"""``specgauge canary``: a reverse proxy that sends a growing, sticky share of live traffic to the
speculative deployment, judges it against the baseline each interval, and falls back on its own.

Boundary: this package talks HTTP to two OpenAI-compatible upstreams and to its clients, and
writes its own files; it reuses the load generator's stream parsing and records, the dialects'
counters and ``stats``, and knows nothing about models, drafters or the CLI.

- ``config``: settings (``CanaryConfig``); ``routing``: sticky consistent hashing;
- ``observe``: the parsed copy of one response -> ``RequestRecord``; ``window``: one evaluation window;
- ``judge``: guardrails -> relative judge -> inconclusive -> score (pure);
- ``controller``: the weight schedule as a state machine, persisted; ``eventlog``: decisions.jsonl;
- ``proxy``: the aiohttp server and upstream client; ``metrics``: the proxy's /metrics;
- ``service``: ties them together per interval; ``summary``: the final report; ``run``: foreground / thread;
- ``report``: a canary run's section in ``specgauge report``.
"""

from specgauge.canary.config import CanaryConfig, Guardrails, JudgeConfig
from specgauge.canary.run import CanaryThread, run_canary
from specgauge.canary.service import CanaryError, CanaryService
from specgauge.canary.summary import CanaryResult, format_summary

__all__ = ["CanaryConfig", "CanaryError", "CanaryResult", "CanaryService", "CanaryThread", "Guardrails", "JudgeConfig",
           "format_summary", "run_canary"]
