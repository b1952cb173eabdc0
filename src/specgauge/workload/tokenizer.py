"""Tokenizer adapters: how specgauge turns a request into prompt token ids when a log has none.

- ``HFTokenizer``: a Hugging Face tokenizer from a local directory (``tokenizer.json`` plus
  ``tokenizer_config.json`` with its chat template, or ``chat_template.jinja``). Chat requests are
  rendered with the template exactly as ``transformers.apply_chat_template`` does (sandboxed jinja2,
  ``add_generation_prompt=True``, tools passed), then encoded without adding special tokens again.
- ``TiktokenTokenizer``: a tiktoken encoding, when its file is available locally (no downloads).
- ``ApproxTokenizer``: neither given. Words and punctuation as tokens, ids from a stable hash. Counts
  are an approximation and every figure made with it says so (``exact = False``).

Token ids found in a log always win over re-tokenising (the callers check that first).

Whose tokenizer is it? Counts made by re-tokenising are only exact with the workload's *own* model's
tokenizer. ``model_match(tok, model)`` tells: True when the tokenizer answers to the model name the
workload gives (its directory name, or the ``name_or_path`` its files record, compared by last path
component, case-insensitive; for tiktoken, the encoding tiktoken maps the model to), False when the
workload names another model, None when the workload names no model (then nobody can tell).
"""

from __future__ import annotations

from specgauge.errors import UserError

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Protocol

from specgauge.workload.schema import ApiKind, Request


class TokenizerError(UserError, ValueError):
    pass


class Tokenizer(Protocol):
    name: str
    #: False for the approximation: figures made with it are labelled approximate
    exact: bool
    vocab_size: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def encode_request(self, request: Request) -> list[int]: ...


def model_key(name: str) -> str:
    """How model names are compared: last path component, lower-case ("meta-llama/Llama-3-8B" -> "llama-3-8b")."""
    return name.strip().replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()


def model_match(tok: Tokenizer, model: str | None) -> bool | None:
    """Is ``tok`` the tokenizer of ``model``? None when no model is named (unknown)."""
    if not model:
        return None
    fn = getattr(tok, "matches_model", None)
    return bool(fn(model)) if fn is not None else False


def describe(tok: Tokenizer) -> str:
    """The tokenizer's name, plus where it came from when that matters to the reader."""
    note = getattr(tok, "origin", None)
    return f"{tok.name} ({note})" if note else tok.name


class HFTokenizer:
    exact = True

    def __init__(self, directory: str | Path) -> None:
        from tokenizers import Tokenizer as _Tok

        d = Path(directory)
        tj = d / "tokenizer.json"
        if not tj.is_file():
            raise TokenizerError(f"{d}: no tokenizer.json (a Hugging Face tokenizer directory is expected)")
        try:
            self._tok = _Tok.from_file(str(tj))
        except Exception as e:  # tokenizers raises plain Exception subclasses
            raise TokenizerError(f"{tj}: cannot be read: {e}") from None
        cfg: dict[str, Any] = {}
        tc = d / "tokenizer_config.json"
        if tc.is_file():
            try:
                cfg = json.loads(tc.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise TokenizerError(f"{tc}: not valid JSON: {e}") from None
        template = cfg.get("chat_template")
        jt = d / "chat_template.jinja"
        if jt.is_file():
            template = jt.read_text(encoding="utf-8")
        if isinstance(template, list):  # named templates: take "default"
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        self.chat_template: str | None = template
        self._special = {k: _token_text(cfg.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
        self._add_bos = bool(cfg.get("add_bos_token", False))
        self.name = f"hf:{d.name}"
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self._compiled: Any = None
        #: model names this tokenizer answers to (compared by ``model_key``)
        self.model_names = {model_key(d.resolve().name)} | {model_key(n) for n in _recorded_names(d, cfg)}
        #: e.g. "the shipped tiny model's tokenizer": set by whoever chose it for the user
        self.origin: str | None = None

    def matches_model(self, model: str) -> bool:
        return model_key(model) in self.model_names

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=False))

    def render_chat(self, request: Request) -> str:
        if self.chat_template is None:
            raise TokenizerError(f"{self.name}: the tokenizer has no chat template; cannot render chat request {request.id}")
        messages = [m.model_dump(exclude_none=True) for m in request.messages or []]
        try:
            return self._render(messages, request.tools, add_generation_prompt=True)
        except Exception as e:  # a template error names the request, never a traceback
            raise TokenizerError(f"request {request.id}: chat template failed: {e}") from None

    def render_reply(self, request: Request, content: str, tool_calls: list[dict[str, Any]]) -> str | None:
        """The assistant turn ``content`` + ``tool_calls`` as this chat template writes it, without the
        turn's opening and closing markers. The template renders the conversation once with that reply
        and once with a marker string as the reply's only content; the marker splits the second into the
        turn's opening (``…<|im_start|>assistant\n``) and closing (``<|im_end|>\n``), and the reply is what
        the first holds between them. None when the tokenizer has no chat template, the template refuses
        the turn, or it does not write it between the same opening and closing."""
        if self.chat_template is None or request.api is not ApiKind.chat:
            return None
        history = [m.model_dump(exclude_none=True) for m in request.messages or []]
        calls = [_parsed_arguments(c) for c in tool_calls]
        try:
            full = self._render([*history, {"role": "assistant", "content": content, "tool_calls": calls}],
                                request.tools, add_generation_prompt=False)
            marked = self._render([*history, {"role": "assistant", "content": _MARK}], request.tools,
                                  add_generation_prompt=False)
        except Exception:  # the template cannot write such a turn: the caller falls back
            return None
        opening, found, closing = marked.partition(_MARK)
        if not found or not full.startswith(opening) or not full.endswith(closing) or len(full) < len(opening) + len(closing):
            return None
        return full[len(opening):len(full) - len(closing)]

    def _render(self, messages: list[dict[str, Any]], tools: Any, add_generation_prompt: bool) -> str:
        if self._compiled is None:
            from jinja2.exceptions import TemplateError
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(msg: str) -> None:
                raise TemplateError(msg)

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
            env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False, sort_keys=False: json.dumps(
                x, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys
            )
            env.globals["raise_exception"] = raise_exception
            self._compiled = env.from_string(self.chat_template)
        return str(self._compiled.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                         **self._special))

    def encode_request(self, request: Request) -> list[int]:
        if request.api is ApiKind.chat:
            return self.encode(self.render_chat(request))
        if isinstance(request.prompt, list):
            return list(request.prompt)
        ids = self.encode(request.prompt or "")
        bos = self._special.get("bos_token")
        if self._add_bos and bos:
            bid = self._tok.token_to_id(bos)
            if bid is not None:
                ids = [bid, *ids]
        return ids


#: the content of the reply that locates a turn's opening and closing in a rendered conversation
_MARK = "\ue000specgauge-reply\ue000"


def _parsed_arguments(call: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool call with its ``arguments`` JSON string parsed, as vLLM hands it to chat templates
    (they write ``arguments | tojson``); left as it is when it is not JSON."""
    fn = call.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    try:
        args = json.loads(fn["arguments"])
    except ValueError:
        return call
    return {**call, "function": {**fn, "arguments": args}}


def hermes_tool_calls(tool_calls: list[dict[str, Any]]) -> str:
    """OpenAI tool calls written the hermes / Qwen way (``<tool_call>\n{"name": …, "arguments": …}\n</tool_call>``),
    for a tokenizer without a chat template."""
    parts = []
    for call in tool_calls:
        fn = _parsed_arguments(call).get("function") or {}
        parts.append("<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": fn.get("arguments")},
                                                  ensure_ascii=False) + "\n</tool_call>")
    return "\n".join(parts)


def reply_text(tok: Tokenizer, request: Request, text: str, tool_calls: list[dict[str, Any]] | None) -> tuple[str, str | None]:
    """What a model generated, as text, when the log has its reply but no token ids: ``text``, and its
    OpenAI ``tool_calls`` written back as the model wrote them — by ``tok``'s chat template where it has
    one, else the hermes form. Returns (text, how the calls were written: "template" / "hermes", None
    when there were none). Always an approximation of the generated tokens (the caller labels it)."""
    if not tool_calls:
        return text, None
    render = getattr(tok, "render_reply", None)
    rendered = render(request, text, tool_calls) if render is not None else None
    if rendered:
        return rendered, "template"
    return (text + "\n" if text else "") + hermes_tool_calls(tool_calls), "hermes"


def _recorded_names(d: Path, tokenizer_cfg: dict[str, Any]) -> list[str]:
    """``name_or_path`` in tokenizer_config.json and ``_name_or_path`` in config.json, when recorded."""
    names = [tokenizer_cfg.get("name_or_path")]
    cj = d / "config.json"
    if cj.is_file():
        try:
            names.append(json.loads(cj.read_text(encoding="utf-8")).get("_name_or_path"))
        except (OSError, ValueError, AttributeError):
            pass
    return [n for n in names if isinstance(n, str) and n.strip()]


def _token_text(v: Any) -> str | None:
    if isinstance(v, dict):
        return v.get("content")
    return v if isinstance(v, str) else None


class TiktokenTokenizer:
    exact = True

    def __init__(self, encoding: str) -> None:
        try:
            import tiktoken
        except ImportError:
            raise TokenizerError("tiktoken is not installed (pip install 'specgauge[tiktoken]')") from None
        try:
            self._enc = tiktoken.get_encoding(encoding)
        except Exception as e:
            raise TokenizerError(
                f"tiktoken encoding {encoding!r} is not available locally ({e}); set TIKTOKEN_CACHE_DIR to a "
                "directory holding its file (specgauge downloads nothing)"
            ) from None
        self.name = f"tiktoken:{encoding}"
        self.vocab_size = self._enc.n_vocab
        self._encoding = encoding

    def matches_model(self, model: str) -> bool:
        from tiktoken.model import encoding_name_for_model

        try:
            return bool(encoding_name_for_model(model_key(model)) == self._encoding)
        except KeyError:
            return False

    def encode(self, text: str) -> list[int]:
        return list(self._enc.encode(text, disallowed_special=()))

    def decode(self, ids: list[int]) -> str:
        return str(self._enc.decode(ids))

    def encode_request(self, request: Request) -> list[int]:
        if request.api is ApiKind.completion and isinstance(request.prompt, list):
            return list(request.prompt)
        return self.encode(_plain_render(request))


_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)


class ApproxTokenizer:
    """Words and punctuation marks as tokens; ids are a stable 31-bit hash. An approximation."""

    exact = False
    name = "approx:words"
    vocab_size = None

    def encode(self, text: str) -> list[int]:
        return [_hash_id(w) for w in _WORD.findall(text)]

    def matches_model(self, model: str) -> bool:
        return False  # no model's tokenizer

    def decode(self, ids: list[int]) -> str:
        raise TokenizerError("the approximate tokenizer cannot decode ids; pass --tokenizer DIR")

    def encode_request(self, request: Request) -> list[int]:
        if request.api is ApiKind.completion and isinstance(request.prompt, list):
            return list(request.prompt)
        return self.encode(_plain_render(request))


def _hash_id(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=4).digest(), "little") & 0x7FFFFFFF


def _plain_render(request: Request) -> str:
    if request.api is ApiKind.chat:
        parts = [f"{m.role}: {m.text()}" for m in request.messages or []]
        if request.tools:
            parts.insert(0, "tools: " + json.dumps(request.tools, ensure_ascii=False))
        return "\n".join(parts)
    return request.prompt if isinstance(request.prompt, str) else ""


def load_tokenizer(spec: str | Path | None) -> Tokenizer:
    """``None`` → approximation; ``tiktoken:NAME`` → tiktoken; otherwise a local HF directory."""
    if spec is None or str(spec) == "":
        return ApproxTokenizer()
    s = str(spec)
    if s.startswith("tiktoken:"):
        return TiktokenTokenizer(s.split(":", 1)[1])
    p = Path(s)
    if not p.exists():
        raise TokenizerError(f"--tokenizer {s}: no such directory (specgauge loads tokenizers from local directories only)")
    return HFTokenizer(p)


def default_tokenizer_spec() -> str | None:
    """The shipped tiny target's tokenizer when the package carries it (the sample workload was made
    for it), else None (the labelled approximation)."""
    try:
        from specgauge.models import target_dir  # the shipped weights (a leaf package)
    except ImportError:
        return None
    d = target_dir()
    return str(d) if (Path(d) / "tokenizer.json").is_file() else None


def resolve_tokenizer(spec: str | None) -> Tokenizer:
    """The tokenizer the user named, else the shipped tiny model's (labelled so: it is not the user's
    model's tokenizer unless the workload names the shipped model)."""
    if spec is not None:
        return load_tokenizer(spec)
    tok = load_tokenizer(default_tokenizer_spec())
    if hasattr(tok, "origin"):
        tok.origin = "the shipped tiny model's tokenizer, used by default"
    return tok
