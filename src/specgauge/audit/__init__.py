"""``specgauge audit``: is a server's speculative decoding lossless? Evidence, not assumption.

Boundary: this package talks to two OpenAI-compatible servers — a candidate with speculation and a
reference (same binary and model) without — over HTTP, stores every completion it gets
(``store``), and judges them with scipy's tests (``stats``, ``analysis``). It never imports the CLI
and prints nothing (the CLI renders ``AuditResult``).

- ``prompts``: what is sampled (a built-in handful, or a workload's first requests)
- ``client``: one server: probe (``n``, token ids) and completions
- ``store``: ``samples.jsonl``, appended as answers arrive; resumable
- ``stats``: pooled token tables, chi-square tests of homogeneity, Holm, effect sizes, power and sample sizes
- ``analysis``: the distribution tests, the greedy-in-mixed-batches check, the verdict
- ``run``: config, servers, collection, ``audit.json``
"""

from specgauge.audit.run import AuditConfig, AuditResult, run_audit

__all__ = ["AuditConfig", "AuditResult", "run_audit"]
