"""Offline replay: logged requests through drafters, no server (the replay theorem, ``shared/design.md``).

``replay`` is the one place a workload's requests become token ids (one exactness rule) and a draft
method becomes replay traces per k; ``simulate``'s tables, ``predict``'s planner, the Ray path
(``scale``) and the bench's replay check (``live``, judged by ``stats.replay_check``) all consume it.
"""

from specgauge.offline.replay import (
    EMPTY_OUTPUT,
    NO_RESPONSE,
    MethodReplay,
    MethodSpec,
    ReplayedRequest,
    ReplayError,
    replay_one,
    replayed_request,
    token_ids,
)

__all__ = [
    "EMPTY_OUTPUT", "NO_RESPONSE", "MethodReplay", "MethodSpec", "ReplayError", "ReplayedRequest", "replay_one",
    "replayed_request", "token_ids",
]
