"""Who sends the admission request, as both the API server and the offline engines read it."""

from __future__ import annotations

import dataclasses
import functools
import re

from secureml.rules.cel.text import quote
from secureml.rules.model import Rule

USERNAME = "request.userInfo.username"
_MARK = "('' + "  # `('' + '<user>')`: the creator, as the offline engines read it
_CREATOR = re.compile(r"\('' \+ ('(?:[^'\\]|\\.)*')\)")


def creator(default: str) -> str:
    """CEL for the requesting user: `default` offline, `request.userInfo.username` rendered."""
    return f"{_MARK}{quote(default)})"


def for_server(text: str) -> str:
    """`text` as the API server evaluates it: every `creator(...)` the request's user."""
    return _CREATOR.sub(USERNAME, text)


@functools.cache
def created_by(rule: Rule, username: str | None) -> Rule:
    """`rule` judged offline as created by `username` (None: as it is written, by the rule's own
    default creator); a rule that does not read the creator is itself."""
    if username is None or _MARK not in rule.expression + rule.message_expression:
        return rule
    literal = f"{_MARK}{quote(username)})"
    return dataclasses.replace(
        rule,
        expression=_CREATOR.sub(lambda _: literal, rule.expression),
        message_expression=_CREATOR.sub(lambda _: literal, rule.message_expression),
    )
