"""From options (speedups with intervals per configuration and concurrency) to one recommendation.

1. Per measured concurrency (standing for a band of batch sizes, ``schedule.bands_for``) the best
   configuration by ``choose.choose`` — or "off" when nothing clears the margin.
2. Nothing anywhere: the verdict is "off" (serve without ``--speculative-config``), with each band's
   reason. "Off" is a different answer from k = 0 in a schedule.
3. Otherwise one server runs one method: the method family (a config without its k) that wins the
   most bands (then the higher mean speedup, then the cheaper), and per band the best k of that
   family (0 where none of its k clears the margin). One k for every band: a static config; else a
   ``num_speculative_tokens_per_batch_size`` schedule (built and checked by ``schedule``). When the
   trailing bands are "off" (past the family's crossover), ``off_from`` names their first batch size and
   the headline says that speculation should be off there — which the schedule's k = 0 is not: vLLM
   still runs its speculative path on those steps (#49548), so the schedule is the best one server can
   do, and serving without speculation is the answer for a server that mostly runs that busy.
4. The same choice per segment, when the options carry per-segment intervals.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from specgauge.config import MIN_SPEEDUP, SCHEDULE_KEY
from specgauge.i18n import en
from specgauge.recommend.choose import METHOD_COST, choose
from specgauge.recommend.flags import render_flags
from specgauge.recommend.models import BandChoice, Option, Recommendation, SegmentChoice
from specgauge.recommend.schedule import bands_for, build_schedule, validate_schedule
from specgauge.sweep.analysis import crossover



class RecommendSettings(BaseModel):
    min_speedup: float = Field(default=MIN_SPEEDUP, gt=0, description="the margin a speedup's interval must clear")
    max_batch: int = Field(default=256, ge=1, description="vLLM's max_num_seqs: where the last schedule range ends")
    model: str = "MODEL"  #: the model name written into the flags


def family_key(spec: dict[str, Any] | None) -> str:
    """A config without its proposal length (a config with its own schedule is a family of its own)."""
    if spec is None:
        return "off"
    if spec.get(SCHEDULE_KEY):
        return json.dumps(spec, sort_keys=True)
    return json.dumps({k: v for k, v in spec.items() if k != "num_speculative_tokens"}, sort_keys=True)


def with_k(spec: dict[str, Any], k: int, schedule: list[list[int]] | None = None) -> dict[str, Any]:
    """``spec`` with ``num_speculative_tokens`` = k (in its place) and the schedule (last)."""
    out = {key: (k if key == "num_speculative_tokens" else v) for key, v in spec.items() if key != SCHEDULE_KEY}
    out.setdefault("num_speculative_tokens", k)
    if schedule is not None:
        out[SCHEDULE_KEY] = schedule
    return out


def _family_name(o: Option) -> str:
    spec = o.speculative_config or {}
    if spec.get(SCHEDULE_KEY):
        return o.label
    name = o.method or "speculation"
    if isinstance(spec.get("model"), str) and o.method not in ("ngram", "suffix"):
        name += f" ({spec['model'].rstrip('/').split('/')[-1]})"
    return name


def _ranges(bands: Sequence[BandChoice]) -> str:
    return ", ".join(f"{b.batch_range[0]}–{b.batch_range[1]}" if b.batch_range[0] != b.batch_range[1] else str(b.batch_range[0])
                     for b in bands)


def _bands(options: Sequence[Option], concurrencies: Sequence[int], s: RecommendSettings) -> list[BandChoice]:
    return [choose([o for o in options if o.concurrency == c], c, [lo, hi], s.min_speedup) for c, lo, hi in bands_for(concurrencies, s.max_batch)]


def _off_from(mbands: Sequence[BandChoice], ks: Sequence[int]) -> int | None:
    """The first batch size of the trailing bands where nothing of the chosen family clears the margin
    (speculation should be off from there: past its crossover), None when the last band still pays."""
    tail = len(ks)
    while tail > 0 and mbands[tail - 1].option is None:
        tail -= 1
    return mbands[tail].batch_range[0] if 0 < tail < len(ks) else None


def _pick_family(bands: Sequence[BandChoice]) -> str:
    wins: dict[str, list[float]] = {}
    cheap: dict[str, tuple[int, int]] = {}
    for b in bands:
        if b.option is not None:
            key = family_key(b.option.speculative_config)
            wins.setdefault(key, []).append(b.option.estimate or 0.0)
            cheap[key] = (METHOD_COST.get(b.option.method, 4), b.option.k)
    return max(wins, key=lambda f: (len(wins[f]), sum(wins[f]) / len(wins[f]), tuple(-x for x in cheap[f])))


def _segments(seg_options: dict[str, list[Option]], concurrencies: Sequence[int], s: RecommendSettings) -> list[SegmentChoice]:
    out = []
    for seg, opts in sorted(seg_options.items()):
        bands = _bands(opts, concurrencies, s)
        chosen = [b for b in bands if b.option is not None]
        if not chosen:
            summary = f"{seg}: off — nothing clears {s.min_speedup:g}× at any measured concurrency"
        else:
            parts = [f"{b.choice} at {b.concurrency}" for b in chosen]
            offs = [str(b.concurrency) for b in bands if b.option is None]
            summary = f"{seg}: " + ", ".join(parts) + (f"; off at {', '.join(offs)}" if offs else "")
        out.append(SegmentChoice(segment=seg, bands=bands, summary=summary))
    return out


def recommend(options: Sequence[Option], concurrencies: Sequence[int], *, source: str, source_name: str,
              settings: RecommendSettings | None = None, segment_options: dict[str, list[Option]] | None = None,
              notes: Sequence[str] = ()) -> Recommendation:
    """The recommendation (see the module docstring)."""
    s = settings or RecommendSettings()
    if not concurrencies:
        raise ValueError("no concurrency to recommend for")
    bands = _bands(options, concurrencies, s)
    labels = list(dict.fromkeys(o.label for o in options))
    xovers = [crossover(lb, [(o.concurrency, o.estimate, o.low, o.high) for o in options if o.label == lb and o.estimate is not None],
                        s.min_speedup).text for lb in labels]
    rec = Recommendation(source=source, source_name=source_name, min_speedup=s.min_speedup, verdict="off", headline="",  # type: ignore[arg-type]
                         bands=bands, crossovers=xovers, flags=render_flags(None, s.model), notes=list(notes))
    if segment_options:
        rec.segments = _segments(segment_options, concurrencies, s)
    what = "95 % CI" if source == "sweep" else "prediction band"
    if all(b.option is None for b in bands):
        rec.headline = (f"Speculation does not pay here: at no measured concurrency ({', '.join(map(str, sorted(set(concurrencies))))}) "
                        f"does a configuration's {what} clear {s.min_speedup:g}×. Serve without --speculative-config.")
        rec.reasons = [b.reason for b in bands]
        return rec

    fam = _pick_family(bands)
    mine = [o for o in options if family_key(o.speculative_config) == fam]
    mbands = _bands(mine, concurrencies, s)
    ks = [b.option.k if b.option is not None else 0 for b in mbands]
    proto = next(b.option for b in mbands if b.option is not None)
    assert proto is not None and proto.speculative_config is not None
    rec.verdict, rec.method, rec.method_bands = "speculate", proto.method, mbands
    name = _family_name(proto)
    if proto.speculative_config.get(SCHEDULE_KEY):  # the user measured a schedule of their own, and it won
        spec = dict(proto.speculative_config)
        rec.schedule = spec[SCHEDULE_KEY]
        off = [b for b in mbands if b.option is None]
        rec.headline = f"Serve {proto.label} (its own batch-size schedule, as measured)."
        if off:
            rec.notes.append(f"{proto.label} does not clear {s.min_speedup:g}× at concurrency {', '.join(str(b.concurrency) for b in off)}")
    elif len(set(ks)) == 1:
        spec = with_k(proto.speculative_config, ks[0])
        cs = sorted(set(concurrencies))
        rec.headline = (f"Serve {name} with k = {ks[0]} at every measured concurrency "
                        f"({cs[0]}–{cs[-1]})." if len(cs) > 1 else f"Serve {name} with k = {ks[0]} (measured at concurrency {cs[0]} only).")
    else:
        kmax = max(ks)
        sched = build_schedule([(b.batch_range[0], b.batch_range[1], k) for b, k in zip(mbands, ks)], kmax)
        validate_schedule(sched, kmax)
        spec = with_k(proto.speculative_config, kmax, sched)
        rec.schedule = sched
        parts = [f"k = {k} for {a}–{e}" if a != e else f"k = {k} for {a}" for a, e, k in sched]
        rec.off_from = _off_from(mbands, ks)
        zero = [r for r in sched if r[2] == 0]
        thr = f"{s.min_speedup:g}×"
        if rec.off_from is not None:  # off beyond the crossover: not what a schedule's k = 0 does
            rec.headline = en("rec.hl.schedule_off", name=name, parts="; ".join(parts[:-1]), off=rec.off_from, thr=thr,
                              end=sched[-1][1], last=rec.off_from - 1)
        else:
            rec.headline = en("rec.hl.schedule", name=name, parts="; ".join(parts))
        if zero:
            rec.notes.append(en("rec.n.k0", ranges=", ".join(f"{a}–{e}" for a, e, _ in zero), name=name, thr=thr))
        rec.notes.append(en("rec.n.cudagraphs"))
        rec.notes.append("the schedule is assembled from cells that ran one k each; a sweep cell with this schedule "
                         "(--config with num_speculative_tokens_per_batch_size) would confirm it")
    rec.speculative_config = spec
    rec.flags = render_flags(spec, s.model)
    for b, mb in zip(bands, mbands):
        if b.option is None or (mb.option is not None and b.option.label == mb.option.label):
            continue
        if mb.option is not None and family_key(b.option.speculative_config) == fam:
            # the same method: within its own family the band's leader overlaps a shorter k, and choose
            # takes the cheaper of configs it cannot tell apart — say that, not "one server runs one method"
            rec.notes.append(en("rec.n.same_family_k", c=b.concurrency, opt=b.option.text(), choice=mb.option.text()))
        else:
            rec.notes.append(en("rec.n.other_method", c=b.concurrency, opt=b.option.text(),
                                choice=mb.choice if mb.option is not None else "k = 0"))
    rec.reasons = [f"concurrency {b.concurrency} ({_ranges([b])} per step): {b.reason}" for b in mbands]
    rec.notes.append("bands are keyed by the client concurrency each cell ran at; vLLM keys its schedule by the requests "
                     "scheduled per step, which a closed loop at concurrency C keeps near C")
    return rec
