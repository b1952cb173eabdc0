"""The one offline replay: a logged request becomes token ids once, a draft method becomes traces per k.

Two halves, both free of I/O beyond loading a drafter:

* **Requests.** ``replayed_request(item, tok)`` turns a workload item with a logged response into a
  ``ReplayedRequest`` (prompt and output ids, whether they are exact) or says why it cannot be replayed.
  One exactness rule: logged token ids are exact; a prompt re-encoded from a list of ids by an exact
  tokenizer too; re-rendered chat text and re-tokenised outputs are approximate. Ids outside the
  tokenizer's vocabulary fail with the place named.
* **Methods.** ``MethodSpec`` names a draft method and its options (``--method`` text or a vLLM
  ``--speculative-config``); ``MethodReplay`` replays it at every k on requests fed in arrival order.
  How is decided by the drafter's contract (``drafters.base``), never by its name: a
  ``WholeOutputReplay`` drafter (a draft model, a hidden-state head) gives every k from one
  ``accept_runs`` pass per request (a ``TeacherForcedReplay`` one, a hidden-state head, also its
  teacher-forced figure from that pass: ``ReplayTrace.teacher_forced``); a stateless drafter (``stateful = False``) serves every stream; a
  stateful one (suffix) gets one drafter per stream, fed in order. A drafter's own fast ``replay`` is
  used where it has one, else the engine loop (``replay_by_stepping``).
* **Blocks.** A drafter with a ``prefetch(requests)`` hook (a hidden-state head: the target's passes)
  is handed, before each block of requests is replayed, the whole block (``MethodReplay.prefetch``;
  ``prefetched`` wraps a request stream so): it runs their work together and the replay reads it back,
  request by request, in the same order with the same results (a hidden-state head: to float rounding,
  docs/hidden-states.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field

from specgauge.config import ACCEPTANCE_KEYS, SpeculativeConfig
from specgauge.drafters.base import (
    Drafter,
    ReplayTrace,
    ServerReport,
    accepted_options,
    final_step_bounds,
    is_stateful,
    make_drafter,
    offers_whole_output,
    replay_by_stepping,
    trace_from_runs,
)
from specgauge.errors import UserError
from specgauge.workload.schema import WorkloadItem
from specgauge.workload.tokenizer import Tokenizer, model_match, reply_text, resolve_tokenizer

NO_RESPONSE = "no logged response"
EMPTY_OUTPUT = "empty logged output"
#: ``--method`` spellings of vLLM's method names
ALIASES = {"draft": "draft_model", "prompt_lookup": "ngram"}


class ReplayError(UserError, ValueError):
    """A request or a draft method that cannot be replayed; the message names the place."""


# ------------------------------------------------------------------------------------------ requests


@dataclass(frozen=True, slots=True)
class ReplayedRequest:
    """One logged request ready for replay, its ids tokenised once."""

    id: str
    source: str
    segment: str
    prompt_ids: list[int]
    output_ids: list[int]
    exact: bool  #: logged token ids (or ids an exact tokenizer reproduces), not re-tokenised text
    #: for a re-tokenised request: is the tokenizer its model's (None: it names no model, or exact)
    model_match: bool | None = None
    temperature: float | None = None
    #: the cache it went through (``--partition-by`` value; "" = one stream)
    stream: str = ""
    #: its logged OpenAI tool calls were written back as text (``workload.tokenizer.reply_text``: "template"
    #: by the chat template, "hermes" without one); None: none, or token ids were logged
    tool_calls: str | None = None

    @property
    def greedy(self) -> bool:
        """Sent at temperature 0: every run reproduces the logged output."""
        return self.temperature == 0


def token_ids(item: WorkloadItem, tok: Tokenizer) -> tuple[list[int], list[int], bool]:
    """(prompt ids, output ids, exact) of an item with a logged response; ids out of ``tok``'s
    vocabulary (when it is exact and knows its size) raise ``ReplayError`` naming the record."""
    prompt, out, exact, _ = _token_ids(item, tok)
    return prompt, out, exact


def _token_ids(item: WorkloadItem, tok: Tokenizer) -> tuple[list[int], list[int], bool, str | None]:
    """``token_ids`` and how the reply's OpenAI tool calls were written back (``reply_text``; None: ids
    logged, or no calls)."""
    req, resp = item.request, item.response
    assert resp is not None
    exact, calls = True, None
    if resp.prompt_token_ids is not None:
        prompt = list(resp.prompt_token_ids)
    else:
        prompt = tok.encode_request(req)
        exact = tok.exact and isinstance(req.prompt, list)  # re-rendered chat prompts are approximate
    if resp.output_token_ids is not None:
        out = list(resp.output_token_ids)
    else:  # a reply of tool calls only is output the model generated too: written back as it wrote them
        text, calls = reply_text(tok, req, resp.text, resp.tool_calls)
        out, exact = tok.encode(text), False
    vs = tok.vocab_size
    if vs is not None and tok.exact:
        for field, ids in (("response.prompt_token_ids", prompt), ("response.output_token_ids", out)):
            bad = next((t for t in ids if t >= vs), None)
            if bad is not None:
                raise ReplayError(
                    f"{item.source}: request {req.id}: {field}: token id {bad} is outside the tokenizer's vocabulary "
                    f"(size {vs}); were these ids made by another model's tokenizer?"
                )
    return prompt, out, exact, calls


def replayed_request(item: WorkloadItem, tok: Tokenizer, stream: str = "") -> ReplayedRequest | str:
    """The item as a ``ReplayedRequest``, or why it has nothing to replay (``NO_RESPONSE`` /
    ``EMPTY_OUTPUT``)."""
    if item.response is None:
        return NO_RESPONSE
    prompt, out, exact, calls = _token_ids(item, tok)
    if not out:
        return EMPTY_OUTPUT
    req = item.request
    return ReplayedRequest(id=req.id, source=item.source, segment=req.segment, prompt_ids=prompt, output_ids=out,
                           exact=exact, model_match=None if exact else model_match(tok, item.named_model()),
                           temperature=req.temperature, stream=stream, tool_calls=calls)


# ------------------------------------------------------------------------------------------- methods


class MethodSpec(BaseModel):
    """One draft method to replay: ``ngram``, ``suffix``, ``draft_model:PATH`` or any registered kind,
    ``KIND:DIR`` for one that loads weights (``eagle3:DIR``: vLLM's ``{"method": KIND, "model": DIR}``)."""

    label: str
    kind: str
    options: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, spec: SpeculativeConfig | None = None, draft_sampling: str = "greedy") -> MethodSpec:
        """``--method`` text; ``spec`` (``--speculative-config``) gives the options of the method it names."""
        text = text.strip()
        kind, _, arg = text.partition(":")
        kind = ALIASES.get(kind, kind)
        opts: dict[str, Any] = {}
        if spec is not None and spec.method == kind:
            opts.update({k: v for k, v in spec.model_dump().items() if v is not None and k not in ("method", "model")})
            arg = arg or spec.model or ""
        if kind == "draft_model" and not arg:
            raise ReplayError(f"--method {text}: a draft model needs its directory: draft_model:PATH")
        if arg and not Path(arg).is_dir():
            raise ReplayError(f"--method {text}: no such directory {arg!r}")
        if kind == "draft_model":
            if draft_sampling not in ("greedy", "probabilistic"):
                raise ReplayError(f"--draft-sampling {draft_sampling!r}: expected greedy or probabilistic")
            return cls(label=f"draft_model:{Path(arg).name}", kind=kind, options={"model": arg, "sampling": draft_sampling})
        if arg:
            return cls(label=f"{kind}:{Path(arg).name}", kind=kind, options={**opts, "model": arg})
        return cls(label=kind, kind=kind, options=opts)

    @classmethod
    def from_config(cls, cfg: SpeculativeConfig, kind: str | None = None) -> MethodSpec:
        """The method of a parsed vLLM ``--speculative-config`` (its k is the caller's)."""
        kind = kind or str(cfg.method)
        skip = ("method", "num_speculative_tokens", *ACCEPTANCE_KEYS)  # the acceptance rule is not the drafter's
        opts = {k: v for k, v in cfg.model_dump().items() if v is not None and k not in skip}
        return cls(label=f"{kind}:{Path(cfg.model).name}" if cfg.model else kind, kind=kind, options=opts)

    @property
    def probabilistic(self) -> bool:
        """A draft model drafting by sampling (a lower bound from target logprobs, not a trace)."""
        return self.options.get("sampling") == "probabilistic"

    def drafter_options(self, k: int, **context: Any) -> dict[str, Any]:
        """The drafter's options for one k: vLLM's keys completed with vLLM's defaults through
        ``SpeculativeConfig``, plus ``context`` (``target_vocab_size``, ``max_model_len``…; None values
        left out), each kept only where the drafter takes it."""
        cfg = SpeculativeConfig.model_validate({**self.options, "method": self.kind, "num_speculative_tokens": k})
        opts = {n: v for n, v in cfg.model_dump().items() if v is not None and n != "method"}
        opts.update({n: v for n, v in context.items() if v is not None})
        return accepted_options(self.kind, opts)


def replay_one(drafter: Drafter, rid: str, prompt: Sequence[int], out: Sequence[int], k: int,
               server: ServerReport | None = None) -> ReplayTrace:
    """One request through one drafter at k: its fast ``replay`` where it has one, else the engine loop.
    ``server``: what the logged server reported of the request, passed (as ``server=``) to a drafter
    that says it learns from it (``replays_server_report``, suffix decoding), to no other."""
    fast = getattr(drafter, "replay", None)
    if fast is None:
        return replay_by_stepping(drafter, rid, prompt, out, k)
    if server is not None and getattr(drafter, "replays_server_report", False):
        return fast(rid, prompt, out, k, server=server)
    return fast(rid, prompt, out, k)


class MethodReplay:
    """One draft method at every k of ``ks``, fed requests in arrival order (see the module's docstring).
    ``context``: options every drafter of it may take (``target_vocab_size``, ``max_model_len``…).
    ``where`` prefixes the ``ReplayError`` a failing drafter becomes (default ``--method LABEL``); ``""``:
    the drafter's own error passes unchanged (a caller that words it itself)."""

    def __init__(self, spec: MethodSpec, ks: Sequence[int], where: str | None = None, **context: Any) -> None:
        self.spec, self.ks, self.context = spec, list(ks), context
        self.where = f"--method {spec.label}" if where is None else where
        self.stateful = is_stateful(spec.kind)
        self.whole_output = offers_whole_output(spec.kind)
        self.model: Any = None  #: the one WholeOutputReplay drafter
        try:
            if self.whole_output:
                self.model = make_drafter(spec.kind, **spec.drafter_options(max(self.ks), **context))
                self._streams: dict[str, dict[int, Drafter]] = {}
            else:
                self._streams = {"": self._new_drafters()}
        except (ValueError, TypeError, OSError) as e:
            if not self.where:
                raise
            raise ReplayError(f"{self.where}: {e}") from None

    def _new_drafters(self) -> dict[int, Drafter]:
        return {k: make_drafter(self.spec.kind, **self.spec.drafter_options(k, **self.context)) for k in self.ks}

    def drafters(self, stream: str = "") -> dict[int, Drafter]:
        """The drafter per k that replays ``stream`` (stateless methods: one set for every stream)."""
        if not self.stateful:
            return self._streams[""]
        d = self._streams.get(stream)
        if d is None:
            d = self._streams[stream] = self._new_drafters()
        return d

    def traces(self, rid: str, source: str, prompt: list[int], out: list[int], stream: str = "",
               ks: Sequence[int] | None = None, server: ServerReport | None = None) -> dict[int, ReplayTrace]:
        """Traces for ``ks`` (default: every k) of one request from its ids; ``stream`` picks a
        stateful drafter's cache; ``server``: the logged server's report of the request (``replay_one``).
        A stateless drafter's trace gets guaranteed ``bounds`` where its final step's draft still matched
        at the output's end (``base.final_step_bounds``: the server counted what it accepted past it); a
        stateful drafter gives its own (suffix with ``bounds=True``)."""
        ks = self.ks if ks is None else ks
        traces = self._traces(rid, prompt, out, stream, ks, server, source)
        if not self.stateful:  # the one count a stateless replay cannot know: the final step's past the end
            for t in traces.values():
                if t.bounds is None:
                    t.bounds = final_step_bounds(t, len(out))
        mismatch = self._target_mismatch(prompt, out, stream)
        for t in traces.values():
            t.target_mismatch = mismatch
        return traces

    def _target_mismatch(self, prompt: list[int], out: list[int], stream: str) -> int | None:
        """Where the teacher-forced target of a hidden-state method does not reproduce the logged output
        (``HiddenFeed.target_mismatch``, from the pass the replay made); None elsewhere."""
        seq = tuple(int(t) for t in [*prompt, *out])
        for d in [self.model] if self.whole_output else list(self.drafters(stream).values()):
            cached = getattr(d, "_final", None)  # the pass this replay made (HiddenFeed.target_pass)
            if cached is not None and cached[0] == seq:
                return d.target_mismatch(prompt, out)  # type: ignore[no-any-return]
        return None

    def _traces(self, rid: str, prompt: list[int], out: list[int], stream: str, ks: Sequence[int],
                server: ServerReport | None, source: str) -> dict[int, ReplayTrace]:
        try:
            if self.whole_output:
                both = getattr(self.model, "accept_runs_and_teacher_forced", None)  # TeacherForcedReplay
                if both is None:
                    runs = self.model.accept_runs(prompt, out, max(ks))
                    return {k: trace_from_runs(runs, k) for k in ks}
                runs, tf = both(prompt, out, max(ks))
                return {k: replace(trace_from_runs(runs, k), teacher_forced=trace_from_runs(tf, k)) for k in ks}
            drafters = self.drafters(stream)
            return {k: replay_one(drafters[k], rid, prompt, out, k, server) for k in ks}
        except (ValueError, IndexError) as e:
            if not self.where:
                raise
            raise ReplayError(f"{source}: request {rid}: {self.where}: {e}") from None

    def replay(self, req: ReplayedRequest, ks: Sequence[int] | None = None) -> dict[int, ReplayTrace]:
        return self.traces(req.id, req.source, req.prompt_ids, req.output_ids, req.stream, ks)

    def _prefetching(self) -> list[Any]:
        """This method's drafters with a ``prefetch`` hook (stateless ones only: a stream-ordered
        drafter learns as it replays)."""
        if self.stateful:
            return []
        ds = [self.model] if self.whole_output else list(self.drafters().values())
        return [d for d in ds if callable(getattr(d, "prefetch", None))]

    @property
    def block_tokens(self) -> int:
        """Tokens (prompt + output) of the requests this method wants handed together to ``prefetch``
        (its drafter's ``replay_batch_tokens``); 0: no drafter has the hook, or batching is off."""
        return max((int(getattr(d, "replay_batch_tokens", 0)) for d in self._prefetching()), default=0)

    def prefetch(self, requests: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
        """Hand the drafters with a ``prefetch`` hook the (prompt ids, output ids) of the requests about
        to be replayed, in order (``prefetched`` calls it per block)."""
        for d in self._prefetching():
            d.prefetch(requests)


T = TypeVar("T")


def prefetched(items: Iterable[T], ids: Callable[[T], tuple[Sequence[int], Sequence[int]] | None],
               runners: Sequence[MethodReplay]) -> Iterator[T]:
    """``items`` in their order, read a block ahead: consecutive items whose prompt + output tokens
    (``ids``; None: an item with nothing to replay) sum to at most the runners' largest ``block_tokens``
    (one longer item alone), the block handed to every runner's ``prefetch`` before its first item is
    yielded. An error ``items`` raises (a record that cannot be read) is raised after the items before
    it, where an unblocked loop would meet it. No runner with a hook: ``items`` unchanged, not read ahead.

    E.g. budget 10, tokens [4, 4, 4, 12, 1] -> blocks [4, 4] [4] [12] [1]."""
    budget = max((r.block_tokens for r in runners), default=0)
    if budget <= 0:
        yield from items
        return
    it = iter(items)
    nxt: list[T] = []  # the item that closed the previous block (it opens the next)
    while True:
        block, total, err, done = nxt, sum(_tokens(ids(x)) for x in nxt), None, False
        nxt = []
        while True:
            try:
                x = next(it)
            except StopIteration:
                done = True
                break
            except Exception as e:  # noqa: BLE001 - raised again below, in its place
                err = e
                break
            n = _tokens(ids(x))
            if block and total + n > budget:
                nxt = [x]
                break
            block.append(x)
            total += n
        reqs = [r for r in map(ids, block) if r is not None]
        if reqs:
            for runner in runners:
                runner.prefetch(reqs)
        yield from block
        if err is not None:
            raise err
        if done and not nxt:
            return


def _tokens(r: tuple[Sequence[int], Sequence[int]] | None) -> int:
    return 0 if r is None else len(r[0]) + len(r[1])


class LazyTokenizer:
    """A tokenizer loaded on first use: a tokenizer object, a spec for ``resolve_tokenizer``, or None
    (the default). For a planner over logs that may hold every id: until a request needs
    re-encoding, nothing loads and (``loaded`` False) logged ids are not checked against a vocabulary."""

    def __init__(self, tok: Tokenizer | str | None = None) -> None:
        self._spec = tok if tok is None or isinstance(tok, str) else None
        self._tok: Tokenizer | None = None if tok is None or isinstance(tok, str) else tok
        self.loaded = False

    def get(self) -> Tokenizer:
        if self._tok is None:
            self._tok = resolve_tokenizer(self._spec)
        self.loaded = True
        return self._tok

    @property
    def exact(self) -> bool:
        return self.get().exact

    @property
    def vocab_size(self) -> int | None:
        return self.get().vocab_size if self.loaded else None

    @property
    def name(self) -> str:
        return self.get().name

    def encode(self, text: str) -> list[int]:
        return self.get().encode(text)

    def decode(self, ids: list[int]) -> str:
        return self.get().decode(ids)

    def encode_request(self, request: Any) -> list[int]:
        return self.get().encode_request(request)

    def matches_model(self, model: str) -> bool:
        return bool(model_match(self.get(), model))
