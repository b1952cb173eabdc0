"""MTP head drafter (kind ``"mtp"``): a DeepSeek-V3-style multi-token-prediction layer (``enorm``,
``hnorm``, ``eh_proj``, one decoder block, ``shared_head``) on top of the target's final-norm hidden
state, reused for every draft position as vLLM does when k exceeds ``num_nextn_predict_layers``.
Everything else (engine proposer, exact replay, teacher-forced figure) is
:class:`~specgauge.drafters.eagle.HiddenStateDrafter`'s."""

from __future__ import annotations

from specgauge.drafters.base import register_drafter
from specgauge.drafters.eagle import HiddenStateDrafter


@register_drafter("mtp")
class MTPDrafter(HiddenStateDrafter):
    kind = "mtp"
