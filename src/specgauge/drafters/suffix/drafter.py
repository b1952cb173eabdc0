"""``SuffixDrafter``: begin / propose / end / replay over one suffix cache (``cache.SuffixCache``)."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import ClassVar, Literal

import numpy as np

from specgauge.drafters.base import ServerReport, register_drafter
from specgauge.drafters.suffix.bounds import Extreme, ExtremePair
from specgauge.drafters.suffix.cache import PythonCache, Steps, SuffixCache, learn_new
from specgauge.drafters.suffix.native import NativeCache, resolve_backend
from specgauge.drafters.suffix.positions import Positions, replay_path
from specgauge.drafters.suffix.tail import Tail, final_tail, server_tail, uncertain_final
from specgauge.drafters.suffix.trace import SuffixTrace
from specgauge.drafters.suffix.unknown import UnknownTails


def _check(name: str, value: object, lo: float, hi: float | None = None, integer: bool = True) -> float:
    ok_type = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.number))
    if isinstance(value, bool) or not ok_type or value < lo or (hi is not None and value > hi):  # type: ignore[operator]
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        kind = "an integer" if integer else "a number"
        raise ValueError(f"suffix drafter: {name} must be {kind} {bound}, got {value!r}")
    return value  # type: ignore[return-value]


class _Request:
    __slots__ = ("prompt_len", "seen")

    def __init__(self, prompt_len: int) -> None:
        self.prompt_len = prompt_len
        self.seen = prompt_len  # history tokens already in the cache


def _logged_at(k: int, server: ServerReport | None) -> tuple[int | None, list[tuple[int, int]] | None]:
    """(final-step count, per-step counts) of a logged server's report, kept only if that server could
    have run at k: none of its steps drafted more than k (the caller knows the rest: simulate passes
    them when it replays one k, the one the user names). The final-step count defaults to the steps' last."""
    if server is None:
        return None, None
    final_accepted, max_drafted = server.final_accepted, server.max_drafted
    steps = None if server.steps is None else [(int(d), int(a)) for d, a in server.steps]
    if steps:
        max_drafted = max(max(d for d, _ in steps), max_drafted or 0)
        final_accepted = steps[-1][1] if final_accepted is None else final_accepted
    if max_drafted is not None and max_drafted > k:
        return None, None
    return final_accepted, steps or None


@register_drafter("suffix")
class SuffixDrafter:
    """Suffix decoding with vLLM's ``suffix_decoding_*`` options and defaults.

    Stateful across requests (the global trie learns every output), so replaying a workload must
    feed requests in arrival order through one drafter, and a sweep over k needs one drafter per k.

    ``backend``: ``"python"`` (``cache.PythonCache``), ``"native"`` (ArcticInference's own C++
    ``SuffixDecodingCache``, the optional extra ``specgauge[suffix]``), or ``"auto"`` (native when
    importable; ``SPECGAUGE_SUFFIX_BACKEND`` overrides it). Both give identical drafts.
    ``track_unknown_tails``: the cache records the tokens a live server learned past logged outputs that
    no log holds, and each replay says from which step its drafts could depend on them; ``bounds``: each
    replay also carries its request's ``base.CountBounds`` (``bounds.ExtremePair``). Both need the python
    cache. ``extreme``: this drafter is one side of such a pair (set by the pair's owner, not by users).
    """

    kind: ClassVar[str] = "suffix"
    deterministic: ClassVar[bool] = True
    stateful: ClassVar[bool] = True  # the global trie learns every output
    replays_server_report: ClassVar[bool] = True  # ``replay(server=...)``: the tail past the cut, pinned

    def __init__(
        self,
        num_speculative_tokens: int | None = None,
        suffix_decoding_max_tree_depth: int = 24,
        suffix_decoding_max_cached_requests: int = 10000,
        suffix_decoding_max_spec_factor: float = 1.0,
        suffix_decoding_min_token_prob: float = 0.1,
        max_model_len: int | None = None,
        backend: str = "auto",
        track_unknown_tails: bool = False,
        bounds: bool = False,
        extreme: Literal["low", "high"] | None = None,
    ) -> None:
        self.max_tree_depth = int(_check("suffix_decoding_max_tree_depth", suffix_decoding_max_tree_depth, 1))
        # vLLM: k defaults to the max tree depth
        k = self.max_tree_depth if num_speculative_tokens is None else num_speculative_tokens
        self.k = int(_check("num_speculative_tokens", k, 1))
        self.max_cached_requests = int(_check("suffix_decoding_max_cached_requests", suffix_decoding_max_cached_requests, 0))
        self.max_spec_factor = float(_check("suffix_decoding_max_spec_factor", suffix_decoding_max_spec_factor, 0, integer=False))
        self.min_token_prob = float(_check("suffix_decoding_min_token_prob", suffix_decoding_min_token_prob, 0, 1, integer=False))
        self.max_model_len = None if max_model_len is None else int(_check("max_model_len", max_model_len, 1))
        self.backend = resolve_backend(backend)
        track = track_unknown_tails or bounds or extreme is not None
        if track:  # knowing what unknown tokens can change needs the python trie's counts
            if backend == "native":
                raise ValueError("suffix drafter: track_unknown_tails and bounds need backend 'python' (or 'auto')")
            self.backend = "python"
        sizes = (self.max_tree_depth, self.max_cached_requests, self.max_spec_factor, self.min_token_prob)
        self._cache: SuffixCache
        #: the python cache, where unknown tails are tracked (None: not tracked)
        self._tracked: PythonCache | None = None
        if self.backend == "native":
            self._cache = NativeCache(*sizes)
        else:
            python = PythonCache(*sizes, track_unknown=track)
            self._cache, self._tracked = python, python if track else None
        #: with bounds: which extreme this cache is, and the pair that owns both sides
        self.extreme = Extreme("low") if bounds else (Extreme(extreme) if extreme is not None else None)
        self._pair: ExtremePair | None = None
        if bounds:
            high = SuffixDrafter(num_speculative_tokens=num_speculative_tokens,
                                 suffix_decoding_max_tree_depth=suffix_decoding_max_tree_depth,
                                 suffix_decoding_max_cached_requests=suffix_decoding_max_cached_requests,
                                 suffix_decoding_max_spec_factor=suffix_decoding_max_spec_factor,
                                 suffix_decoding_min_token_prob=suffix_decoding_min_token_prob, max_model_len=max_model_len,
                                 backend=self.backend, extreme="high")
            self._pair = ExtremePair(self, high)
        self._active: dict[str, _Request] = {}
        self._unknown_by_req: dict[str, int] = {}  # cached request -> unknown tokens after its output
        self.cache_unknown = 0  #: unknown tokens in the global trie now

    @property
    def unknown_tails(self) -> UnknownTails | None:
        """The unknown tokens at the ends of cached outputs (``unknown.UnknownTails``; None: not tracked)."""
        return self._tracked.unknown if self._tracked is not None else None

    # -- Drafter protocol -------------------------------------------------------------------------
    def begin(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        """``start_request``: a local trie over the prompt; a global slot (FIFO eviction)."""
        if request_id in self._active:
            raise ValueError(f"suffix drafter: request {request_id!r} is already active")
        self._cache.start(request_id, [int(t) for t in prompt_ids])
        self._active[request_id] = _Request(len(prompt_ids))

    def propose(self, request_id: str, history: Sequence[int], k: int) -> list[int]:
        """Learn the tokens added since the last call, then speculate from the last tokens."""
        req = self._request(request_id)
        k = int(_check("k", k, 1))
        n = len(history)
        if self.max_model_len is not None:
            if n >= self.max_model_len:  # vLLM skips the request before learning its new tokens
                return []
            k = min(k, self.max_model_len - n - 1)
        req.seen = learn_new(self._cache, request_id, history, req.seen)
        return self._cache.speculate(request_id, [int(t) for t in history[max(0, n - self.max_tree_depth) :]], k)

    def end(self, request_id: str, output_ids: Sequence[int]) -> None:
        """The rest of the output enters the global trie; the local trie is dropped (``stop_request``).

        In vLLM the final step's tokens reach the cache through one last propose call, which skips a
        request that has reached ``max_model_len``: then they are not learned here either."""
        self._finish(request_id, self._request(request_id), list(output_ids), 0)

    def replay(self, request_id: str, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int,
               server: ServerReport | None = None) -> SuffixTrace:
        """The whole lifecycle of one request: the same steps and numbers as ``replay_by_stepping``
        (begin, one propose per decode step, end), without its per-step overhead.

        ``server``: what the logged server reported of this request. Its final-step accepted count
        (vLLM's ``per_step_accepted[-1]``): the draft tokens it accepted past the output's end are learned
        as vLLM learned them, and the final step counts them; its ``bonus``: the token emitted after
        them (else an unknown token in the cache); its per-step counts (``steps``): they fix which of the
        paths the bounds allow the server took, so its final step and what it taught the cache
        (``positions.server_final``), where an uncertain step would otherwise leave them open. The
        counts are left out where no server at this k could have made them (``_logged_at``). The
        request's own bounds never use the per-step counts (only the final one).

        With ``bounds``, the request also goes through the other extreme's cache and the trace carries
        ``bounds`` (``bounds.ExtremePair``); the figures returned are this cache's (the low extreme)."""
        k = int(_check("k", k, 1))
        final_accepted, steps = _logged_at(k, server)
        bonus = server.bonus if server is not None else None
        if self._pair is not None:
            return self._pair.replay(request_id, prompt_ids, output_ids, k, final_accepted, bonus, steps)
        return self.replay_one(request_id, prompt_ids, output_ids, k, final_accepted, bonus, steps)

    def replay_one(self, request_id: str, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int,
                   final_accepted: int | None, bonus: int | None,
                   server_steps: Sequence[tuple[int, int]] | None) -> SuffixTrace:
        """``replay`` through this drafter's cache alone (one side of the pair, with bounds)."""
        tokens = [int(t) for t in prompt_ids] + [int(t) for t in output_ids]
        # the trie holds no reference cycles, so pausing the cyclic collector loses nothing; it would
        # otherwise rescan the millions of trie nodes as they are allocated (3x slower)
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            return self._replay(request_id, tokens, len(prompt_ids), k, final_accepted, bonus, server_steps)
        finally:
            if gc_was_on:
                gc.enable()

    # -- internals --------------------------------------------------------------------------------
    def _replay(self, request_id: str, tokens: list[int], prompt_len: int, k: int, final_accepted: int | None,
                bonus: int | None, server_steps: Sequence[tuple[int, int]] | None) -> SuffixTrace:
        self.begin(request_id, tokens[:prompt_len])
        req = self._active[request_id]
        n_out = len(tokens) - prompt_len
        # with bounds the drafts are checked against the unknown tokens while the bounds are guaranteed;
        # once an open end went unpinned they are the two extremes, and the check (costly with unknown runs) stops
        sound = self.extreme is None or self.extreme.sound
        checked = self._tracked is not None and sound
        positions: Positions | None = None
        steps = Steps(seen=req.seen)
        if n_out > 1:
            if self._tracked is not None and self.extreme is not None and sound:  # guaranteed bounds: a draft per position
                positions, req.seen = self._tracked.replay_positions(
                    request_id, tokens, prompt_len, req.seen, k, self.max_model_len, checked)
                drafted, accepted, draft, first = replay_path(positions, n_out)
                steps = Steps(drafted, accepted, draft, req.seen, first)
            else:
                steps = self._cache.replay(request_id, tokens, prompt_len, req.seen, k, self.max_model_len, checked)
                req.seen = steps.seen
        tail = self._tail(steps, positions, n_out, k, final_accepted, bonus, server_steps, checked)
        accepted = np.asarray(steps.accepted, dtype=np.int64)
        if tail.accepted is not None:
            accepted[-1] = tail.accepted  # as the server counts it: before cutting the output
        trace = SuffixTrace(np.asarray(steps.drafted, dtype=np.int64), accepted, final_draft=list(steps.final_draft),
                            tail=tail, first_uncertain=steps.first_uncertain, checked=checked,
                            cache_unknown=self._cache_unknown(), positions=positions,
                            pinned_final=final_accepted if positions is not None else None)
        self._finish(request_id, req, tokens[prompt_len:] + list(tail.learned), tail.unknown)
        return trace

    def _tail(self, steps: Steps, positions: Positions | None, n_out: int, k: int, final_accepted: int | None,
              bonus: int | None, server_steps: Sequence[tuple[int, int]] | None, checked: bool) -> Tail:
        """What the final step taught the cache past the output (``tail``): the server's own final step
        where its per-step counts fix it, else the replay's, or a run of unknown tokens where no one final
        step fits the paths an uncertain draft opens."""
        final, run = None, 0
        if positions is not None and steps.first_uncertain is not None and checked:
            final, run = uncertain_final(positions, n_out, steps.accepted, steps.first_uncertain, k, final_accepted,
                                         server_steps)
        if final is not None:
            assert positions is not None
            tail = server_tail(positions, n_out, final, bonus)
        else:
            assume = self.extreme.accepted if self.extreme is not None else None
            tail = final_tail(steps.drafted, steps.accepted, steps.final_draft, n_out, final_accepted, bonus, assume)
        return tail.as_run(run) if run else tail  # learn none of the replay's own guess past the end

    def _finish(self, request_id: str, req: _Request, learn: list[int], unknown: int) -> None:
        """``end`` with the tail: vLLM learns the final step only while the request is below
        ``max_model_len`` (counting the unknown tokens too)."""
        if self.max_model_len is None or req.prompt_len + len(learn) + min(unknown, 1) < self.max_model_len:
            req.seen = learn_new(self._cache, request_id, learn, req.seen, offset=req.prompt_len)
            if unknown and self.max_cached_requests != 0:
                self._unknown_by_req[request_id] = unknown
                self.cache_unknown += unknown
            if unknown and self._tracked is not None:
                self._tracked.add_unknown(request_id, unknown)
        del self._active[request_id]
        self._cache.stop(request_id)

    def _cache_unknown(self) -> int:
        """Unknown tail tokens of requests still in the global cache (evicted ones left with them)."""
        gone = [r for r in self._unknown_by_req if not self._cache.is_cached(r)]
        for r in gone:
            self.cache_unknown -= self._unknown_by_req.pop(r)
        return self.cache_unknown

    def _request(self, request_id: str) -> _Request:
        try:
            return self._active[request_id]
        except KeyError:
            raise ValueError(f"suffix drafter: request {request_id!r} was not begun (or already ended)") from None
