"""What a live suffix server learned past each logged output's end, as a value (``Tail``).

vLLM's ``SuffixDecodingProposer`` adds every token of a request's final step to the cache, also those
past the output it returns: the draft tokens it accepted past ``max_tokens`` or after the EOS, and the
bonus token it sampled after them (found against real vLLM, ``tests/integration/test_suffix_vs_vllm.py``).
So where the final step's draft still matched at the output's end (an *open end*), the server learned
up to ``len(draft) - accepted + 1`` more tokens than the log holds. Worked example: output of 10
tokens, the final step starts at position 7 with a draft of 5 whose first 3 the output continues with
(to its end): the server accepted 3 to 5 of them and learned 0 to 2 draft tokens past the end plus its
bonus token: a tail of at most 5 - 3 + 1 = 3 tokens.

``final_tail`` reads the tail off the replay's own final step, ``server_tail`` off the server's final
step where its per-step counts fixed it (``positions.server_final``); ``uncertain_final`` says which of
the two applies, or that the final step itself is unknown, when a draft before it was uncertain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from specgauge.drafters.suffix.positions import Positions, final_step_known, server_final


@dataclass(frozen=True)
class Tail:
    """The tokens a live server learned past one logged output's end.

    ``open_end``: the final step's draft still matched where the output ends; then up to ``bound`` more
    tokens were learned: ``learned`` of them the replay knows (from the server's final-step accepted
    count, and the bonus token where logged), ``unknown`` it does not. ``accepted``: the final step's
    accepted count as the server counted it (before cutting the output), where known; None: the replay's
    own count stands (a lower bound where the end is open)."""

    open_end: bool = False
    bound: int = 0
    learned: tuple[int, ...] = ()
    unknown: int = 0
    accepted: int | None = None

    def as_run(self, length: int) -> Tail:
        """This tail with its content unknown: a run of up to ``length`` unknown tokens (which step was
        the server's final one is open, so what it learned is)."""
        return replace(self, open_end=True, learned=(), bound=length, unknown=length)


def _past(draft: Sequence[int], start: int, end: int, bonus: int | None) -> tuple[tuple[int, ...], int]:
    """(tokens learned, unknown count) of a final step that accepted ``draft[:end]`` where the output
    ended after ``draft[:start]``: the draft tokens past the end, then the bonus (unknown where not logged)."""
    learned = tuple(int(t) for t in draft[start:end]) + ((int(bonus),) if bonus is not None else ())
    return learned, 0 if bonus is not None else 1


def final_tail(drafted: Sequence[int], accepted: Sequence[int], final_draft: Sequence[int], n_out: int,
               final_accepted: int | None, bonus: int | None,
               assume: Callable[[int, int], int] | None = None) -> Tail:
    """The tail of the replay's own final step (``drafted`` / ``accepted`` per step, its draft
    ``final_draft``) over an output of ``n_out`` tokens. ``final_accepted``: the server's count at that
    step, when known (used where it lies within what the draft allows); ``assume``: where it is not
    known, ``assume(accepted, len(draft))`` picks a count (an extreme of the bounds, ``bounds.Extreme``)."""
    if not drafted:
        return Tail()
    a = int(accepted[-1])
    pos = 1 + sum(int(x) for x in accepted[:-1]) + len(drafted) - 1  # where the final step began
    if a < n_out - pos:  # the output's last token was the step's bonus/correction token
        return Tail()
    d = final_draft
    bound = len(d) - a + 1
    if final_accepted is None and assume is not None:
        final_accepted = assume(a, len(d))
    if final_accepted is not None and a <= final_accepted <= len(d):
        learned, unknown = _past(d, a, final_accepted, bonus)
        return Tail(True, bound, learned, unknown, final_accepted)
    return Tail(True, bound, (), bound)  # how many of the draft's remaining tokens the server accepted is unknown


def server_tail(pos: Positions, n_out: int, final: tuple[int, int], bonus: int | None) -> Tail:
    """The tail of the server's own final step (``positions.server_final``: its position p and accepted
    count a, the draft at p certain)."""
    p, a = final
    rest = n_out - p
    d = pos.drafts[p]
    if a < rest:  # the output's last token was that step's correction / bonus token
        return Tail()
    learned, unknown = _past(d, rest, a, bonus)
    return Tail(True, len(d) - rest + 1, learned, unknown)


def uncertain_final(pos: Positions, n_out: int, accepted: Sequence[int], first_uncertain: int, k: int,
                    final_accepted: int | None, server_steps: Sequence[tuple[int, int]] | None
                    ) -> tuple[tuple[int, int] | None, int]:
    """Where a step from ``first_uncertain`` on could differ, which final step the server made:
    (its (position, accepted) from its per-step counts, or None: the replay's own final step applies;
    the length of an unknown run, > 0 where no one final step fits: its tail is then up to that many
    unknown tokens, the final step's accepted ones and the bonus)."""
    run = (final_accepted if final_accepted is not None else k) + 1
    if server_steps is not None:
        final = server_final(pos, n_out, server_steps)
        if final is None:
            return None, run  # no one final step fits the server's steps
        return (None if final[0] == 0 else final), 0  # (0, 0): the final step drafted nothing, no tail
    start = 1 + sum(int(x) for x in accepted[:first_uncertain]) + first_uncertain
    return None, 0 if final_step_known(pos, n_out, start) else run
