"""The console summary of one bench run, in ``vllm bench serve``'s layout (plus failures, acceptance
checks and memory), in the current language (``specgauge.i18n``). Summary dict in, text out.

Labels are padded by terminal cells (a Korean character takes two), so columns line up in both
languages; numbers are formatted the same way in both.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from rich.cells import cell_len

from specgauge.i18n import t, translate, use_lang
from specgauge.report.field_console import bench_lines

WIDTH = 50
LABEL = 40
MIB = 2**20


def _rule(title: str, c: str) -> str:
    pad = max(0, WIDTH - cell_len(title))
    return c * (pad // 2) + title + c * (pad - pad // 2)


def format_summary(s: dict[str, Any], lang: str | None = None) -> str:
    """The summary of ``summary.json`` as text; ``lang`` None: the current language."""
    with use_lang(lang) if lang else nullcontext():
        return _format(s)


def _format(s: dict[str, Any]) -> str:
    lines = [_rule(t("bench.title"), "=")]

    def row(label: str, v: Any, fmt: str = "") -> None:
        pad = " " * max(1, LABEL - cell_len(label) + 1)
        if v is None:
            lines.append(f"{label}{pad}{t('bench.na')}")
        else:
            lines.append(f"{label}{pad}{format(v, fmt) if fmt else v}")

    g = s["specgauge"]
    row(t("bench.successful"), s["completed"])
    row(t("bench.failed"), s["failed"])
    for k, n in sorted(g["latency"]["failures"].items()):
        row(f"  {k}:", n)
    if s.get("max_concurrency"):
        row(t("bench.max_conc"), s["max_concurrency"])
    if s.get("request_rate") != "inf":
        row(t("bench.rate"), s["request_rate"], ".2f")
    row(t("bench.duration"), s["duration"], ".2f")
    row(t("bench.in_tokens"), s["total_input_tokens"])
    row(t("bench.out_tokens"), s["total_output_tokens"])
    row(t("bench.req_tput"), s["request_throughput"], ".2f")
    if s.get("request_goodput") is not None:
        row(t("bench.goodput"), s["request_goodput"], ".2f")
    row(t("bench.out_tput"), s["output_throughput"], ".2f")
    row(t("bench.peak_tput"), s.get("max_output_tokens_per_s"), ".2f")
    row(t("bench.peak_conc"), s["max_concurrent_requests"])
    row(t("bench.total_tput"), s["total_token_throughput"], ".2f")
    heads = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}
    for name, short in heads.items():
        if f"mean_{name}_ms" not in s:
            continue
        lines.append(_rule(t(f"bench.h.{name}"), "-"))
        for k, v in s.items():
            if k.endswith(f"_{name}_ms") and not k.startswith("std_"):
                stat = k[: -len(f"_{name}_ms")]
                label = t(f"bench.stat.{stat}") if stat in ("mean", "median") else stat.upper()
                row(t("bench.stat", stat=label, short=short), v, ".2f")
        reason = g["latency"].get("reasons", {}).get(name)
        if reason:
            lines.append(t("bench.na_reason", reason=reason))
    acc = g["acceptance"]
    if "spec_decode_acceptance_rate" in s:
        lines.append(_rule(t("bench.h.spec"), "-"))
        row(t("bench.acc_rate"), s["spec_decode_acceptance_rate"], ".2f")
        row(t("bench.acc_len"), s["spec_decode_acceptance_length"], ".2f")
        row(t("bench.drafts"), s["spec_decode_num_drafts"])
        row(t("bench.draft_tokens"), s["spec_decode_draft_tokens"])
        row(t("bench.accepted"), s["spec_decode_accepted_tokens"])
        per = s.get("spec_decode_per_position_acceptance_rates") or []
        if per:
            lines.append(t("bench.per_pos"))
            for i, r in enumerate(per):
                row(t("bench.position", i=i), r * 100, ".2f")
        src = acc["counters"].get("source") if acc["counters"].get("available") else acc["per_request_total"].get("source")
        row(t("bench.source"), src)
        ag = acc.get("agreement", {})
        if ag.get("compared"):
            row(t("bench.agree"), t("bench.yes") if ag["equal"] else t("bench.no"))
    lines.extend(_replay_check(g.get("replay_check") or {}, "spec_decode_acceptance_rate" in s))
    lines.extend(bench_lines(g))
    _memory(g.get("memory") or {}, lines, row)
    for w in g.get("warnings", []):
        lines.append(t("bench.warning", text=translate(w)))
    lines.append("=" * WIDTH)
    return "\n".join(lines)


def _replay_check(rc: dict[str, Any], speculative: bool) -> list[str]:
    """One or two lines on ``stats.replay_check``: does the server accept what its outputs allow?"""
    def pct(x: Any) -> str:
        return f"{100 * x:.1f} %" if isinstance(x, (int, float)) else "n/a"

    if not rc.get("available"):
        return [t("rc.not_run", why=translate(rc["reason"]))] if speculative and rc.get("reason") else []
    n, unpaired = rc.get("requests", 0), rc.get("no_server_counts", 0)
    if rc.get("gap"):
        out = [t("rc.gap", method=rc.get("method"), k=rc.get("k"), summary=translate(rc.get("gap_summary") or ""))]
    elif n and unpaired == n:  # no per-request counts: "0 of n requests equal" would read as a failure
        key = "rc.totals" if rc.get("server_acceptance_rate") is not None else "rc.no_counts"
        out = [t(key, method=rc.get("method"), k=rc.get("k"), srv=pct(rc.get("server_acceptance_rate")),
                 rep=pct(rc.get("replay_acceptance_rate")))]
    else:
        out = [t("rc.match", method=rc.get("method"), k=rc.get("k"), m=rc.get("matching", 0), n=n,
                 srv=pct(rc.get("server_acceptance_rate")), rep=pct(rc.get("replay_acceptance_rate")))]
        if unpaired:
            out.append(t("rc.unpaired", n=unpaired))
    if rc.get("uncertain"):
        out.append(t("rc.uncertain", n=rc["uncertain"]))
    return out


def _memory(mem: dict[str, Any], lines: list[str], row: Any) -> None:
    dev = mem.get("device") or {}
    srv = mem.get("server") or {}
    devices = dev.get("devices") or {}
    if not devices and not srv:
        why = dev.get("reason")
        if why:
            lines.append(t("bench.mem.none", why=translate(why)))
        return
    lines.append(_rule(t("bench.h.memory"), "-"))
    if devices:
        row(t("bench.mem.tool"), dev.get("command") or dev.get("tool"))
    for d, v in sorted(devices.items(), key=lambda kv: int(kv[0])):
        if "peak_used_mib" in v:
            row(t("bench.mem.device", dev=d), t("bench.mem.device_total", used=f"{v['peak_used_mib']:.0f}", total=f"{v['total_mib']:.0f}"))
        if "peak_power_w" in v:
            row(t("bench.mem.power", dev=d), v["peak_power_w"], ".1f")
        if "mean_util_pct" in v:
            row(t("bench.mem.util", dev=d), v["mean_util_pct"], ".1f")
    kv = srv.get("kv") or {}
    if kv.get("peak_usage") is not None:
        row(t("bench.mem.kv_usage"), 100 * kv["peak_usage"], ".2f")
    if kv.get("capacity_bytes") is not None:
        row(t("bench.mem.kv_capacity"), kv["capacity_bytes"] / MIB, ",.1f")
    if kv.get("capacity_tokens") is not None:
        row(t("bench.mem.kv_tokens"), f"{int(kv['capacity_tokens']):,}")
    if kv.get("peak_bytes") is not None:
        row(t("bench.mem.kv_peak"), kv["peak_bytes"] / MIB, ".1f")
    w = srv.get("weights") or {}
    if w.get("target_bytes") is not None:
        row(t("bench.mem.target"), w["target_bytes"] / MIB, ".1f")
    if w.get("draft_bytes") is not None:
        row(t("bench.mem.draft"), w["draft_bytes"] / MIB, ".1f")
    if srv.get("draft_plus_kv_bytes") is not None:
        row(t("bench.mem.draft_kv"), srv["draft_plus_kv_bytes"] / MIB, ".1f")
