"""The drafter contract shared by offline replay (``simulate``) and the embedded engine.

A drafter proposes up to ``k`` draft tokens for one request from that request's token history
(prompt ids followed by the output ids produced so far). It knows nothing about sampling,
verification or timing: the caller decides what was accepted and tells the drafter only through
the history it passes next and through ``end``.

Lifecycle, per request (several requests may be open at once, interleaved, in the engine):

    begin(request_id, prompt_ids)
    propose(request_id, history, k) -> list[int]     # 0..k tokens; [] means "no draft this step"
    ...                                             # history grows by accepted + 1 tokens each step
    end(request_id, output_ids)                     # the final output; global state may learn from it

A drafter whose proposal is a deterministic function of the history (n-gram, suffix, greedy draft
model) satisfies the replay theorem in ``shared/design.md``: its live acceptance on an output equals
the acceptance obtained by replaying that output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import numpy as np


BoundsKind = Literal["guaranteed", "extremes"]


@dataclass(frozen=True)
class CountBounds:
    """One request's [low, high] of drafts, draft tokens and accepted tokens, where the replay cannot give
    the server's counts themselves, and which kind of bounds they are:

    * ``guaranteed``: the server's counts lie inside, whatever it did where the log is silent (proved:
      the final step's draft tokens past the output's end, which a server counts accepted before it cuts
      the output; suffix decoding's sound check of the cache, ``drafters.suffix.bounds``);
    * ``extremes``: the replay's two extremes of what a server learned past the cuts its counters do
      not pin (suffix decoding without the server's final-step counts): no guarantee, a server may lie
      outside (a tail accepted in part, a bonus token, can move a later draft).

    ``exact`` only for guaranteed bounds whose low and high coincide."""

    drafts: tuple[int, int]
    draft_tokens: tuple[int, int]
    accepted_tokens: tuple[int, int]
    kind: BoundsKind = "guaranteed"

    @property
    def exact(self) -> bool:
        return self.kind == "guaranteed" and all(lo == hi for lo, hi in (self.drafts, self.draft_tokens, self.accepted_tokens))

    @property
    def width(self) -> int:
        """Accepted tokens between the bounds (the figure the acceptance interval turns on)."""
        return self.accepted_tokens[1] - self.accepted_tokens[0]

    def as_lists(self) -> dict[str, list[int]]:
        return {"drafts": list(self.drafts), "draft_tokens": list(self.draft_tokens),
                "accepted_tokens": list(self.accepted_tokens)}


@dataclass(frozen=True)
class ServerReport:
    """What a logged server reported about one request beside its output, passed by name to a drafter
    whose ``replay`` learns from it (``replays_server_report``, see :class:`Drafter`; suffix decoding: the tokens its
    final step accepted past the output's end are learned as the server learned them).

    ``final_accepted``: the accepted count of the request's final drafting step (vLLM's
    ``per_step_accepted[-1]``); ``steps``: its (drafted, accepted) per drafting step (vLLM's
    ``per_step_drafted`` / ``per_step_accepted``); ``max_drafted``: the most any of its steps drafted
    (the counts describe a replay at k only if no step drafted more); ``bonus``: the token it emitted
    after the final step's accepted drafts, when known."""

    final_accepted: int | None = None
    steps: tuple[tuple[int, int], ...] | None = None
    max_drafted: int | None = None
    bonus: int | None = None


@dataclass
class ReplayTrace:
    """The decode steps a speculative engine takes over one logged output, in order (the prefill
    that emits output token 0 is not one of them).

    ``drafted[s]`` draft tokens were proposed at step s (0 when the drafter proposed nothing: still a
    step, but not a draft), ``accepted[s]`` of them were kept (a prefix). Each step also emits one
    bonus/correction token, so the step count is the number of target forward passes.
    """

    drafted: np.ndarray  # (steps,) int
    accepted: np.ndarray  # (steps,) int
    #: a hidden-state head's teacher-forced figure over the same output (every draft position fed the
    #: target's hidden state, as training tools count it; optimistic, no server drafts that way), where
    #: the drafter offers it (:class:`TeacherForcedReplay`); None for every other method
    teacher_forced: ReplayTrace | None = None
    #: where the replay cannot give the server's counts themselves, their bounds. None: a stateless
    #: drafter's counts are the server's (``offline`` sets them where not); a stateful drafter gives its
    #: own where asked (suffix with ``bounds=True``), else its counts are vouched for by nothing here
    bounds: CountBounds | None = None
    #: hidden-state methods: the first output position whose logged token the teacher-forced target's
    #: greedy token is not (the log was made by another model, or other numerics); None: it reproduces
    #: every token, or the method reads no target. Only a greedy request's log must be reproduced.
    target_mismatch: int | None = None


def replay_by_stepping(
    drafter: Drafter, request_id: str, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int
) -> ReplayTrace:
    """Reference replay: the engine loop, one ``propose`` per step (the replay theorem makes this exact
    for deterministic drafters). Output token 0 comes from the prefill forward, with no draft (as in
    vLLM and the embedded engine), so the trace covers the decode steps that emit tokens 1..n-1. At
    each decode step: accept the longest prefix of the proposal that the logged output continues
    with, emit one more token (bonus or correction), repeat until the output is consumed.
    Drafters may offer a faster ``replay`` that must give the same trace."""
    drafter.begin(request_id, prompt_ids)
    out = list(output_ids)
    history = list(prompt_ids) + out[:1]
    drafted: list[int] = []
    accepted: list[int] = []
    pos = 1
    while pos < len(out):
        d = drafter.propose(request_id, history, k)
        a = accepted_prefix(d, out, pos)
        drafted.append(len(d))
        accepted.append(a)
        step = min(a + 1, len(out) - pos)
        history.extend(out[pos : pos + step])
        pos += step
    drafter.end(request_id, out)
    return ReplayTrace(np.asarray(drafted, dtype=np.int64), np.asarray(accepted, dtype=np.int64))


def accepted_prefix(draft: Sequence[int], tokens: Sequence[int], n: int) -> int:
    """How many of ``draft`` a greedy verifier accepts at position ``n`` of the logged ``tokens``: the
    length of the prefix that ``tokens[n:]`` continues with, never past their end (the replay theorem:
    a draft token is accepted exactly when the target emits it).

    ``accepted_prefix([5, 6, 7], [1, 5, 6, 9], 1) == 2``; ``accepted_prefix([5, 6], [1, 5], 1) == 1``
    (the output ends inside the draft)."""
    a, total = 0, len(tokens)
    for t in draft:
        if n + a >= total or t != tokens[n + a]:
            break
        a += 1
    return a


def runs_from_matches(match: np.ndarray) -> np.ndarray:
    """Per output position j, the run of consecutive matches from j (``match[j]``: a greedy draft's
    argmax given the true history equals the logged token j): the draft tokens a step at j accepts
    with an unbounded k. After a mismatch the history diverges, but those tokens are rejected anyway."""
    n = len(match)
    idx = np.arange(n)
    next_false = np.minimum.accumulate(np.where(match, n, idx)[::-1])[::-1] if n else idx
    return next_false - idx


def trace_from_matches(match: np.ndarray, k: int) -> ReplayTrace:
    """Greedy draft model from one teacher-forced pass: ``match[j]`` says the draft's argmax at output
    position j (given the true history) equals the logged token; the steps follow from
    :func:`runs_from_matches` as for any :class:`WholeOutputReplay`."""
    return trace_from_runs(runs_from_matches(match), k)


def final_bound(t: ReplayTrace, n_out: int) -> int:
    """Draft tokens of the final step past the output's end (``n_out`` tokens): how many more accepted
    tokens a server may count than the replay (vLLM's scheduler and the embedded engine count a step's
    accepted drafts before cutting at max_tokens or the EOS)."""
    if not t.drafted.size or t.drafted[-1] == 0:
        return 0
    a = int(t.accepted[-1])
    pos = 1 + int(t.accepted[:-1].sum()) + t.drafted.size - 1
    return int(t.drafted[-1]) - a if a >= n_out - pos else 0


def final_step_bounds(t: ReplayTrace, n_out: int) -> CountBounds | None:
    """Guaranteed bounds of a stateless drafter's trace whose final step's draft still matched where
    the output ends: the server counted between the replay's accepted tokens and ``final_bound`` more
    (every other step is the server's, by the replay theorem). None: nothing past the end, the counts
    are the server's."""
    fb = final_bound(t, n_out)
    if not fb:
        return None
    d = int((t.drafted > 0).sum())
    dt, acc = int(t.drafted.sum()), int(t.accepted.sum())
    return CountBounds((d, d), (dt, dt), (acc, acc + fb))


def trace_from_runs(run: np.ndarray, k: int) -> ReplayTrace:
    """The decode steps over one output from its per-position accepted runs: ``run[j]`` is how many
    draft tokens a step starting at output position j would have accepted (``kmax``-capped, see
    :class:`WholeOutputReplay`). A step at ``pos`` drafts k tokens, accepts ``min(k, run[pos])`` and emits
    one more; output token 0 comes from the prefill, so the first step is at position 1. Exact for any
    k <= the cap because a greedy chain of k tokens is the first k tokens of the longer chain."""
    n = len(run)
    drafted, accepted = [], []
    pos = 1
    while pos < n:
        a = min(int(run[pos]), k)
        drafted.append(k)
        accepted.append(a)
        pos += a + 1
    return ReplayTrace(np.asarray(drafted, dtype=np.int64), np.asarray(accepted, dtype=np.int64))


@runtime_checkable
class WholeOutputReplay(Protocol):
    """A stateless drafter that replays a whole logged output at once (a draft model's teacher-forced
    pass, a hidden-state head's chain over one target pass): ``accept_runs`` returns, per output
    position j, the number of draft tokens a step starting at j would accept, capped at ``kmax``
    (positions 0 and past the end are never step starts' concern: any value). Every k <= kmax then
    follows from :func:`trace_from_runs`. Offline replay uses it where a drafter offers it."""

    def accept_runs(self, prompt_ids: Sequence[int], output_ids: Sequence[int], kmax: int) -> np.ndarray: ...


@runtime_checkable
class TeacherForcedReplay(Protocol):
    """A :class:`WholeOutputReplay` drafter that also gives, from the same pass, the accepted runs
    a teacher-forced count would give (each draft position fed the target's own hidden state rather
    than the drafter's: what EAGLE / SpecForge training prints). Offline replay then puts that
    optimistic figure beside the exact one (``ReplayTrace.teacher_forced``)."""

    def accept_runs_and_teacher_forced(
        self, prompt_ids: Sequence[int], output_ids: Sequence[int], kmax: int
    ) -> tuple[np.ndarray, np.ndarray]: ...


@runtime_checkable
class Drafter(Protocol):
    #: registry name, e.g. "ngram"
    kind: ClassVar[str]
    #: True when propose() is a deterministic function of the history (exact replay applies)
    deterministic: ClassVar[bool]
    #: True when the drafter learns across requests (suffix decoding's global cache): a replay then
    #: feeds each stream's requests in arrival order through one drafter; False: the proposal
    #: depends on the request alone (n-gram, a draft model), so any order, any worker, gives the
    #: same. A drafter that does not say is taken as stateful (the safe order).
    stateful: ClassVar[bool]
    # Optional (not part of the protocol's check): ``replays_server_report: ClassVar[bool] = True`` on
    # a drafter whose fast ``replay`` takes ``server=`` (a :class:`ServerReport`); offline replay passes
    # the logged server's report to it by that name, and to no other drafter.

    def begin(self, request_id: str, prompt_ids: Sequence[int]) -> None: ...

    def propose(self, request_id: str, history: Sequence[int], k: int) -> list[int]: ...

    def end(self, request_id: str, output_ids: Sequence[int]) -> None: ...


DrafterFactory = Callable[..., Drafter]

_REGISTRY: dict[str, DrafterFactory] = {}
ENTRY_POINT_GROUP = "specgauge.drafters"


def register_drafter(kind: str) -> Callable[[DrafterFactory], DrafterFactory]:
    """Class decorator: make a drafter available under ``kind`` (built-ins use this too)."""

    def deco(factory: DrafterFactory) -> DrafterFactory:
        _REGISTRY[kind] = factory
        return factory

    return deco


def drafter_kinds() -> list[str]:
    _load_plugins()
    return sorted(_REGISTRY)


def make_drafter(kind: str, **options: Any) -> Drafter:
    """Build a registered drafter; an unknown kind names the known ones."""
    _load_plugins()
    try:
        factory = _REGISTRY[kind]
    except KeyError:
        raise ValueError(f"unknown draft method {kind!r}; known: {known_methods()}") from None
    return factory(**options)


def known_methods() -> str:
    """The registered kinds, and which of them also give the teacher-forced figure (``TeacherForcedReplay``):
    that figure is a column beside the replayed one, not a method of its own (``eagle3_teacher_forced``
    was one once, and training tools print it)."""
    _load_plugins()
    kinds = sorted(_REGISTRY)
    tf = [k for k in kinds if callable(getattr(_REGISTRY[k], "accept_runs_and_teacher_forced", None))]
    text = ", ".join(kinds)
    if tf:
        who = tf[0] if len(tf) == 1 else f"{', '.join(tf[:-1])} and {tf[-1]}"
        text += (f" ({who} also give the teacher-forced figure training tools print, beside the replayed one: "
                 f"--method {tf[0]}:DIR; it is not a method of its own)")
    return text


def drafter_factory(kind: str) -> DrafterFactory | None:
    """The registered factory of ``kind`` (None: no such drafter)."""
    _load_plugins()
    return _REGISTRY.get(kind)


def is_stateful(kind: str) -> bool:
    """Does a drafter of this kind carry state from one request to the next? (See ``Drafter.stateful``;
    unknown kinds and drafters that do not say: yes.)"""
    return bool(getattr(drafter_factory(kind), "stateful", True))


def offers_whole_output(kind: str) -> bool:
    """Does this kind's drafter implement :class:`WholeOutputReplay` (a model's one pass per output)?"""
    return callable(getattr(drafter_factory(kind), "accept_runs", None))


def accepted_options(kind: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` less the keys the factory of ``kind`` takes no parameter for (all of them when it
    takes ``**kwargs``), so one option set (a whole ``--speculative-config``) serves every drafter."""
    import inspect

    factory = drafter_factory(kind)
    if factory is None:
        return options
    params = inspect.signature(factory).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return options
    return {k: v for k, v in options.items() if k in params}


_plugins_loaded = False


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    # the built-ins registered themselves already: Python runs the package's __init__ (which imports every
    # built-in kind) before it runs this module

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _REGISTRY.setdefault(ep.name, ep.load())
