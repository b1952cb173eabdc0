"""What every drafter that reads the target's hidden states shares (EAGLE-3 / MTP in ``eagle.py``,
DFlash in ``dflash.py``): finding and opening the target a head belongs to, the engine's feed of
verified hidden states per request, and the checks on a logged sequence before a replay."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar


def _named_target(cfg: dict[str, Any]) -> str | None:
    """What a head's config names its target by: ``target_model`` (the shipped heads), else a
    ``speculators``-format checkpoint's ``speculators_config.verifier.name_or_path``."""
    sc = cfg.get("speculators_config")
    verifier = sc.get("verifier") if isinstance(sc, dict) else None
    hint = cfg.get("target_model") or (verifier.get("name_or_path") if isinstance(verifier, dict) else None)
    return str(hint) if hint else None


def resolve_target(head_dir: Path, target: str | Path | None, default_target: str | Path | None = None) -> tuple[Path, str]:
    """The target model directory a head belongs to, and where that came from (for errors): ``target``
    if given; else what the head's config names (``target_model``, relative to the head's parent
    directory as the shipped heads carry it, or absolute; or a ``speculators`` verifier) when that is
    a directory here; else ``default_target`` (simulate: the ``--tokenizer`` directory when it holds a
    model). Nothing is downloaded: a Hub id that is no directory here is an error that says so."""
    if target is not None:
        return Path(target), "given (simulate: --target-model)"
    cfg_path = head_dir / "config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    hint = _named_target(cfg)
    if hint:
        cand = Path(hint) if Path(hint).is_absolute() else head_dir.parent / hint
        if cand.is_dir():
            return cand.resolve(), f"named by the head's config.json ({hint!r})"
    if default_target is not None:
        return Path(default_target), "the --tokenizer directory (a model directory)"
    named = (f"its config.json names target {hint!r}, which is no directory here (nothing is downloaded)" if hint
             else "its config.json names no target ('target_model')")
    raise ValueError(f"{head_dir}: a hidden-state head needs its target model and {named}: pass the target's "
                     "directory (simulate: --target-model DIR; target=DIR in the API)")


def head_dir(kind: str, model: str | Path | None) -> Path:
    """The head's directory, checked to hold a ``config.json``."""
    if model is None:
        raise ValueError(f"method {kind!r} needs \"model\": the head's directory")
    path = Path(model)
    if not (path / "config.json").is_file():
        raise ValueError(f"{kind} head {path}: no config.json")
    return path


def open_target(
    kind: str,
    model_dir: Path,
    target: str | Path | None,
    target_model: Any,
    default_target: str | Path | None,
    load: Callable[[Path, Any], Any],
    dtype: Any,
) -> tuple[Any, str]:
    """(the target model, where it came from for errors): ``target_model`` when the engine hands its
    own, else the directory :func:`resolve_target` finds, opened by ``load(path, dtype)``."""
    from specgauge.nn.transformer import ModelLoadError

    if target_model is not None:
        return target_model, "the engine's target"
    path, origin = resolve_target(model_dir, target, default_target)
    where = f"target {path}: {origin}"
    try:
        return load(path, dtype), where
    except ModelLoadError as e:
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


class HiddenFeed:
    """The Drafter protocol of a head fed by the engine: ``observe_hidden`` queues the target's rows of
    the positions it verified, ``propose_batch`` drafts per request from them (``_propose_one``)."""

    kind: ClassVar[str] = ""
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
        max_model_len: int = 2048,
        num_speculative_tokens: int = 8,
        **_: Any,
    ) -> None:
        """Open the head at ``model`` and its target (the engine's ``target_model``, else the directory
        :func:`resolve_target` finds, opened by :meth:`_open_target`); :meth:`_load_head` loads the head."""
        from specgauge.nn.weights import torch_dtype

        self.model_dir = head_dir(self.kind, model)
        dt = torch_dtype(dtype)
        self.target, where = open_target(self.kind, self.model_dir, target, target_model, default_target,
                                         self._open_target, dt)
        self.head = self._load_head(self.model_dir, self.target, dt, where)
        self.model = self.head  # what the engine's memory report counts (shared embeddings are buffers, not counted)
        self.hidden_layers: tuple[int | str, ...] = self.head.c.aux_layer_ids
        self.max_len = max_model_len + num_speculative_tokens + 2
        self._dtype = dt
        self._req = {}

    def _open_target(self, path: Path, dtype: Any) -> Any:
        from specgauge.nn.weights import load_model

        return load_model(path, dtype)

    def _load_head(self, model_dir: Path, target: Any, dtype: Any, where: str) -> Any:
        raise NotImplementedError

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
