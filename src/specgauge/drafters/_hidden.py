"""What every drafter that reads the target's hidden states shares (EAGLE-3 / MTP in ``eagle.py``,
DFlash in ``dflash.py``): finding the target a head belongs to and opening it as a
:class:`~specgauge.targets.base.Target` (the engine's own model, or transformers), loading the head
(``heads.loader``), the engine's feed of verified hidden states per request, and the checks on a logged
sequence before a replay, and the block of target passes an offline replay runs together
(``HiddenFeed.prefetch``)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

#: padded tokens of the requests whose target passes an offline replay runs together (``HiddenFeed.prefetch``;
#: simulate ``--replay-batch-tokens``) on a GPU; 0: one request per pass, the default on the CPU, where
#: batching measured no faster (benchmarks/hidden_replay_speed.py: docs/hidden-states.md). Bounds the
#: passes held (one block per target and layer set) and each batched forward (rows x longest).
REPLAY_BATCH_TOKENS = 8192


def default_batch_tokens(device: Any) -> int:
    """``REPLAY_BATCH_TOKENS`` for a target on a GPU (a forward of a few hundred tokens costs what one
    of a few thousand does: shared/design.md, "the step cost has a knee"), 0 on the CPU."""
    return 0 if getattr(device, "type", str(device)) == "cpu" else REPLAY_BATCH_TOKENS


def resolve_target(head_dir: Path, target: str | Path | None, default_target: str | Path | None = None) -> tuple[str | Path, str]:
    """The target a head belongs to, and where that came from (for errors): ``target`` if given; else
    what the head's config names (``target_model``, relative to the head's parent directory as the
    shipped heads carry it, or absolute; or a ``speculators`` verifier) when that is a directory here or
    a Hub id in the local Hugging Face cache; else ``default_target`` (simulate: the ``--tokenizer``
    directory when it holds a model). Nothing is downloaded: a name found nowhere here is an error that
    says so."""
    if target is not None:
        return target, "given (simulate: --target-model)"
    from specgauge.drafters.heads.config import named_target, read_config_json

    cfg = read_config_json(head_dir) if (head_dir / "config.json").is_file() else {}
    hint = named_target(cfg)
    if hint:
        cand = Path(hint) if Path(hint).is_absolute() else head_dir.parent / hint
        if cand.is_dir():
            return cand.resolve(), f"named by the head's config.json ({hint!r})"
        if _in_hub_cache(hint):
            return hint, f"named by the head's config.json ({hint!r}, in the local Hugging Face cache)"
    if _native_mtp(cfg):
        return head_dir.resolve(), "the head's own directory (native MTP: its layers are in the target's checkpoint)"
    if default_target is not None:
        return Path(default_target), "the --tokenizer directory (a model directory)"
    named = (f"its config.json names target {hint!r}, which is no directory here nor in the local Hugging Face "
             "cache (nothing is downloaded)" if hint else "its config.json names no target ('target_model')")
    raise ValueError(f"{head_dir}: a hidden-state head needs its target model and {named}: pass the target's "
                     "directory (simulate: --target-model DIR; target=DIR in the API)")


def _native_mtp(cfg: dict[str, Any]) -> bool:
    """A target checkpoint that carries its own MTP layers (``num_nextn_predict_layers`` /
    ``mtp_num_hidden_layers`` > 0 under an architecture whose MTP the heads model)."""
    from specgauge.drafters.heads.mtp_native import NativeMTPHead

    arch = set(cfg.get("architectures") or [])
    n = cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers") or 0
    return bool(arch & set(NativeMTPHead.architectures)) and int(n) > 0


def _in_hub_cache(name: str) -> bool:
    if name.count("/") != 1 or name.startswith((".", "/")):
        return False
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    return isinstance(try_to_load_from_cache(name, "config.json"), str)


def head_dir(kind: str, model: str | Path | None) -> Path:
    """The head's directory, checked to hold a ``config.json``."""
    if model is None:
        raise ValueError(f"method {kind!r} needs \"model\": the head's directory")
    path = Path(model)
    if not (path / "config.json").is_file():
        raise ValueError(f"{kind} head {path}: no config.json")
    return path


def open_target(kind: str, model_dir: Path, target: str | Path | None, target_model: Any,
                default_target: str | Path | None, device: str, dtype: Any,
                hidden_states: str | Path | None = None) -> tuple[Any, str]:
    """(the :class:`~specgauge.targets.base.Target`, where it came from for errors): the engine's own
    model when it hands one (``target_model``), else what :func:`resolve_target` finds, opened by
    ``targets.open.open_target`` (transformers, on ``device`` in ``dtype``; with ``hidden_states``, the
    vLLM dumps there, the target's checkpoint read only for what they do not hold)."""
    from specgauge.targets.base import TargetError
    from specgauge.targets.open import open_target as open_any

    if target_model is not None:
        return open_any(target_model), "the engine's target"
    spec, origin = resolve_target(model_dir, target, default_target)
    where = f"target {spec}: {origin}"
    try:
        return open_any(spec, device=device, dtype=dtype, hidden_states=hidden_states), where
    except TargetError as e:
        raise ValueError(f"{kind} head {model_dir}: {e} ({where})") from None


def replay_sequence(prompt_ids: Sequence[int], output_ids: Sequence[int], vocab_size: int) -> list[int]:
    """prompt + logged output as ints, checked: a non-empty prompt, every id inside the vocabulary."""
    if not prompt_ids:
        raise ValueError("replay needs a non-empty prompt")
    seq = [int(t) for t in (*prompt_ids, *output_ids)]
    bad = next((t for t in seq if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ValueError(f"token id {bad} outside the target's vocabulary (size {vocab_size})")
    return seq


class PassBlock:
    """The target passes of one block of requests, keyed by the tokens each ran over: what
    :meth:`HiddenFeed.prefetch` computed together and :meth:`HiddenFeed.target_pass` reads back. Filling
    it with the next block drops the passes that block does not hold (peak: one block)."""

    def __init__(self) -> None:
        self.passes: dict[tuple[int, ...], Any] = {}  # token ids -> TargetPass

    def fill(self, seqs: Iterable[Sequence[int]], run: Callable[[list[list[int]]], Iterable[Any]]) -> None:
        """Keep the passes of ``seqs`` already here, drop the rest, and add the missing ones from
        ``run(missing)`` (one pass per sequence, in the order given: shortest first, so that rows of like
        length share a forward and pad little). A pass ``run`` cannot make (a source error,
        the device out of memory) ends the filling quietly: the request's own pass runs when it is
        replayed, and fails there, naming the request, if it must."""
        import torch

        from specgauge.targets.base import TargetError

        want = dict.fromkeys(tuple(int(t) for t in s) for s in seqs)
        self.passes = {s: self.passes[s] for s in want if s in self.passes}  # the old block goes before the new runs
        todo = sorted((list(s) for s in want if s not in self.passes), key=len)
        if not todo:
            return
        try:
            for s, p in zip(todo, run(todo), strict=False):
                self.passes[tuple(s)] = p
        except (TargetError, ValueError, torch.OutOfMemoryError):
            pass

    def get(self, seq: Sequence[int]) -> Any:
        return self.passes.get(tuple(int(t) for t in seq))


#: target -> (layer ids, kv layers) -> its block: the drafters of one target (DFlash's one per k, two
#: methods with the same layers) share what one of them prefetched
_blocks: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], PassBlock]] = weakref.WeakKeyDictionary()


def pass_block(target: Any, layer_ids: Sequence[Any], kv_layers: Sequence[int]) -> PassBlock:
    """The block of ``target``'s passes at ``layer_ids`` with the KV of ``kv_layers``."""
    groups = _blocks.setdefault(target, {})
    return groups.setdefault((tuple(layer_ids), tuple(int(i) for i in kv_layers)), PassBlock())


class HiddenFeed:
    """The Drafter protocol of a head fed by the engine: ``observe_hidden`` queues the target's rows of
    the positions it verified, ``propose_batch`` drafts per request from them (``_propose_one``)."""

    kind: ClassVar[str] = ""
    head_method: ClassVar[str | None] = None  #: the head class's vLLM method when it is not ``kind`` (P-EAGLE: eagle3)
    deterministic: ClassVar[bool] = True  # greedy heads
    stateful: ClassVar[bool] = False
    _req: dict[str, Any]  # request id -> state with ``n`` (positions consumed) and ``pending`` rows

    def __init__(
        self,
        model: str | Path | None = None,
        target: str | Path | None = None,
        target_model: Any = None,
        default_target: str | Path | None = None,
        dtype: Any = "float32",
        device: str = "cpu",
        hidden_states: str | Path | None = None,
        max_model_len: int = 2048,
        num_speculative_tokens: int = 8,
        replay_batch_tokens: int | None = None,
        **_: Any,
    ) -> None:
        """Open the head at ``model`` and its target (the engine's ``target_model``, else the one
        :func:`resolve_target` finds, on ``device``; with ``hidden_states``, vLLM's dumps in that
        directory stand in for running it); the head runs in ``dtype`` (the target too, where this
        drafter opens it). ``replay_batch_tokens``: see :meth:`prefetch` (None: ``default_batch_tokens``
        of the target's device)."""
        from specgauge.drafters.heads.config import HeadLoadError
        from specgauge.drafters.heads.loader import load_head
        from specgauge.targets.base import TargetError
        from specgauge.targets.hf import pick_device, pick_dtype

        self.model_dir = head_dir(self.kind, model)
        try:
            dt = pick_dtype(dtype, pick_device(device))
        except TargetError as e:
            raise ValueError(str(e)) from None
        self.target, where = open_target(self.kind, self.model_dir, target, target_model, default_target, device, dt,
                                         hidden_states)
        try:
            self.head = load_head(self.model_dir, self.target, dt)
        except HeadLoadError as e:
            raise ValueError(f"{e} ({where})") from None
        if self.head.method != (self.head_method or self.kind):
            raise ValueError(f"{self.model_dir}: a {self.head.method} head, but method {self.kind!r} was asked for")
        self.options: dict[str, Any] = dict(_)  #: the method's other options (parallel_drafting, mtp_runner, ...)
        self.model = self.head  # what the engine's memory report counts
        self.hidden_layers: tuple[int | str, ...] = self.head.spec.aux_layer_ids
        self.max_len = max_model_len + num_speculative_tokens + 2
        self._dtype = dt
        self._device = self.head_device = next(self.head.parameters()).device
        self._req = {}
        if replay_batch_tokens is None:
            replay_batch_tokens = default_batch_tokens(self.target.device)
        if replay_batch_tokens < 0:
            raise ValueError(f"replay_batch_tokens must be >= 0 (0: one request per target pass), got {replay_batch_tokens}")
        self.replay_batch_tokens = int(replay_batch_tokens)

    # -- offline replay: the target's passes -------------------------------------------------------
    def _pass_layers(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """(the head's layer ids, the extra ids a pass also asks: the final norm's rows for
        :meth:`target_mismatch` where the head does not read them itself)."""
        ids = tuple(self.hidden_layers)
        return ids, (() if "final" in ids else ("final",))

    def prefetch(self, requests: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
        """Run the target passes of ``requests`` (prompt ids, output ids each: the block an offline
        replay is about to replay) together, for :meth:`target_pass` to read back: ``Target.passes``
        batches them, shortest first, within ``replay_batch_tokens`` padded tokens per forward
        (right-padded; causal, so a pad never reaches a real token). Sequences a replay would refuse
        are left to it (it says why, naming the request). Batching changes float rounding only: a
        row's sums run in another order, as a live server's step-by-step passes also do
        (docs/hidden-states.md, "How exact")."""
        if self.replay_batch_tokens <= 0:
            return
        seqs = []
        for p, o in requests:
            try:
                seq = replay_sequence(p, o, self.target.vocab_size)
            except ValueError:
                continue
            if len(seq) > 1:
                seqs.append(seq[:-1])
        ids, extra = self._pass_layers()
        kv = tuple(getattr(self.head, "kv_layer_ids", tuple)())
        budget = self.replay_batch_tokens
        pass_block(self.target, ids + extra, kv).fill(
            seqs, lambda todo: self.target.passes(todo, ids + extra, kv, token_budget=budget))

    def target_hidden(self, seq: Sequence[int]) -> Any:
        """The target's hidden states [T, L * H] (``hidden_layers`` side by side) at positions
        0..len(seq)-2: one teacher-forced pass over all but the last token, in the head's dtype."""
        return self.target_pass(seq, ())[0]

    def target_pass(self, seq: Sequence[int], kv_layers: Sequence[int]) -> tuple[Any, dict[int, tuple[Any, Any]]]:
        """:meth:`target_hidden` and, from the same pass, the keys/values of ``kv_layers`` (post-RoPE
        [T, hkv, D] each, in the head's dtype) — what Gemma 4's assistant reads. The pass also keeps the
        target's final-norm rows for :meth:`target_mismatch` (the last sequence's only). The pass is
        the one :meth:`prefetch` ran with its block where it did, else this sequence's own."""
        from specgauge.targets.base import TargetError

        ids, extra = self._pass_layers()
        p = pass_block(self.target, ids + extra, kv_layers).get(seq[:-1]) if self.replay_batch_tokens else None
        try:
            if p is None:
                p = self.target.run(seq[:-1], ids + extra, kv_layers=kv_layers)
        except TargetError:  # a source without the final norm (a dump without the checkpoint's norm)
            p, extra = self.target.run(seq[:-1], ids, kv_layers=kv_layers), ()
        final = p.hidden[:, (ids + extra).index("final")] if "final" in ids + extra else None
        self._final = (tuple(seq), final)
        hid = p.hidden[:, : len(ids)].reshape(p.hidden.shape[0], -1)
        kv = {i: (k.to(device=self._device, dtype=self._dtype), v.to(device=self._device, dtype=self._dtype))
              for i, (k, v) in p.kv.items()}
        return hid.to(device=self._device, dtype=self._dtype), kv

    def target_mismatch(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> int | None:
        """The first output position whose logged token is not the teacher-forced target's greedy token
        (None: all are, or nothing to check), from the pass the replay of this output made."""
        import torch

        seq = tuple(int(t) for t in [*prompt_ids, *output_ids])
        cached = getattr(self, "_final", None)
        if cached is None or cached[0] != seq or cached[1] is None or not output_ids:
            return None
        final = cached[1][len(prompt_ids) - 1:]  # rows P-1.. predict output tokens 0..n-1
        w = self.target.lm_head_weight()
        with torch.inference_mode():
            greedy = (final.to(w.dtype) @ w.T).argmax(-1).cpu().tolist()
        return next((i for i, (g, t) in enumerate(zip(greedy, output_ids)) if g != int(t)), None)

    def observe_hidden(self, request_id: str, hidden: Any) -> None:
        """The target's hidden states [n, len(hidden_layers) * H] of the next n verified positions."""
        st = self._req.get(request_id)
        if st is not None and hidden.shape[0]:
            st.pending.append(hidden)

    def propose(self, request_id: str, history: Sequence[int], k: int) -> list[int]:
        return self.propose_batch([request_id], [history], [k])[0]

    def end(self, request_id: str, output_ids: Sequence[int]) -> None:
        self._req.pop(request_id, None)

    def propose_batch(
        self, request_ids: Sequence[str], histories: Sequence[Sequence[int]], ks: Sequence[int]
    ) -> list[list[int]]:
        import torch

        with torch.inference_mode():
            return [self._propose_one(rid, hist, k) if k > 0 else []
                    for rid, hist, k in zip(request_ids, histories, ks, strict=True)]

    def _propose_one(self, rid: str, hist: Sequence[int], k: int) -> list[int]:
        raise NotImplementedError

    def _take_pending(self, rid: str, hist: Sequence[int]) -> tuple[Any, Any]:
        """(the request's state, its queued hidden rows concatenated), checked to cover the history
        but its last token."""
        import torch

        st = self._req[rid]
        if not st.pending:
            raise RuntimeError(f"{self.kind} drafter: no target hidden states for request {rid!r} (the engine "
                               "must feed observe_hidden after every target forward)")
        hid = torch.cat(st.pending)
        if st.n + hid.shape[0] + 1 != len(hist):
            raise RuntimeError(f"{self.kind} drafter: request {rid!r} has hidden states for {st.n + hid.shape[0]} "
                               f"positions but a history of {len(hist)} tokens (expected one more)")
        return st, hid
