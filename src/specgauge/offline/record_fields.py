"""What bench records hold beyond the typed fields, read from a record's ``extra`` (or a warm-up entry of
``RunRecord.warmups``, which keeps the same keys): token ids and vLLM's per-request counters; and what a
run's server states about itself (``RunRecord.server``: its ``/v1/models`` card)."""

from __future__ import annotations

from typing import Any


def token_ids(extra: dict[str, Any] | None) -> tuple[list[int], list[int]] | None:
    """(prompt ids, output ids) of a record's ``extra`` (or a warm-up entry); None without them."""
    e = extra or {}
    p, o = e.get("prompt_token_ids"), e.get("output_token_ids")
    if isinstance(p, list) and isinstance(o, list) and o:
        return [int(t) for t in p], [int(t) for t in o]
    return None


def spec_decoding(extra: dict[str, Any] | None) -> dict[str, Any] | None:
    """vLLM's per-request ``metrics.speculative_decoding`` object of a record's ``extra``."""
    sd = ((extra or {}).get("metrics") or {}).get("speculative_decoding")
    return sd if isinstance(sd, dict) else None


def per_step(extra: dict[str, Any] | None) -> list[tuple[int, int]] | None:
    """The server's (drafted, accepted) per drafting step (vLLM's ``detailed`` lists), or None."""
    sd = spec_decoding(extra)
    if sd is None:
        return None
    d, a = sd.get("per_step_drafted"), sd.get("per_step_accepted")
    if isinstance(d, list) and isinstance(a, list) and len(d) == len(a):
        return [(int(x), int(y)) for x, y in zip(d, a)]
    return None


def _model_cards(server: dict[str, Any]) -> list[dict[str, Any]]:
    """The model cards of a run's server (``RunRecord.server["/v1/models"]["data"]``)."""
    models = server.get("/v1/models")
    data = models.get("data") if isinstance(models, dict) else None
    return [c for c in data if isinstance(c, dict)] if isinstance(data, list) else []


def speculative_config_of_server(server: dict[str, Any]) -> dict[str, Any] | None:
    """The speculative config a server states about itself (the embedded server's ``/v1/models``
    card); vLLM states none over HTTP, so the user passes ``bench --speculative-config``."""
    return next((c["speculative_config"] for c in _model_cards(server) if isinstance(c.get("speculative_config"), dict)), None)


def max_model_len_of_server(server: dict[str, Any]) -> int | None:
    """The ``max_model_len`` the server's card states (vLLM's and the embedded server's), or None."""
    return next((v for c in _model_cards(server) if isinstance(v := c.get("max_model_len"), int) and v > 0), None)
