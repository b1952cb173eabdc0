"""Results of other benchmark tools as specgauge runs, for ``compare`` and ``report``.

- ``vllm bench serve --save-result [--save-detailed]`` JSON (``vllm/benchmarks/serve.py``): the
  per-request lists ``ttfts`` / ``itls`` / ``latencies`` / ``output_lens`` / ``errors`` (saved with
  ``--save-detailed``) and the ``spec_decode_*`` keys (its own ``/metrics`` diff: drafts, draft and
  accepted tokens, per-position acceptance rates);
- AIPerf's ``profile_export.jsonl`` (one ``{"metadata", "metrics", "error"}`` record per request) or
  the artifacts directory holding it;
- GuideLLM's benchmarks report JSON (``{"benchmarks": [...]}``, each with ``requests.successful`` /
  ``errored`` / ``incomplete``); a report of several benchmarks needs ``FILE#N`` to pick one.

What they cannot carry is said, not filled in: none logs per-request draft counts (acceptance
comes from vLLM's counter diff, else is unknown); vLLM's and GuideLLM's requests carry no id shared
between runs, so a comparison of two of them is unpaired (``stats.compare`` says so); streamed
chunks carry no token counts, so the output tokens are spread over the chunks (``spread``:
approximate ITL); none records the speculative config, so ``calibrate --from-runs`` cannot use them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from specgauge.errors import UserError
from specgauge.i18n import en
from specgauge.records import Chunk, RequestRecord, TokenCountSource

#: why ``calibrate --from-runs`` cannot fit a foreign result
NOT_CALIBRATABLE = ("records no speculative config (method, k) nor the server's step counts per run; "
                    "calibrate fits specgauge bench runs (specgauge bench / sweep) of the same server")


class ForeignError(ValueError):
    pass


class NotCalibratable(UserError):
    pass


def kind_of(path: Path) -> str | None:
    """'vllm-bench' | 'aiperf' | 'guidellm' for another tool's result file (or AIPerf artifacts dir), else None."""
    p = Path(str(path).rsplit("#", 1)[0]) if "#" in Path(path).name else Path(path)
    if p.is_dir():
        p = p / "profile_export.jsonl"
        if not p.is_file() or (p.parent / "results.jsonl").exists():
            return None
    if not p.is_file():
        return None
    try:
        if p.suffix == ".jsonl":
            with open(p, encoding="utf-8") as f:
                first = next((line for line in f if line.strip()), "")
            return "aiperf" if first and is_aiperf_record(json.loads(first)) else None
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return "vllm-bench" if is_vllm_bench(data) else "guidellm" if is_guidellm(data) else None


def refuse_calibration(paths: list[Path]) -> None:
    """``calibrate --from-runs`` on another tool's result: say what it lacks, in one line."""
    for p in paths:
        kind = kind_of(p)
        if kind is not None:
            raise NotCalibratable(f"{p}: a {kind} result {NOT_CALIBRATABLE}; it can go to compare and report")


def _digest(path: Path) -> str:
    return hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]


def _chunks(ttft: float | None, gaps: list[float] | None, out_tokens: int | None) -> tuple[list[Chunk], TokenCountSource]:
    """Chunk arrivals from a TTFT and the gaps between chunks; the output tokens spread over them."""
    if ttft is None or not out_tokens:
        return [], TokenCountSource.none
    times = [ttft]
    for g in gaps or []:
        times.append(times[-1] + g)
    n = len(times)
    if out_tokens < n:  # more chunks than tokens (empty chunks counted): one token per chunk up to the total
        return [Chunk(t, 1 if i < out_tokens else 0) for i, t in enumerate(times)], TokenCountSource.spread
    base, extra = divmod(out_tokens, n)
    return [Chunk(t, base + (1 if i < extra else 0)) for i, t in enumerate(times)], TokenCountSource.spread


def _record(rid: str, i: int, sent: float, epoch0: float, ok: bool, error: str | None, ttft: float | None,
            e2e: float | None, gaps: list[float] | None, prompt: int | None, out: int | None, text: str = "",
            http: int | None = None) -> RequestRecord:
    chunks, src = _chunks(ttft, gaps, out) if ok else ([], TokenCountSource.none)
    return RequestRecord(id=rid, index=i, scheduled_s=sent, sent_s=sent, started_at=epoch0 + sent, ok=ok,
                         error=error, http_status=http, ttft_s=ttft if ok else None, e2e_s=e2e if ok else None,
                         elapsed_s=max(0.0, e2e or 0.0), chunks=chunks, token_counts=src, prompt_tokens=prompt,
                         output_tokens=out if ok else None, text=text or "")


# ---------------------------------------------------------------- vLLM bench serve


def is_vllm_bench(data: Any) -> bool:
    return isinstance(data, dict) and "request_throughput" in data and ("completed" in data or "num_prompts" in data) \
        and ("backend" in data or "endpoint_type" in data or "mean_ttft_ms" in data or "duration" in data)


def vllm_bench(data: dict[str, Any], path: Path) -> tuple[list[RequestRecord], dict[str, Any], dict[str, Any], list[str]]:
    """(records, summary, run, notes) of a ``vllm bench serve --save-result`` JSON."""
    notes: list[str] = []
    lat = data.get("latencies")
    if not isinstance(lat, list) or not lat:
        raise ForeignError(f"{path}: a vllm bench serve result without per-request data: rerun it with --save-detailed "
                           "(it keeps only summary percentiles otherwise, which compare cannot test)")
    n = len(lat)
    lists = {k: data.get(k) if isinstance(data.get(k), list) and len(data[k]) == n else [None] * n
             for k in ("ttfts", "itls", "output_lens", "input_lens", "errors", "generated_texts", "start_times")}
    starts = [s for s in lists["start_times"] if isinstance(s, (int, float))]
    t0 = min(starts) if starts else 0.0
    tag = _digest(path)
    recs = []
    for i in range(n):
        err = lists["errors"][i] or None
        start = lists["start_times"][i]
        sent = float(start) - t0 if isinstance(start, (int, float)) else 0.0
        recs.append(_record(f"vllm-bench:{tag}:{i}", i, sent, 0.0, not err, err, lists["ttfts"][i], lat[i],
                            lists["itls"][i], lists["input_lens"][i], lists["output_lens"][i],
                            lists["generated_texts"][i] or ""))
    notes.append(en("foreign.n.vllm_unpaired", file=path.name))
    notes.append(en("foreign.n.vllm_itl", file=path.name))
    summary: dict[str, Any] = {"duration": data.get("duration"), "max_concurrent_requests": data.get("max_concurrent_requests")}
    if data.get("spec_decode_num_drafts") is not None:
        drafts = int(data["spec_decode_num_drafts"])
        per_pos = [round(r * drafts) for r in data.get("spec_decode_per_position_acceptance_rates") or []]
        summary["spec_decode_draft_tokens"] = data.get("spec_decode_draft_tokens")
        summary["specgauge"] = {"acceptance": {"counters": {
            "available": True, "drafts": drafts, "draft_tokens": data.get("spec_decode_draft_tokens"),
            "accepted_tokens": data.get("spec_decode_accepted_tokens"), "accepted_per_pos": per_pos or None,
            "source": en("foreign.n.vllm_counts")}}}
    else:
        summary["specgauge"] = {"acceptance": {"counters": {"available": False, "reason": en("foreign.n.vllm_no_counts")}}}
    run = {"config": {"max_concurrency": data.get("max_concurrency"), "model": data.get("model_id"),
                      "request_rate": data.get("request_rate"), "num_prompts": data.get("num_prompts")},
           "dialect": "vllm", "tool": "vllm bench serve"}
    return recs, summary, run, notes


# ---------------------------------------------------------------- AIPerf


def is_aiperf_record(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) and "metrics" in obj \
        and ("x_request_id" in obj["metadata"] or "request_start_ns" in obj["metadata"])


def _mval(metrics: dict[str, Any], key: str, scale: float = 1.0) -> Any:
    v = (metrics or {}).get(key)
    v = v.get("value") if isinstance(v, dict) else v
    if isinstance(v, list):
        return [x * scale for x in v]
    return v * scale if isinstance(v, (int, float)) else None


def aiperf(lines: list[tuple[int, Any]], path: Path) -> tuple[list[RequestRecord], dict[str, Any], dict[str, Any], list[str]]:
    recs: list[RequestRecord] = []
    t0 = min((o["metadata"].get("request_start_ns") or 0 for _, o in lines), default=0)
    for i, (n, o) in enumerate(lines):
        if not is_aiperf_record(o):
            raise ForeignError(f"{path}:{n}: not an AIPerf profile_export record (no metadata / metrics)")
        md, m, err = o["metadata"], o.get("metrics") or {}, o.get("error")
        rid = (f"{md['conversation_id']}:{md.get('turn_index', 0)}" if md.get("conversation_id")
               else str(md.get("x_request_id") or i))
        start = md.get("request_start_ns")
        sent = (start - t0) / 1e9 if isinstance(start, int) else 0.0
        ttft = _mval(m, "time_to_first_token", 1e-3)
        e2e = _mval(m, "request_latency", 1e-3)
        if e2e is None and isinstance(md.get("request_end_ns"), int) and isinstance(start, int):
            e2e = (md["request_end_ns"] - start) / 1e9
        gaps = _mval(m, "inter_chunk_latency", 1e-3)
        out = _mval(m, "output_token_count")
        prompt = _mval(m, "input_sequence_length") or _mval(m, "error_isl")
        http = err.get("code") if isinstance(err, dict) and isinstance(err.get("code"), int) else None
        msg = f"{err.get('type', 'error')}: {err.get('message', '')}" if isinstance(err, dict) else None
        recs.append(_record(rid, i, sent, (t0 or 0) / 1e9, err is None, msg, ttft, e2e,
                            gaps if isinstance(gaps, list) else None, prompt, int(out) if out is not None else None,
                            http=http))
    notes = [en("foreign.n.aiperf_paired", file=path.name), en("foreign.n.no_counts", file=path.name, tool="AIPerf"),
             en("foreign.n.aiperf_itl", file=path.name)]
    return recs, {}, {"config": {}, "tool": "aiperf"}, notes


# ---------------------------------------------------------------- GuideLLM


def is_guidellm(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and \
        all(isinstance(b, dict) and "requests" in b for b in data["benchmarks"][:1])


def guidellm(data: dict[str, Any], path: Path, pick: int | None) -> tuple[list[RequestRecord], dict[str, Any], dict[str, Any], list[str]]:
    benches = data["benchmarks"]
    if not benches:
        raise ForeignError(f"{path}: a GuideLLM report without benchmarks")
    if pick is None and len(benches) > 1:
        names = ", ".join(f"#{i + 1} {_gl_name(b)}" for i, b in enumerate(benches))
        raise ForeignError(f"{path}: a GuideLLM report of {len(benches)} benchmarks; pick one as {path.name}#N ({names})")
    idx = (pick or 1) - 1
    if not 0 <= idx < len(benches):
        raise ForeignError(f"{path}#{pick}: the report has {len(benches)} benchmark(s)")
    b = benches[idx]
    reqs = b.get("requests") or {}
    rows = [(True, r) for r in reqs.get("successful") or []] + [(False, r) for r in reqs.get("errored") or []] + \
        [(False, r) for r in reqs.get("incomplete") or []]
    starts = [r.get("request_start_time") for _, r in rows if isinstance(r.get("request_start_time"), (int, float))]
    t0 = min(starts) if starts else 0.0
    recs = []
    for i, (ok, r) in enumerate(sorted(rows, key=lambda x: x[1].get("request_start_time") or 0)):
        st = r.get("request_start_time")
        ttft = r.get("time_to_first_token_ms")
        recs.append(_record(str(r.get("request_id") or i), i, (st - t0) if isinstance(st, (int, float)) else 0.0, t0, ok,
                            None if ok else "errored or incomplete in GuideLLM", ttft / 1000 if isinstance(ttft, (int, float)) else None,
                            r.get("request_latency"), None, r.get("prompt_tokens"), r.get("output_tokens"), r.get("output") or ""))
    for rec in recs:  # GuideLLM keeps first/last token times, not each chunk's
        if rec.ok and rec.ttft_s is not None and rec.e2e_s is not None and rec.output_tokens and rec.output_tokens > 1:
            rec.chunks = [Chunk(rec.ttft_s, 1), Chunk(rec.e2e_s, rec.output_tokens - 1)]
    notes = [en("foreign.n.guidellm_unpaired", file=path.name, bench=_gl_name(b)), en("foreign.n.guidellm_itl", file=path.name),
             en("foreign.n.no_counts", file=path.name, tool="GuideLLM")]
    conc = ((b.get("config") or {}).get("strategy") or {}).get("streams")
    return recs, {}, {"config": {"max_concurrency": conc if isinstance(conc, int) else None}, "tool": "guidellm"}, notes


def _gl_name(b: dict[str, Any]) -> str:
    strat = (b.get("config") or {}).get("strategy") or {}
    kind = strat.get("type_") or strat.get("type") or "?"
    rate = strat.get("rate", strat.get("streams"))
    return f"{kind}" + (f"@{rate}" if rate is not None else "")


def read_jsonl(path: Path) -> list[tuple[int, Any]]:
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    out.append((n, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise ForeignError(f"{path}:{n}: not JSON ({e.msg})") from None
    return out
