"""``suffix`` drafter: vLLM v0.32.0's suffix decoding (``vllm/v1/spec_decode/suffix_decoding.py``), which
calls ArcticInference 0.3.0's ``SuffixDecodingCache``; both mirrored here in pure Python.

What vLLM + ArcticInference do (and this module does):

* Per request, a *local* tree over prompt + output so far (one sequence); one *global* tree over the
  outputs of requests, each its own sequence. A request's output enters the global tree token by
  token while it runs (``add_active_response``), not only when it ends, so running requests and the
  request itself are visible to every request. Suffixes are cut at ``max_tree_depth`` tokens.
* ``max_cached_requests``: each started request takes a global slot; when more than that many are
  cached the oldest-started one (FIFO) is removed from the global tree. 0 disables the global tree.
* Each step: the context is the last ``max_tree_depth`` tokens of the history. For every match length
  m = 1, 2, ... < len(context) whose last-m-token context occurs in a tree, a draft is grown greedily
  down the highest-count child, at most ``min(k, int(max_spec_factor * m + 1e-6))`` tokens, stopping
  when the path probability (product of count ratios) drops below ``min_token_prob``; its score is
  the sum of those probabilities. The highest score wins (ties: the longer match), and the local
  tree's draft wins ties with the global tree's. So the draft length varies per step, 0..k.
* vLLM caps k at ``max_model_len - L - 1`` and skips requests with ``L >= max_model_len``.

The tree below is a twin of ArcticInference's ``SuffixTree`` (``csrc/suffix_decoding/suffix_tree.cc``).

The C++ tree is path-compressed; this one is an uncompressed trie with the same counts. Every
observable of speculation is identical: a compressed node's inner positions have a single child
and the same count (so the probability ratio there is exactly 1.0), and branching happens only at
node ends, where both keep children in the same order.

Each node keeps its children in a list ordered by decreasing count, moved exactly as the C++
sibling/group linked lists move them (ties are NOT broken by token or age alone, so this matters
for which continuation is drafted):

* a new child goes to the tail;
* on increment, a node whose previous sibling has count ``c`` (its own) or ``c+1`` moves in front
  of the first node of that sibling's equal-count run;
* on decrement (eviction), a node whose next sibling has its count ``c`` moves in front of the
  first node with a smaller count (or to the tail).

Backends: this module's trees (``backend="python"``) or ArcticInference's own C++ cache
(``"native"``, ``_suffix_native.py``, optional extra ``specgauge[suffix]``); ``"auto"`` takes native
when importable. ``replay`` gives ``replay_by_stepping``'s trace without its per-step overhead
(``_suffix_replay.py`` for the python trees). Drafts are searched longest match first with an exact
early stop (``best_draft``), which returns C++'s ascending-search result.

Floating point follows the C++ ``float`` arithmetic: every product/quotient/sum is rounded to
float32 (exact here: double results rounded once to float32 equal float32 arithmetic for these ops).
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from specgauge.drafters._suffix_bounds import UnknownTails
from specgauge.drafters._suffix_positions import CountBounds
from specgauge.drafters._suffix_native import NativeSuffixCache, resolve_backend
from specgauge.drafters._suffix_tree import (
    Draft,
    SuffixTree,
    _Node,
    best_draft,
    f32,
    spec_limits,
)
from specgauge.drafters.base import ReplayTrace, register_drafter

__all__ = ["Draft", "SuffixDrafter", "SuffixTrace", "SuffixTree", "_Node", "best_draft", "f32", "spec_limits"]


def _check(name: str, value: object, lo: float, hi: float | None = None, integer: bool = True) -> float:
    ok_type = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.number))
    if isinstance(value, bool) or not ok_type or value < lo or (hi is not None and value > hi):  # type: ignore[operator]
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        kind = "an integer" if integer else "a number"
        raise ValueError(f"suffix drafter: {name} must be {kind} {bound}, got {value!r}")
    return value  # type: ignore[return-value]


class _Request:
    __slots__ = ("prompt_len", "seen", "tree")

    def __init__(self, tree: SuffixTree | None, prompt_len: int) -> None:
        self.tree, self.prompt_len = tree, prompt_len  # tree: None with the native backend
        self.seen = prompt_len  # history tokens already in the trees


@dataclass
class SuffixTrace(ReplayTrace):
    """A suffix replay's steps plus what it knows about the tokens past the logged output.

    vLLM's cache learns every token of the final step, also those past the output it returns (draft
    tokens accepted past ``max_tokens`` or after the EOS, and the bonus token after them). When the
    final step accepted up to the output's end (``open_end``), a live server learned up to
    ``tail_bound`` more tokens: ``tail_learned`` of them the replay learned too (from the server's
    final-step accepted count), ``tail_unknown`` it could not. ``first_uncertain``: index of the first
    step whose draft could differ because of unknown tokens learned from earlier requests (None: every
    step is exact); ``checked`` is False where that could not be decided (native backend, or an
    earlier request's tail of unknown length). With the server's final-step count, the final step's
    ``accepted`` is that count (vLLM counts acceptance before it cuts the output); without it, it
    counts the logged tokens only: a lower bound there."""

    final_draft: list[int] = field(default_factory=list)
    open_end: bool = False
    tail_bound: int = 0
    tail_learned: list[int] = field(default_factory=list)
    tail_unknown: int = 0
    first_uncertain: int | None = None
    checked: bool = True
    #: tokens in the global cache (from earlier requests' tails) that a live server learned and the
    #: replay could not: 0 means this request's figures are exact
    cache_unknown: int = 0
    #: with ``SuffixDrafter(bounds=True)``: [low, high] of drafts, draft tokens and accepted tokens over
    #: the two extremes of what the server learned and accepted past the cuts
    bounds: CountBounds | None = None
    #: with bounds: the draft at every output position (``_suffix_positions``) and the final-step count
    positions: Any = field(default=None, repr=False)
    pinned_final: int | None = None


def _logged_at(k: int, final_accepted: int | None, server_steps: Sequence[tuple[int, int]] | None,
               logged_max_drafted: int | None) -> tuple[int | None, Sequence[tuple[int, int]] | None]:
    """A logged server's counts describe a replay at k only if that server could have run at k: none
    of its steps drafted more than k (the caller knows the rest: simulate passes them when it replays
    one k, the one the user names). Else they are left out; the final-step count defaults to the
    steps' last."""
    steps = None if server_steps is None else [(int(d), int(a)) for d, a in server_steps]
    if steps:
        logged_max_drafted = max(max(d for d, _ in steps), logged_max_drafted or 0)
        final_accepted = steps[-1][1] if final_accepted is None else final_accepted
    if logged_max_drafted is not None and logged_max_drafted > k:
        return None, None
    return final_accepted, steps or None


def _learn_past_end(trace: SuffixTrace, accepted_past: list[int], bonus: int | None) -> None:
    """What a final step whose accepted count is known taught the cache past the output: the draft
    tokens it accepted there and its bonus token (one unknown token where the log lacks it)."""
    trace.tail_learned = accepted_past + ([int(bonus)] if bonus is not None else [])
    trace.tail_unknown = 0 if bonus is not None else 1


@register_drafter("suffix")
class SuffixDrafter:
    """Suffix decoding with vLLM's ``suffix_decoding_*`` options and defaults.

    Stateful across requests (the global tree learns every output), so replaying a workload must
    feed requests in arrival order through one drafter, and a sweep over k needs one drafter per k.

    ``backend``: ``"python"`` (the trees in this module), ``"native"`` (ArcticInference's own C++
    ``SuffixDecodingCache``, the optional extra ``specgauge[suffix]``), or ``"auto"`` (native when
    importable; ``SPECGAUGE_SUFFIX_BACKEND`` overrides it). Both give identical drafts.
    """

    kind: ClassVar[str] = "suffix"
    deterministic: ClassVar[bool] = True
    stateful: ClassVar[bool] = True  # the global tree learns every output

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
        if track_unknown_tails or bounds:  # the bound needs the python trees' counts
            if backend == "native":
                raise ValueError("suffix drafter: track_unknown_tails and bounds need backend 'python' (or 'auto')")
            self.backend = "python"
        #: unknown tokens at the ends of cached outputs (None: not tracked)
        self.unknown_tails = UnknownTails() if track_unknown_tails or bounds else None
        #: bounds: this cache is one extreme of what a server did past each cut its counters do not pin
        #: ("low": accepted nothing there, "high": accepted the whole final draft), each leaving one
        #: unknown token (the correction / bonus) that ``unknown_tails`` tracks; ``_high`` is the other
        self._world: str | None = "low" if bounds else None
        self._high: SuffixDrafter | None = None
        if bounds:
            self._high = SuffixDrafter(
                num_speculative_tokens, suffix_decoding_max_tree_depth, suffix_decoding_max_cached_requests,
                suffix_decoding_max_spec_factor, suffix_decoding_min_token_prob, max_model_len, self.backend,
                track_unknown_tails=True)
            self._high._world = "high"
        self._unpinned_tails = 0  # open ends so far whose tail the server's counts did not pin
        self._unknown_by_req: dict[str, int] = {}  # cached request -> unknown tokens after its output
        self.cache_unknown = 0  #: unknown tokens in the global tree now
        self._native = NativeSuffixCache(self.max_tree_depth, self.max_cached_requests) if self.backend == "native" else None
        self.global_tree = SuffixTree(self.max_tree_depth)
        self._limits = spec_limits(self.max_tree_depth, self.max_spec_factor, 0.0)
        self._min_prob = f32(self.min_token_prob)
        self._active: dict[str, _Request] = {}
        self._req_to_seq: dict[str, int] = {}  # insertion order = FIFO eviction order
        self._seq_to_req: dict[int, str] = {}
        self._next_seq = 0

    # -- Drafter protocol -------------------------------------------------------------------------
    def begin(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        """``start_request``: a local tree over the prompt; a global slot (FIFO eviction)."""
        if request_id in self._active:
            raise ValueError(f"suffix drafter: request {request_id!r} is already active")
        if self._native is not None:
            self._native.start(request_id, [int(t) for t in prompt_ids])
            self._active[request_id] = _Request(None, len(prompt_ids))
            return
        if request_id in self._req_to_seq:  # vLLM's proposer evicts a reused id's cached response
            self._evict(request_id)
        tree = SuffixTree(self.max_tree_depth)
        tree.extend(0, prompt_ids)
        self._active[request_id] = _Request(tree, len(prompt_ids))
        if self.max_cached_requests != 0:
            self._allocate(request_id)

    def propose(self, request_id: str, history: Sequence[int], k: int) -> list[int]:
        """Learn the tokens added since the last call, then speculate from the last tokens."""
        req = self._request(request_id)
        k = int(_check("k", k, 1))
        n = len(history)
        if self.max_model_len is not None:
            if n >= self.max_model_len:  # vLLM skips the request before learning its new tokens
                return []
            k = min(k, self.max_model_len - n - 1)
        self._learn(request_id, req, history)
        context = [int(t) for t in history[max(0, n - self.max_tree_depth) :]]
        if self._native is not None:
            return self._native.speculate(request_id, context, k, self.max_spec_factor, self.min_token_prob)
        limits = self._limits
        l_score, local, _, _ = best_draft(req.tree.root, context, (), k, limits, self._min_prob, -1.0)  # type: ignore[union-attr]
        g_score, glob, _, _ = best_draft(self.global_tree.root, context, (), k, limits, self._min_prob, max(l_score, 0.0))
        return glob if glob else local  # the global draft won only if it scored more (C++: local on ties)

    def end(self, request_id: str, output_ids: Sequence[int]) -> None:
        """The rest of the output enters the global tree; the local tree is dropped (``stop_request``).

        In vLLM the final step's tokens reach the trees through one last propose call, which skips a
        request that has reached ``max_model_len``: then they are not learned here either."""
        req = self._request(request_id)
        if self.max_model_len is None or req.prompt_len + len(output_ids) < self.max_model_len:
            self._learn(request_id, req, output_ids, offset=req.prompt_len)
        del self._active[request_id]
        if self._native is not None:
            self._native.stop(request_id)

    def replay(
        self, request_id: str, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int,
        final_accepted: int | None = None, bonus: int | None = None,
        server_steps: Sequence[tuple[int, int]] | None = None, logged_max_drafted: int | None = None,
    ) -> SuffixTrace:
        """The whole lifecycle of one request: the same steps and numbers as ``replay_by_stepping``
        (begin, one propose per decode step, end), without its per-step overhead. The python backend
        reads match nodes off the trees' cursors instead of walking from the root.

        ``final_accepted``: the server's accepted count at this request's final step (vLLM's
        ``per_step_accepted[-1]``), when known: the draft tokens it accepted past the output's end
        are then learned as vLLM learned them; ``bonus``: the token the server emitted after them,
        when known too (else it is an unknown token in the cache, see ``SuffixTrace``);
        ``server_steps``: the server's (drafted, accepted) per drafting step of this request (vLLM's
        ``per_step_drafted`` / ``per_step_accepted``), when known: they fix which of the paths the
        bounds allow the server took, so its final step and what it taught the cache past the output
        (``_suffix_positions.server_final``), where an uncertain step would otherwise leave them open;
        ``final_accepted`` defaults to their last. ``logged_max_drafted``: the most any of the logged
        server's steps of this request drafted; the counts are left out where no server at this k could
        have made them (``_logged_at``). The request's own bounds never use ``server_steps`` (only
        ``final_accepted``).

        With ``bounds``, the request is also replayed through the other extreme's cache and the trace
        carries ``bounds`` (``_suffix_positions.CountBounds``): this cache learns nothing past a cut the
        server's counters do not pin, the other one learns the whole final draft there (and counts it
        accepted, as the server would); the figures returned are this cache's. While every open end
        so far was pinned, the bounds are sound (they also cover the unknown bonus tokens)."""
        k = int(_check("k", k, 1))
        final_accepted, server_steps = _logged_at(k, final_accepted, server_steps, logged_max_drafted)
        if self._high is not None:
            hi = self._high.replay(request_id, prompt_ids, output_ids, k, final_accepted, bonus, server_steps)
        tokens = [int(t) for t in prompt_ids] + [int(t) for t in output_ids]
        if self._high is not None:
            sound = self._unpinned_tails == 0
            lo = self._replay_gc(request_id, tokens, len(prompt_ids), k, final_accepted, bonus, server_steps)
            lo.bounds = CountBounds.of(lo, hi, len(output_ids), k, sound=sound)
            if lo.open_end and final_accepted is None:  # as a trace without bounds says it
                lo.tail_unknown = lo.tail_bound
            return lo
        return self._replay_gc(request_id, tokens, len(prompt_ids), k, final_accepted, bonus, server_steps)

    def _replay_gc(self, request_id: str, tokens: list[int], prompt_len: int, k: int,
                   final_accepted: int | None, bonus: int | None,
                   server_steps: Sequence[tuple[int, int]] | None = None) -> SuffixTrace:
        if self._native is not None:
            return self._replay(request_id, tokens, prompt_len, k, final_accepted, bonus)
        # the trie holds no reference cycles, so pausing the cyclic collector loses nothing; it would
        # otherwise rescan the millions of tree nodes as they are allocated (3x slower)
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            return self._replay(request_id, tokens, prompt_len, k, final_accepted, bonus, server_steps)
        finally:
            if gc_was_on:
                gc.enable()

    def _replay(self, request_id: str, tokens: list[int], prompt_len: int, k: int,
                final_accepted: int | None, bonus: int | None,
                server_steps: Sequence[tuple[int, int]] | None = None) -> SuffixTrace:
        self.begin(request_id, tokens[:prompt_len])
        req = self._active[request_id]
        drafted: list[int] = []
        accepted: list[int] = []
        draft: list[int] = []
        first_uncertain: int | None = None
        # with bounds, the interval check serves the sound bounds only: once an open end went unpinned
        # they are the two extremes, and the check (which the unknown runs make costlier) stops
        checked = self.unknown_tails is not None and (self._world is None or self._unpinned_tails == 0)
        if len(tokens) - prompt_len > 1:
            if self._native is not None:
                drafted, accepted, req.seen, draft = self._native.replay_steps(
                    request_id, tokens, prompt_len, req.seen, k, self.max_spec_factor, self.min_token_prob,
                    self.max_model_len)
            elif self._world is not None and self._unpinned_tails == 0:  # sound bounds: a draft per position
                from specgauge.drafters._suffix_positions import replay_path, replay_positions

                positions, req.seen = replay_positions(
                    req.tree, self.global_tree, self._req_to_seq.get(request_id), tokens, prompt_len,  # type: ignore[arg-type]
                    req.seen, k, self._limits, self._min_prob, self.max_model_len,
                    self.unknown_tails if checked else None)
                drafted, accepted, draft, first_uncertain = replay_path(positions, len(tokens) - prompt_len)
            else:
                from specgauge.drafters._suffix_replay import replay_steps

                drafted, accepted, req.seen, draft, first_uncertain = replay_steps(
                    req.tree, self.global_tree, self._req_to_seq.get(request_id), tokens, prompt_len,  # type: ignore[arg-type]
                    req.seen, k, self._limits, self._min_prob, self.max_model_len,
                    self.unknown_tails if checked else None)
        trace = SuffixTrace(np.asarray(drafted, dtype=np.int64), np.asarray(accepted, dtype=np.int64),
                            final_draft=list(draft), first_uncertain=first_uncertain, checked=checked,
                            cache_unknown=self._cache_unknown())
        final: tuple[int, int] | None = None  # the server's final step (position, accepted), where known
        unknown_run = 0  # > 0: which step was the server's final one is open, so its tail is: at most this long
        if self._world is not None and self._unpinned_tails == 0 and len(tokens) - prompt_len > 1:
            trace.positions, trace.pinned_final = positions, final_accepted
            if first_uncertain is not None and checked:
                from specgauge.drafters._suffix_positions import final_step_known, server_final

                n_out = len(tokens) - prompt_len
                # the tokens past the end: at most the final step's accepted ones and the bonus
                run = (final_accepted if final_accepted is not None else k) + 1
                if server_steps is not None:
                    final = server_final(positions, n_out, server_steps)
                    if final is None:
                        unknown_run = run  # no one final step fits the server's steps
                    elif final[0] == 0:
                        final = None  # the final step drafted nothing: no tail
                else:
                    start = 1 + sum(accepted[:first_uncertain]) + first_uncertain
                    if not final_step_known(positions, n_out, start):
                        unknown_run = run
        if final is not None:
            self._server_tail(trace, len(tokens) - prompt_len, final, bonus)
        else:
            self._tail(trace, len(tokens) - prompt_len, final_accepted, bonus)
        if unknown_run:  # learn none of the replay's own guess past the end: a run of unknown tokens
            trace.open_end, trace.tail_learned = True, []
            trace.tail_bound = trace.tail_unknown = unknown_run
        self._finish(request_id, req, tokens[prompt_len:] + trace.tail_learned, trace.tail_unknown)
        return trace

    def _tail(self, trace: SuffixTrace, n_out: int, final_accepted: int | None, bonus: int | None) -> None:
        """What the final step adds past the output: the rest of an accepted-to-the-end draft
        (``final_accepted`` says how much of it) and the bonus token."""
        if not trace.drafted.size:
            return
        a = int(trace.accepted[-1])
        pos = 1 + int(trace.accepted[:-1].sum()) + trace.drafted.size - 1  # where the final step began
        if a < n_out - pos:  # the output's last token was the step's bonus/correction token
            return
        trace.open_end = True
        d = trace.final_draft
        trace.tail_bound = len(d) - a + 1
        if final_accepted is None and self._world is not None:  # an extreme: all of it accepted, or none
            self._unpinned_tails += 1  # from here on the bounds are the extremes, no guarantee
            final_accepted = len(d) if self._world == "high" else a
        if final_accepted is not None and a <= final_accepted <= len(d):
            _learn_past_end(trace, d[a:final_accepted], bonus)
            trace.accepted[-1] = final_accepted  # as the server counts it: before cutting the output
        else:  # how many of the draft's remaining tokens the server accepted is unknown
            trace.tail_unknown = trace.tail_bound

    def _server_tail(self, trace: SuffixTrace, n_out: int, final: tuple[int, int], bonus: int | None) -> None:
        """``_tail`` from the server's own final step (``server_final``: its position p and accepted count
        a, the draft at p certain): the draft tokens it accepted past the output and the bonus token."""
        p, a = final
        rest = n_out - p
        d = trace.positions.drafts[p]
        if a < rest:  # the output's last token was that step's correction / bonus token
            return
        trace.open_end = True
        trace.tail_bound = len(d) - rest + 1
        _learn_past_end(trace, d[rest:a], bonus)

    def _finish(self, request_id: str, req: _Request, learn: list[int], unknown: int) -> None:
        """``end`` with the tail: vLLM learns the final step only while the request is below
        ``max_model_len`` (counting the unknown tokens too)."""
        if self.max_model_len is None or req.prompt_len + len(learn) + min(unknown, 1) < self.max_model_len:
            self._learn(request_id, req, learn, offset=req.prompt_len)
            seq = self._req_to_seq.get(request_id)
            if unknown and self.max_cached_requests != 0:
                self._unknown_by_req[request_id] = unknown
                self.cache_unknown += unknown
            if unknown and seq is not None and self.unknown_tails is not None:
                self.unknown_tails.add(self.global_tree, seq, length=unknown)
        del self._active[request_id]
        if self._native is not None:
            self._native.stop(request_id)

    # -- internals --------------------------------------------------------------------------------
    def _cache_unknown(self) -> int:
        """Unknown tail tokens of requests still in the global cache (evicted ones left with them)."""
        cached = self._native.cache.cached_requests if self._native is not None else self._req_to_seq
        gone = [r for r in self._unknown_by_req if r not in cached]
        for r in gone:
            self.cache_unknown -= self._unknown_by_req.pop(r)
        return self.cache_unknown

    def _request(self, request_id: str) -> _Request:
        try:
            return self._active[request_id]
        except KeyError:
            raise ValueError(f"suffix drafter: request {request_id!r} was not begun (or already ended)") from None

    def _learn(self, request_id: str, req: _Request, tokens: Sequence[int], offset: int = 0) -> None:
        """Add ``tokens[req.seen - offset:]`` (tokens hold history from position ``offset`` on)."""
        new = [int(t) for t in tokens[req.seen - offset :]]
        if not new:
            return
        if self._native is not None:
            self._native.learn(request_id, new)
        else:
            req.tree.extend(0, new)  # type: ignore[union-attr]
            seq = self._req_to_seq.get(request_id)
            if seq is not None:
                self.global_tree.extend(seq, new)
        req.seen += len(new)

    def _allocate(self, request_id: str) -> None:
        while True:
            seq = self._next_seq
            self._next_seq = (self._next_seq + 1) & 0x7FFFFFFF
            if seq not in self._seq_to_req or self._seq_to_req[seq] not in self._active:
                break
        if seq in self._seq_to_req:  # wrapped around onto an inactive cached request
            self._evict(self._seq_to_req[seq])
        self._req_to_seq[request_id] = seq
        self._seq_to_req[seq] = request_id
        while len(self._req_to_seq) > self.max_cached_requests:
            oldest = next(r for r, s in self._req_to_seq.items() if s != seq)
            self._evict(oldest)

    def _evict(self, request_id: str) -> None:
        seq = self._req_to_seq.pop(request_id)
        del self._seq_to_req[seq]
        self.global_tree.remove(seq)
        if self.unknown_tails is not None:
            self.unknown_tails.forget(seq)
