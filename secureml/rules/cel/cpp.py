"""The fast CEL engine: Google's C++ CEL (`cel-expr-python`), reading the pod's dicts in place."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import re2  # type: ignore[import-untyped]
from cel_expr_python import cel  # type: ignore[import-untyped]

from secureml.rules.cel import rewrite as cel_rewrite
from secureml.rules.cel import syntax as cel_ast
from secureml.rules.cel.cache import ENVIRONMENTS, load_json, source_version
from secureml.rules.cel.cache import load as load_program
from secureml.rules.cel.rewrite import MATCHES, rewritten

ERROR = cel.Type.ERROR
STRING = cel.Type.STRING
INT = cel.Type.INT
T = TypeVar("T")


@functools.cache
def _env(environment: str = "base") -> Any:
    """`object` and `oldObject` of any type and `secureml_matches` (`matches` with each pattern
    compiled once: see `cel_rewrite`); in the "strings" environment the strings extension too
    (`lowerAscii`, `split`...), as the API server's CEL has it. The extension is loaded only for
    an expression the base environment refuses (its library is about 3 MiB of a process's memory,
    and no example profile's rule calls it); an expression that compiles in both means the same
    in both (the extension adds functions, and a call to one of them does not compile without
    it). Programs of both run on one binding (`activation`)."""
    variables = {"object": cel.Type.DYN, "oldObject": cel.Type.DYN}
    overload = cel.Overload(
        f"{MATCHES}_string_string",
        return_type=cel.Type.BOOL,
        parameters=[cel.Type.STRING, cel.Type.STRING],
        is_member=True,
        impl=_matches,
    )
    extensions = []
    if environment == "strings":
        from cel_expr_python.ext import ext_strings  # type: ignore[import-untyped]

        extensions.append(ext_strings.ExtStrings())
    return cel.NewEnv(
        variables=variables,
        extensions=extensions,
        functions=[cel.FunctionDecl(MATCHES, [overload])],
    )


def _matches(text: str, pattern: str) -> bool:
    """CEL's `matches`: RE2 finds the pattern anywhere in the text."""
    return _pattern(pattern).search(text) is not None


@functools.cache
def _pattern(pattern: str) -> Any:
    return re2.compile(pattern)


@functools.cache
def program(expression: str) -> Any | None:
    """The compiled program for `expression` (kept between processes: `cel_cache`), or None when
    this engine cannot compile it."""
    return _compiled(expression)


def _compiled(expression: str) -> Any | None:
    """`program` without keeping it in this process (a mask's program is held by its user)."""

    def load(environment: str) -> Any:
        env = _env(environment)
        return load_program(
            expression, functools.partial(_planned, env), env.deserialize, environment
        )

    return _in_first_environment(load)


def _in_first_environment(make: Callable[[str], T]) -> T | None:
    """`make(environment)` in the base environment, else in the one with the strings extension
    (`_env`); None where the engine refuses the text in both."""
    for environment in ENVIRONMENTS:
        try:
            return make(environment)
        except Exception:  # noqa: BLE001 - the binding raises RuntimeError/ValueError: the next one
            continue
    return None


def _planned(env: Any, expression: str) -> Any:
    """The program that evaluates `expression` in `env`, once `env`'s type checker has taken it.

    The checker decides which texts an environment takes, as the API server's does: a text it
    refuses raises here (and the next environment is tried). The program itself is planned from
    the parsed tree alone, without what only the checker and error positions use: its type and
    reference maps, each node's position and each macro's call as written. What a program
    computes does not depend on them: `object` and `oldObject` are dyn, so every call is
    dispatched on its arguments' values at run time either way (tests/rules/
    test_planned_programs.py compares both programs of every rule on every corpus pod), and the
    text of an error is always the plain engine's (`engine`). It is under half the memory: a
    21 KB mask of team-a's rules is 1.34 MiB as checked, 0.56 MiB as planned here (a compile's
    programs 7.8 -> 3.4 MiB)."""
    env.compile(expression)
    parsed = env.compile(expression, disable_check=True)
    return env.deserialize(cel_ast.without_source_info(parsed.serialize()))


def checked(expression: str) -> bytes | None:
    """`expression` as the type checker resolved it (a serialized `cel.expr.CheckedExpr`, which
    `cel_ast.parse` reads), in the first environment that takes it; None where none does. Not
    kept: what reads it keeps its own result (`verdict_memo`)."""

    def serialized(environment: str) -> bytes:
        return bytes(_env(environment).compile(expression).serialize())

    return _in_first_environment(serialized)


@functools.cache
def boolean_program(expression: str) -> Any | None:
    """`program(expression)` for an expression whose value is used only when it is a boolean (a
    rule, a scope): rewritten for speed (`cel_rewrite`) where that compiles, as it is otherwise."""
    text = _boolean_text(expression)
    return None if text is None else program(text)


@functools.cache
def _boolean_text(expression: str) -> str | None:
    """The text `boolean_program` compiles: the rewritten one where it compiles. Kept on disk
    with the programs (rewriting team-a's rules took 60-120 ms of every process's start)."""
    text = load_json("boolean:" + _mask_version(), expression, lambda: _chosen_text(expression))
    return text if isinstance(text, str) else None


def _chosen_text(expression: str) -> str | None:
    faster = rewritten(expression)
    if faster is not None and program(faster) is not None:
        return faster
    return expression if program(expression) is not None else None


MASK_WIDTH = 62  # expressions in one `mask_program` (CEL's int is 64-bit signed)


def mask_program(expressions: tuple[str, ...]) -> Any | None:
    """One program for several rules: an int whose bit `i` is set where expression `i` is false
    and clear where it is true, each expression as `boolean_program` compiles it (at most
    `MASK_WIDTH` of them). Where any of them is an error or not a boolean, the whole value is an
    error (a condition of `?:` must be a boolean), and the caller judges them one by one. None
    when one of them does not compile, or the whole is more than the engine takes.

    Each evaluation costs about 4 us of its own; the profiles' rules are judged in one instead of
    one per rule. The terms are summed as a balanced tree (the parser limits nesting). The text
    is kept on disk with the programs (`cel_cache.load_json`): building it rewrites and compiles
    each expression, which a process that reads the program back need not do. The program is
    not kept in this process: its caller holds it (a mask stops being used once the rules that
    read the same on most pods are known, and its program is several MiB)."""
    if not 0 < len(expressions) <= MASK_WIDTH:
        return None
    kind = "mask:" + _mask_version()
    text = load_json(kind, "\0".join(expressions), lambda: _mask_text(expressions))
    return _compiled(text) if isinstance(text, str) else None


@functools.cache
def _mask_version() -> str:
    """What a kept text (a rule's, a mask's) depends on besides the rules: this module and the
    rewrite."""
    return source_version(sys.modules[__name__], cel_rewrite)


def _mask_text(expressions: tuple[str, ...]) -> str | None:
    texts = [_boolean_text(expression) for expression in expressions]
    if any(text is None for text in texts):
        return None
    terms = [f"(({text}) ? 0 : {1 << bit})" for bit, text in enumerate(texts)]
    while len(terms) > 1:
        terms = [f"({' + '.join(terms[index : index + 2])})" for index in range(0, len(terms), 2)]
    return terms[0] if _compiled(terms[0]) is not None else None


def activation(obj: Mapping[str, Any], old_obj: Mapping[str, Any] | None) -> Any:
    """`object` and `oldObject` bound for one pod (read in place, not copied)."""
    return _env().Activation({"object": obj, "oldObject": old_obj})
