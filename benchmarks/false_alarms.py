"""False alarms and detection of the field detectors, on the scripted server's fault mode.

1. A/A: ``--trials`` pairs of bench runs against two identical speculative servers (no fault), each
   pair compared as compare does; a detector that fires is a false alarm. Printed per detector: the
   count, the rate and its exact 95 % upper bound (Clopper–Pearson), beside the nominal alpha.
2. Each fault alone (``testing.faults``): one run against a server with only that fault on, compared
   with the same baseline; printed: which detectors fire (the one meant to, and any other).

Detectors (``docs/field-failures.md``): invalid structured outputs and stalled requests (Fisher one-
sided p < alpha, NO-GO in compare), acceptance collapse against the replay (named in the diagnosis),
TTFT lost in the prefill step (the split's finding).

Usage: python benchmarks/false_alarms.py [--trials 20] [--tool-calls 8 --plain 4 --json 12] [--concurrency 8]
(a quick look: --trials 3)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from scipy import stats

from specgauge.bench import BenchConfig, run_bench
from specgauge.report.runs import CompareRequest, compare_paths
from specgauge.testing.faults import Faults, fault_workload
from specgauge.testing.scripted_server import ScriptedServer

LAW = {"a": 0.002, "r": 0.0002, "b": 0.0002, "p": 1e-6, "q": 0.0005, "host[ngram]": 0.0002}
SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
DETECTORS = ("structured_outputs", "stalls", "acceptance_collapse", "ttft_prefill")
SINGLE = {
    "structured_outputs": Faults(corrupt_json_from_k=3),
    "stalls": Faults(stall_at_brace_s=0.35),
    "acceptance_collapse": Faults(collapse_past_context=2048),
    "ttft_prefill": Faults(draft_prefill_s_per_token=3e-5),
}


def fired(base: Path, cand: Path) -> dict[str, bool]:
    res = compare_paths(CompareRequest(baseline=base, candidate=cand))
    ov = res.overall
    assert ov is not None
    alpha = res.criteria.alpha
    return {
        "structured_outputs": ov.outputs is not None and ov.outputs.worse(alpha),
        "stalls": ov.stalls is not None and ov.stalls.rate.worse(alpha),
        "acceptance_collapse": res.diagnosis is not None and res.diagnosis.collapse is not None,
        "ttft_prefill": res.ttft is not None and res.ttft.finding == "prefill",
    }


def bench(url: str, requests: Path, out: Path, conc: int) -> Path:
    run_bench(BenchConfig(base_url=url, workload=[requests], output_dir=out, max_concurrency=conc, progress=False,
                          memory_interval=5))
    return out


def upper95(k: int, n: int) -> float:
    return 1.0 if k >= n else float(stats.beta.ppf(0.975, k + 1, n - k))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--tool-calls", type=int, default=8)
    ap.add_argument("--plain", type=int, default=4)
    ap.add_argument("--json", type=int, default=12)
    ap.add_argument("--concurrency", type=int, default=8)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="specgauge-false-alarms-"))
    requests, logged = fault_workload(tmp / "wl", a.tool_calls, a.plain, a.json)
    n_req = sum(1 for _ in requests.open(encoding="utf-8"))
    print(f"workload: {n_req} requests (tool calls {a.tool_calls}, plain {a.plain}, JSON {a.json}), "
          f"concurrency {a.concurrency}, ngram k=3; results in {tmp}")
    counts = dict.fromkeys(DETECTORS, 0)
    t0 = time.perf_counter()
    with ExitStack() as stack:
        s1, s2 = (stack.enter_context(ScriptedServer([logged], LAW, speculative_config=SPEC, faults=Faults())) for _ in range(2))
        for i in range(a.trials):
            f = fired(bench(s1.base_url, requests, tmp / f"aa{i}-a", a.concurrency), bench(s2.base_url, requests, tmp / f"aa{i}-b", a.concurrency))
            for d, v in f.items():
                counts[d] += v
            print(f"  A/A {i + 1}/{a.trials}: " + (", ".join(d for d, v in f.items() if v) or "nothing fired"), flush=True)
        base = tmp / "aa0-a"
        single: dict[str, dict[str, Any]] = {}
        for name, faults in SINGLE.items():
            with ScriptedServer([logged], LAW, speculative_config=SPEC, faults=faults) as bad:
                single[name] = fired(base, bench(bad.base_url, requests, tmp / f"fault-{name}", a.concurrency))
    print(f"\nA/A false alarms over {a.trials} pairs of identical servers (alpha 0.01 per test), {time.perf_counter() - t0:.0f} s in all:")
    print(f"  {'detector':<22}{'fired':>8}{'rate':>9}{'95 % upper':>12}")
    for d in DETECTORS:
        k = counts[d]
        print(f"  {d:<22}{k:>5}/{a.trials:<3}{100 * k / a.trials:>7.1f} %{100 * upper95(k, a.trials):>10.1f} %")
    print("\neach fault alone against the same baseline: detectors that fired")
    print(f"  {'fault':<22}" + "".join(f"{d:>22}" for d in DETECTORS))
    for name, f in single.items():
        print(f"  {name:<22}" + "".join(f"{('FIRED' if f[d] else '-') + (' (meant)' if d == name else ''):>22}" for d in DETECTORS))


if __name__ == "__main__":
    main()
