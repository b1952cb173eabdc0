"""``config.resolve_spec``: the one place a vLLM ``--speculative-config`` becomes (method family, k, parsed
config), for calibrate, predict, sweep and the scripted server alike."""

from __future__ import annotations

import pytest

from specgauge.config import ConfigError, resolve_spec
from specgauge.errors import UserError


def test_a_config_resolves_to_its_family_and_k() -> None:
    assert resolve_spec(None)[:2] == (None, 0)
    assert resolve_spec({})[:2] == (None, 0)
    m, k, cfg = resolve_spec({"method": "eagle3:heads/x", "model": "heads/x", "num_speculative_tokens": 3})
    assert (m, k) == ("eagle3", 3) and cfg is not None and cfg.method == "eagle3:heads/x"


def test_a_bad_config_is_one_line_naming_the_field() -> None:
    with pytest.raises(ConfigError) as e:
        resolve_spec({"method": "ngram", "num_speculative_tokens": "x"})
    msg = str(e.value)
    assert isinstance(e.value, UserError) and "\n" not in msg and "pydantic.dev" not in msg
    assert msg.startswith('speculative config {"method": "ngram", "num_speculative_tokens": "x"}: num_speculative_tokens:')
