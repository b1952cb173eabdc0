"""``specgauge calibrate``'s cells: one config per method, or a method at several k when --k names it twice."""

from __future__ import annotations

import pytest

from specgauge.calibrate import calibration_cells
from specgauge.cli.calibrate import _method_ks
from specgauge.config import ConfigError


def test_k_pairs_and_a_method_named_twice() -> None:
    assert _method_ks("ngram=4,suffix=4") == {"ngram": 4, "suffix": 4}
    assert _method_ks("draft_model=4,ngram=3,draft_model=2,draft_model=4") == {"draft_model": [2, 4], "ngram": 3}
    for bad in ("ngram", "ngram=0", "ngram=x"):
        with pytest.raises(ConfigError, match="METHOD=K"):
            _method_ks(bad)


def test_calibration_cells_measure_each_k() -> None:
    cells = calibration_cells(["ngram", "draft_model:/m/d"], {"ngram": 4, "draft_model": [2, 4]}, [1, 4], embedded=False)
    labels = sorted({c.label for c in cells})
    assert labels == ["draft_model-k2", "draft_model-k4", "ngram-k4", "off"]
    assert sorted(c.concurrency for c in cells if c.label == "draft_model-k4") == [1, 4]
    assert {c.speculative_config["num_speculative_tokens"] for c in cells if c.label.startswith("draft")} == {2, 4}
