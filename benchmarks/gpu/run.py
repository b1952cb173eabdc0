"""specgauge on a GPU, in one run: the embedded engine on CUDA, calibrated, predicted and swept.

On a fresh machine with torch and transformers (``benchmarks/gpu/run.sh`` installs the rest from
wheels carried beside it, see ``docs/calibration-gpu.md``):

1. two random-weight model directories (``nn.weights.RANDOM_WEIGHTS_KEY``: weights made on the GPU in
   seconds, seeded, the same in every server): a Llama-3-8B-shaped target and a Llama-3.2-1B-shaped
   draft, both with the shipped tokenizer (``--shape tiny``: small shapes, for the CPU test);
2. the workload: the shipped sample's prompts (their token ids), answered greedily by the target in
   this process, ``ignore_eos`` so every output is ``--max-tokens`` long — the logged outputs the replay
   needs (a random target's text is noise; its token ids are what the replay theorem asks for);
3. ``calibrate`` planned for concurrency 1–64 and k up to 8, n-gram and the draft model, with
   synthetic-acceptance points (``--synthetic-acceptance``) reaching past the knee, each config on its own
   ``specgauge serve --device cuda --dtype bfloat16`` server;
4. a sweep of n-gram and the draft model at ``--k`` and ``--concurrency`` (each cell sends
   max(``--min-prompts``, 2·C) requests), predicted from the profile beside measured (compare's
   speedup), per cell, and each config's crossover from both sides;
5. one JSON file (``OUT/gpu_run.json``): device, versions, timings, the profile, the proposed
   identifying points, the cells and the crossovers. It reports; it asserts nothing.

    benchmarks/gpu/run.sh --out results/gpu                    # on the GPU machine (about 10 minutes)
    python benchmarks/gpu/run.py --shape tiny --device cpu --concurrency 1,2 --k 2 --max-tokens 8 \\
        --num-prompts 4 --min-prompts 2 --out /tmp/gpu-cpu      # the CPU test (tests/integration/test_gpu_script.py)
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

#: (hidden, layers, heads, kv heads, intermediate, vocab, rope theta, tied embeddings)
SHAPES: dict[str, dict[str, tuple[int, int, int, int, int, int, float, bool]]] = {
    "8b": {"target": (4096, 32, 32, 8, 14336, 128256, 500000.0, False),  # Llama-3-8B
           "draft": (2048, 16, 32, 8, 8192, 128256, 500000.0, True)},  # Llama-3.2-1B
    "tiny": {"target": (128, 2, 4, 2, 256, 4096, 10000.0, True), "draft": (64, 1, 2, 1, 128, 4096, 10000.0, True)},
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "tokenizer.model")


def model_dir(out: Path, role: str, shape: tuple[int, int, int, int, int, int, float, bool], seed: int) -> Path:
    """A model directory without weights: the shipped tiny target's config with this shape, its tokenizer."""
    from specgauge.models import target_dir
    from specgauge.nn.weights import RANDOM_WEIGHTS_KEY

    src = Path(target_dir())
    d = out / "models" / role
    d.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text(encoding="utf-8"))
    hidden, layers, heads, kv, inter, vocab, theta, tied = shape
    cfg.update(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
               intermediate_size=inter, vocab_size=vocab, head_dim=hidden // heads, tie_word_embeddings=tied,
               max_position_embeddings=4096, rope_parameters={"rope_theta": theta, "rope_type": "default"},
               **{RANDOM_WEIGHTS_KEY: {"seed": seed}})
    cfg["_name_or_path"] = f"specgauge/random-{role}"
    (d / "config.json").write_text(json.dumps(cfg, indent=1), encoding="utf-8")
    for f in TOKENIZER_FILES:
        if (src / f).exists():
            shutil.copy(src / f, d / f)
    return d


def log_workload(out: Path, target: Path, n: int, max_tokens: int, max_prompt: int, device: str, dtype: str) -> Path:
    """The sample's first ``n`` prompts (token ids, cut to ``max_prompt``) answered greedily by the target
    here, as a logged workload (completions with token-id prompts, so every server sees the same ids)."""
    import torch

    from specgauge.engine.core import Engine, generate
    from specgauge.engine.sampling import SamplingParams
    from specgauge.workload.samples import sample_logged_path

    prompts: list[list[int]] = []
    ids: list[str] = []
    with open(sample_logged_path(), encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            p = d["response"].get("prompt_token_ids")
            if p:
                prompts.append([int(t) for t in p[-max_prompt:]])
                ids.append(d["request"]["id"])
            if len(prompts) == n:
                break
    eng = Engine(target, max_batch=len(prompts), max_model_len=max_prompt + max_tokens + 16, dtype=dtype, device=device)
    outs = generate(eng, prompts, SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True))
    del eng
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    wl = out / "workload.jsonl"
    with open(wl, "w", encoding="utf-8") as f:
        for rid, p, o in zip(ids, prompts, outs, strict=True):
            req = {"id": rid, "prompt": p, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}
            f.write(json.dumps({"request": req, "response": {"prompt_token_ids": p, "output_token_ids": o, "text": ""}}) + "\n")
    return wl


def server_target(target: Path, device: str, dtype: str, max_batch: int, max_model_len: int) -> Any:
    """``specgauge serve`` on the engine per config, from a ``--server-cmd`` template."""
    from specgauge.sweep import ServerTarget

    q = shlex.quote
    cmd = (f"{q(sys.executable)} -m specgauge serve --model {{model}} --port {{port}} --device {device} --dtype {dtype} "
           f"--max-batch {max_batch} --max-model-len {max_model_len} --served-model-name random-target "
           "--speculative-config {spec} {spec:--per-request-spec-decode-metrics=detailed}")
    return ServerTarget.from_command(cmd, model=str(target), env={"PYTHONPATH": str(ROOT / "src")}, health_timeout_s=600)


def sweep_and_predict(out: Path, prof: Any, wl: Path, srv: Any, replay: Any, methods: list[str], ks: list[int],
                      concs: list[int], min_prompts: int, result: dict[str, Any], save: Any) -> list[dict[str, Any]]:
    """The sweep (cells grouped by their number of requests, max(min_prompts, 2·C)), each speculative cell
    predicted from the profile beside compare's measured speedup; ``result["cells"]`` saved as they come."""
    from specgauge.calibrate import measure_cell
    from specgauge.predict import CellSpec, predict_cells
    from specgauge.sweep import run_grid
    from specgauge.sweep.grid import config_label, grid_method

    configs: dict[str, dict[str, Any] | None] = {"off": None}
    for m in methods:
        for k in ks:
            sp = grid_method(m, k)
            configs[config_label(sp)] = sp
    by_n: dict[int, list[int]] = {}
    for c in concs:
        by_n.setdefault(max(min_prompts, 2 * c), []).append(c)
    rows: list[dict[str, Any]] = []
    for n, cs in sorted(by_n.items()):
        cells = [CellSpec(label=lb, speculative_config=sp, concurrency=c) for lb, sp in configs.items() for c in cs]
        grid = run_grid(cells, srv, [wl], out / "sweep" / f"n{n}", num_prompts=n, warmup=1)
        spec_cells = [c for c in cells if c.speculative_config]
        preds = predict_cells(prof, [wl], spec_cells, num_prompts=n, warmup=1, reused_server=True,
                              replay=replay if len(replay.requests) == n else None)  # a replay planned for n requests
        for cell, p in zip(spec_cells, preds, strict=True):
            m = lo = hi = None
            if (grid.cell_dir("off", cell.concurrency) / "results.jsonl").exists() and (grid.cell_dir(cell.label, cell.concurrency) / "results.jsonl").exists():
                m, lo, hi = measure_cell(grid.cell_dir("off", cell.concurrency), grid.cell_dir(cell.label, cell.concurrency))
            rows.append({"label": cell.label, "concurrency": cell.concurrency, "requests": n, "predicted": p.speedup,
                         "predicted_low": p.speedup_low, "predicted_high": p.speedup_high, "measured": m, "measured_low": lo,
                         "measured_high": hi, "error": p.speedup / m - 1 if p.speedup and m else None,
                         "tokens_per_forward": p.tokens_per_forward, "extrapolated": p.extrapolated, "unidentified": p.unidentified})
            print(f"{cell.label:<24} C={cell.concurrency:<3} predicted {p.speedup or 0:.3f} measured {m or 0:.3f}", flush=True)
        result["cells"] = rows
        save()
    return rows


def crossovers(rows: list[dict[str, Any]], margin: float = 1.05) -> dict[str, dict[str, Any]]:
    """Per config: the crossover read off the predictions and off the measurements."""
    from specgauge.sweep.analysis import crossover

    out = {}
    for label in dict.fromkeys(r["label"] for r in rows):
        mine = [r for r in rows if r["label"] == label]
        out[label] = {side: crossover(label, [(r["concurrency"], r[side], r[f"{side}_low"], r[f"{side}_high"]) for r in mine
                                              if r[side] is not None], margin).model_dump(mode="json") for side in ("predicted", "measured")}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/gpu"))
    ap.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--concurrency", default="1,4,16,64", help="the sweep's and the predictions' concurrencies")
    ap.add_argument("--k", default="4", help="the sweep's proposal lengths (n-gram and the draft model)")
    ap.add_argument("--predict-k", type=int, default=8, help="the largest k the calibration plans for")
    ap.add_argument("--num-prompts", type=int, default=64, help="logged requests (the workload)")
    ap.add_argument("--min-prompts", type=int, default=8, help="requests per cell at least (2·C at concurrency C)")
    ap.add_argument("--cal-prompts", type=int, default=8, help="requests per calibration run at the lowest concurrency")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--max-prompt", type=int, default=384, help="prompt tokens kept (the last ones)")
    ap.add_argument("--methods", default="ngram,draft_model", help="ngram and/or draft_model (the random 1B-shaped draft)")
    ap.add_argument("--cal-k", default="ngram=4,draft_model=2,draft_model=4", help="calibration's k per method (calibrate --k)")
    ap.add_argument("--synthetic-acceptance", type=float, default=2.0, help="0: no synthetic points")
    ap.add_argument("--synthetic-forward", type=int, default=None, help="tokens per forward the synthetic points reach")
    ap.add_argument("--bootstrap", type=int, default=100)
    a = ap.parse_args(argv)
    from specgauge.calibrate import CalibrateConfig, run_calibration
    from specgauge.predict.replay import WorkloadReplay

    t_all = time.monotonic()
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    result: dict[str, Any] = {"shape": a.shape, "device": a.device, "dtype": a.dtype, "timings": timings}
    dump = out / "gpu_run.json"

    def save() -> None:
        dump.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")

    import torch

    result["torch"] = torch.__version__
    result["device_name"] = torch.cuda.get_device_name(0) if a.device.startswith("cuda") else "cpu"
    concs = sorted({int(x) for x in a.concurrency.split(",") if x})
    ks = sorted({int(x) for x in a.k.split(",") if x})
    t = time.monotonic()
    target = model_dir(out, "target", SHAPES[a.shape]["target"], 0)
    draft = model_dir(out, "draft", SHAPES[a.shape]["draft"], 1)
    wl = log_workload(out, target, a.num_prompts, a.max_tokens, a.max_prompt, a.device, a.dtype)
    timings["workload_s"] = time.monotonic() - t
    print(f"workload: {a.num_prompts} requests answered in {timings['workload_s']:.0f} s", flush=True)
    srv = server_target(target, a.device, a.dtype, max(64, max(concs)), a.max_prompt + a.max_tokens + 64)
    replay = WorkloadReplay([wl], None, max(a.num_prompts, 2 * max(concs)))
    methods = [f"draft_model:{draft}" if m.strip() == "draft_model" else m.strip() for m in a.methods.split(",") if m.strip()]
    cal_k: dict[str, int | list[int]] = {}
    for part in a.cal_k.split(","):
        name, _, v = part.partition("=")
        prev = cal_k.get(name.strip())
        cal_k[name.strip()] = int(v) if prev is None else sorted({*(prev if isinstance(prev, list) else [prev]), int(v)})

    t = time.monotonic()
    cal = run_calibration(CalibrateConfig(
        workload=[wl], out_dir=out / "calibration", methods=methods, ks=cal_k, synthetic_forward=a.synthetic_forward,
        predict_concurrency=[min(concs), max(concs)], predict_k=a.predict_k, num_prompts=a.cal_prompts, bootstrap=a.bootstrap,
        warmup=1, synthetic_acceptance=a.synthetic_acceptance or None, target=srv), replay=None)
    timings["calibration_s"] = time.monotonic() - t
    prof = cal.profile
    result.update(profile=prof.params, profile_notes=prof.notes, measured_range=prof.measured.model_dump(),
                  calibration_runs=prof.provenance.get("runs"), replay_checks=prof.replay_checks,
                  calibration_checks=[c.model_dump() for c in cal.checks], proposed=[p.model_dump() for p in cal.proposed])
    save()
    print(f"calibration: {timings['calibration_s']:.0f} s; params (ms): "
          + ", ".join(f"{k}={v * 1e3:.4g}" if k != "knee" else f"knee={v:.0f}" for k, v in prof.params.items()), flush=True)

    t = time.monotonic()
    rows = sweep_and_predict(out, prof, wl, srv, replay, methods, ks, concs, a.min_prompts, result, save)
    timings["sweep_s"] = time.monotonic() - t
    xo = crossovers(rows)
    errs = [abs(r["error"]) for r in rows if r["error"] is not None]
    result.update(crossovers=xo, median_abs_error=sorted(errs)[len(errs) // 2] if errs else None,
                  max_abs_error=max(errs) if errs else None)
    timings["total_s"] = time.monotonic() - t_all
    save()
    print(f"total {timings['total_s']:.0f} s; {len(rows)} cells; median |error| "
          f"{100 * (result['median_abs_error'] or 0):.1f} %, max {100 * (result['max_abs_error'] or 0):.1f} %; {dump}", flush=True)


if __name__ == "__main__":
    main()
