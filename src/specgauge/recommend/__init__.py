"""Recommendations: which speculative config to serve with, per concurrency band and segment.

Boundary: reads a sweep's analysis (``specgauge.sweep``) or predictions (``specgauge.predict``) and
returns data — the choice per band with its reason, a ``num_speculative_tokens_per_batch_size``
schedule when k should change with batch size, and ready-to-paste flags for vLLM, llama.cpp and
SGLang. It starts no server and prints nothing (``specgauge.report.sweep`` renders it).

- ``schedule``: vLLM's batch-size schedule: bands, building, validation (vLLM's rules and more);
- ``choose``: the choice at one concurrency (margin, overlapping intervals, the cheaper config);
- ``build``: one recommendation from options (one method per server, static k or a schedule);
- ``flags``: vLLM / llama.cpp / SGLang command lines;
- ``sources``: options from a sweep (measured CIs) or from replay + calibration (prediction bands).
"""

from __future__ import annotations

from specgauge.recommend.build import RecommendSettings, recommend
from specgauge.recommend.models import BandChoice, Flags, Option, Recommendation
from specgauge.recommend.sources import PredictedRecommendConfig, RecommendError, recommend_from_profile, recommend_from_sweep

__all__ = [
           "BandChoice",
           "Flags",
           "Option",
           "PredictedRecommendConfig",
           "RecommendError",
           "RecommendSettings",
           "Recommendation",
           "recommend",
           "recommend_from_profile",
           "recommend_from_sweep",
]
