"""Each CLI default and bound lives once: in the config's pydantic ``Field``.

The test walks every command registered on the typer app, reads (from the command function's source)
which config model field each option is passed to — ``SomeConfig(field=option)`` or
``SomeConfig(field=parse_duration(option, ...))`` — and checks the option's default (converted the
same way) equals the field's default, and any bound the option states (``min=`` / ``max=``) equals
the field's (``ge`` / ``le``; ``gt`` / ``lt`` cannot be restated by a typer bound, so an option must
leave those to the model). A command that builds no config from an option is not checked for it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import math
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import typer
from pydantic import BaseModel

from specgauge.cli import COMMANDS, app


@dataclass
class Binding:
    command: str
    option: str  #: the function parameter
    model: type[BaseModel]
    field: str
    convert: Callable[[Any], Any] | None  #: what the command applies to the option's value, None: as is


def _names_in_scope(fn: Callable[..., Any], tree: ast.AST) -> dict[str, Any]:
    """The module's globals plus what the function body imports (the CLI imports lazily)."""
    scope = dict(fn.__globals__)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mod = importlib.import_module(node.module)
            for a in node.names:
                if hasattr(mod, a.name):
                    scope[a.asname or a.name] = getattr(mod, a.name)
    return scope


def bindings() -> Iterator[Binding]:
    for fn, name in COMMANDS:
        fn = inspect.unwrap(fn)
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        params = set(inspect.signature(fn).parameters)
        scope = _names_in_scope(fn, tree)
        for call in ast.walk(tree):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                continue
            model = scope.get(call.func.id)
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                continue
            for kw in call.keywords:
                if kw.arg is None or kw.arg not in model.model_fields:
                    continue
                v = kw.value
                if isinstance(v, ast.Name) and v.id in params:
                    yield Binding(name, v.id, model, kw.arg, None)
                elif (isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.args
                      and isinstance(v.args[0], ast.Name) and v.args[0].id in params and v.func.id in scope):
                    conv, extra = scope[v.func.id], [ast.literal_eval(a) for a in v.args[1:] if isinstance(a, ast.Constant)]
                    yield Binding(name, v.args[0].id, model, kw.arg, lambda x, c=conv, e=extra: c(x, *e))


def _cli_params() -> dict[str, dict[str, Any]]:
    # typer >= 0.2x vendors its own click (typer._click), so its classes are not click's: duck-typed
    group = typer.main.get_command(app)
    assert hasattr(group, "commands"), type(group)
    return {n: {p.name: p for p in cmd.params if p.name} for n, cmd in group.commands.items()}


BINDINGS = list(bindings())
PARAMS = _cli_params()


def _field_bounds(model: type[BaseModel], field: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in model.model_fields[field].metadata:
        for k in ("ge", "le", "gt", "lt"):
            if getattr(m, k, None) is not None:
                out[k] = getattr(m, k)
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isinf(a) and math.isinf(b):
        return True
    if hasattr(b, "get_secret_value"):
        b = b.get_secret_value()
    return bool(a == b)


def test_the_walk_finds_the_commands_options() -> None:
    # the walk must see the big commands, or the checks below check nothing
    seen = {(b.command, b.field) for b in BINDINGS}
    for want in [("bench", "timeout"), ("bench", "warmup"), ("canary", "interval_s"), ("canary", "min_speedup"),
                 ("sweep", "min_speedup"), ("audit", "timeout")]:
        assert want in seen, want
    assert len(BINDINGS) > 80


@pytest.mark.parametrize("b", BINDINGS, ids=lambda b: f"{b.command}:{b.option}->{b.model.__name__}.{b.field}")
def test_cli_default_is_the_fields_default(b: Binding) -> None:
    finfo = b.model.model_fields[b.field]
    param = PARAMS[b.command][b.option]
    if finfo.is_required() or param.required:
        return
    cli_default = param.default
    if cli_default is None and b.convert is not None:
        return  # "not given": the command does not call the converter on None
    value = b.convert(cli_default) if b.convert is not None else cli_default
    want = finfo.get_default(call_default_factory=True)
    assert _same(value, want), (f"{b.command} --{b.option.replace('_', '-')}: CLI default {cli_default!r} "
                                f"-> {value!r}, but {b.model.__name__}.{b.field} defaults to {want!r}")


@pytest.mark.parametrize("b", BINDINGS, ids=lambda b: f"{b.command}:{b.option}->{b.model.__name__}.{b.field}")
def test_cli_bounds_are_the_fields_bounds(b: Binding) -> None:
    param = PARAMS[b.command][b.option]
    # click keeps a range on param.type (IntRange / FloatRange); typer 0.29's own parameters keep min / max
    t = getattr(param, "type", None)
    src = t if type(t).__name__ in ("IntRange", "FloatRange") else param
    cli = {k: getattr(src, k, None) for k in ("min", "max") if getattr(src, k, None) is not None}
    if b.convert is not None or not cli:
        return
    fb = _field_bounds(b.model, b.field)
    name = f"{b.command} --{b.option.replace('_', '-')}"
    if cli.get("min") is not None:
        assert "gt" not in fb, f"{name}: min={cli['min']} restates {b.model.__name__}.{b.field} gt={fb['gt']} inexactly"
        assert fb.get("ge") == cli["min"], f"{name}: min={cli['min']} but {b.model.__name__}.{b.field} ge={fb.get('ge')}"
    if cli.get("max") is not None:
        assert "lt" not in fb, f"{name}: max={cli['max']} restates {b.model.__name__}.{b.field} lt={fb['lt']} inexactly"
        assert fb.get("le") == cli["max"], f"{name}: max={cli['max']} but {b.model.__name__}.{b.field} le={fb.get('le')}"
