"""``SuffixTrace``: a suffix replay's steps, plus what it knows about the tokens past the logged output."""

from __future__ import annotations

from dataclasses import dataclass, field

from specgauge.drafters.base import ReplayTrace
from specgauge.drafters.suffix.positions import Positions
from specgauge.drafters.suffix.tail import Tail


@dataclass
class SuffixTrace(ReplayTrace):
    """A suffix replay's steps plus what it knows about the tokens past the logged output.

    vLLM's cache learns every token of the final step, also those past the output it returns
    (``tail.Tail``): where the final step accepted up to the output's end (``open_end``), a live server
    learned up to ``tail_bound`` more tokens: ``tail_learned`` of them the replay learned too (from the
    server's final-step accepted count), ``tail_unknown`` it could not. ``first_uncertain``: index of
    the first step whose draft could differ because of unknown tokens learned from earlier requests
    (None: every step is exact); ``checked`` is False where that could not be decided (native backend,
    or an earlier request's tail of unknown length). With the server's final-step count, the final
    step's ``accepted`` is that count (vLLM counts acceptance before it cuts the output); without it,
    it counts the logged tokens only: a lower bound there. ``bounds`` (``ReplayTrace``): with
    ``SuffixDrafter(bounds=True)``, the low / high counts and whether they are guaranteed
    (``bounds.ExtremePair``)."""

    final_draft: list[int] = field(default_factory=list)
    tail: Tail = field(default_factory=Tail)
    first_uncertain: int | None = None
    checked: bool = True
    #: tokens in the global cache (from earlier requests' tails) that a live server learned and the
    #: replay could not: 0 means this request's figures are exact
    cache_unknown: int = 0
    #: with bounds: the draft at every output position (``positions.Positions``) and the final-step count
    positions: Positions | None = field(default=None, repr=False)
    pinned_final: int | None = None

    @property
    def open_end(self) -> bool:
        return self.tail.open_end

    @property
    def tail_bound(self) -> int:
        return self.tail.bound

    @property
    def tail_learned(self) -> list[int]:
        return list(self.tail.learned)

    @property
    def tail_unknown(self) -> int:
        return self.tail.unknown
