"""calibrate's replay check (``offline.traces.replay_check``): a server's final step counts drafts it
accepted past the output's end (max_tokens, EOS) before cutting — as vLLM's scheduler and the embedded
engine do — so a greedy request whose live count exceeds the replay's by at most that final step's
drafts past the end agrees; one more, fewer, or other draft counts do not."""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.offline.traces import PlannedRequest, counts_agree, replay_check
from specgauge.records import RequestRecord, SpecCounts


def _trace(drafted: list[int], accepted: list[int], out: int, greedy: bool = True) -> PlannedRequest:
    return PlannedRequest(id="r", prompt_tokens=5, output_tokens=out, drafted=np.asarray(drafted),
                          accepted=np.asarray(accepted), greedy=greedy)


def _rec(draft_tokens: int, accepted: int) -> RequestRecord:
    return RequestRecord(id="r", index=0, scheduled_s=0.0, sent_s=0.0, started_at=0.0, ok=True,
                         spec=SpecCounts(drafts=3, draft_tokens=draft_tokens, accepted_tokens=accepted))


# 8 output tokens, k = 3: token 0 from the prefill; steps emit 1+1, 2+1, then the final step drafts 3 and
# the output's last 2 tokens (positions 6, 7) both match: its third draft lies past the end (bound 1)
TAIL = ([3, 3, 3], [1, 2, 2], 8)
# the final step's first draft is rejected at the output's last token (position 6): nothing past the end
INSIDE = ([3, 3, 3], [1, 2, 0], 7)


@pytest.mark.parametrize(("trace", "live", "agree"), [
    (TAIL, 5, True),   # the replay's own count
    (TAIL, 6, True),   # + the one draft past max_tokens the server counted
    (TAIL, 7, False),  # more than the final step proposed past the end
    (TAIL, 4, False),  # fewer than the output allows: a broken server
    (INSIDE, 3, True),
    (INSIDE, 4, False),  # no draft past the end: no slack
])
def test_the_final_step_may_count_drafts_past_the_end(trace: tuple, live: int, agree: bool) -> None:
    tr = _trace(*trace)
    assert counts_agree(tr, 9, live) is agree
    chk = replay_check([_rec(9, live)], {"r": tr})
    assert (chk["identical_requests"], chk["greedy_differ"]) == ((1, 0) if agree else (0, 1))


def test_other_draft_counts_never_agree_and_missing_counts_are_not_compared() -> None:
    tr = _trace(*TAIL)
    assert not counts_agree(tr, 8, 5)
    assert counts_agree(tr, None, 6) and counts_agree(tr, 9, None)
