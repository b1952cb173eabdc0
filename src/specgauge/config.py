"""Typed settings shared by the CLI and the library.

``SpeculativeConfig`` accepts vLLM's ``--speculative-config`` JSON as is (same keys, same defaults
as vLLM v0.32's ``SpeculativeConfig``), so a user can paste what they serve with.
"""

from __future__ import annotations

from specgauge.errors import UserError

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


#: the practical margin (``--min-speedup``) wherever a speedup is judged (compare's verdict, recommend,
#: the demo, the canary): a gain whose interval does not clear it is not worth turning speculation on for
MIN_SPEEDUP = 1.05


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
        return self

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
