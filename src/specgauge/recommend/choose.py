"""Choosing at one concurrency: the margin, overlapping intervals, and the cheaper configuration.

Rule (the same for measured CIs and predicted bands):
1. an option *clears the margin* when the low end of its interval lies above ``min_speedup`` (as in
   ``compare``'s GO);
2. none clears it: the choice is "off", and the reason names the best option and its interval;
3. otherwise the option with the highest estimate leads; every clearing option whose interval
   overlaps the leader's cannot be told apart from it, and the simplest / cheapest of that group is
   chosen (model-free before a draft model, then the shorter proposal) — the reason says so.

A predicted option whose prediction rests on a term the calibration did not identify
(``Option.unidentified``) never clears the margin: its band is a worst case, not a measurement.
"""

from __future__ import annotations

from collections.abc import Sequence

from specgauge.i18n import en
from specgauge.recommend.models import BandChoice, Option

#: cheaper first: no extra model and little host work, then host work, then a model's forwards
METHOD_COST = {None: 0, "ngram": 1, "suffix": 2, "draft_model": 3}


def cost(o: Option) -> tuple[int, int, str]:
    return METHOD_COST.get(o.method, 4), o.k, o.label


def clears(o: Option, min_speedup: float) -> bool:
    return o.low is not None and o.low > min_speedup and not o.unidentified


def choose(options: Sequence[Option], concurrency: int, batch_range: list[int], min_speedup: float) -> BandChoice:
    """The choice among ``options`` (speculative ones; "off" is implicit) at one concurrency."""
    est = [o for o in options if o.estimate is not None]
    band = BandChoice(concurrency=concurrency, batch_range=batch_range, choice="off")
    if not est:
        band.reason = f"no speedup {'measured' if not options or options[0].source == 'measured' else 'predicted'} at concurrency {concurrency}"
        return band
    best = max(est, key=lambda o: (o.estimate, -cost(o)[0], -o.k))  # type: ignore[return-value,operator]
    band.best = best
    ok = [o for o in est if clears(o, min_speedup)]
    what = "95 % CI" if best.source == "measured" else "prediction band"
    if not ok:
        band.reason = (f"no configuration's {what} clears {min_speedup:g}× at concurrency {concurrency} "
                       f"(best: {best.text()})")
        if best.unidentified:
            band.reason += "; " + en("rec.r.unidentified", label=best.label, terms=", ".join(best.unidentified))
        return band
    lead = max(ok, key=lambda o: o.estimate)  # type: ignore[arg-type,return-value]
    group = [lead] + [o for o in ok if o is not lead and o.high is not None and lead.low is not None and o.high >= lead.low]
    pick = min(group, key=cost)
    band.choice, band.option = pick.label, pick
    band.overlapping = sorted(o.label for o in group if o is not pick)
    if pick is lead:
        band.reason = f"{lead.text()} clears {min_speedup:g}×"
        if band.overlapping:
            band.reason += f"; overlaps {', '.join(band.overlapping)} (not told apart), and is the simplest of them"
    else:
        band.reason = (f"{pick.text()} and the leader {lead.text()} overlap — not told apart by this data; "
                       f"chose {pick.label}, the simpler/cheaper one")
    return band
