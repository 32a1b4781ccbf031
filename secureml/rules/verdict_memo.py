"""Each rule judges each distinct part of the pods it can read once: verdicts kept by what it read.

The key is `marshal` of exactly what `cel.reads` finds the rule can read (docs/performance.md).
"""

from __future__ import annotations

import functools
import marshal
import sys
from collections.abc import Callable
from typing import Any

from secureml.rules.cel import cache as cel_cache
from secureml.rules.cel import cpp as cel_cpp
from secureml.rules.cel import reads as reads_module
from secureml.rules.cel import syntax as cel_ast
from secureml.rules.cel.reads import ROOTS, Read, reads
from secureml.rules.model import Rule

LIMIT = 1024  # outcomes kept per rule: a few per component, unless the rule stops being keyed
WORTH = 2500  # characters of CEL text
TRIES = 64
WARMUP = 16
_COARSE_DEPTH = 4
ABSENT = Ellipsis  # marks a field a dict does not hold; a pod cannot hold it (see `NotKeyedError`)
_SCALARS = frozenset({str, int, float, bool, type(None), bytes})
# Version 2 writes equal values as equal bytes; versions 3 and 4 write a string apart by whether
# it is interned and whether it is referenced more than once (a key that depended on that kept
# equal steps of two compiles apart). Version 2 is about three times slower on strings.
_MARSHAL_VERSION = 2

Parts = dict[tuple[int, int], bytes]
Extract = Callable[[Any, Parts], Any]


class NotKeyedError(Exception):
    """The pod holds a value the key does not describe exactly: judge it in full."""


class Kept:
    """The outcomes of one expression (a rule's verdict, its violation, a scope) kept by key.

    Keying a pod costs time too (walking what the expression reads; analysing the expression
    once), so only an expression of `WORTH` characters or more is keyed: the longest rules, that
    cost 40-160 us a step pod to evaluate and 5-30 us to key. One whose first `TRIES` keys all
    differ (it reads what every pod has of its own: a step's name, its environment values) is no
    longer keyed. Neither changes an outcome, only whether it is computed again.
    """

    __slots__ = ("_always", "_expressions", "_extract", "_hits", "_tries", "outcomes")

    def __init__(self, expressions: tuple[str, ...], always: bool = False) -> None:
        self._expressions, self._always = expressions, always
        self._extract: tuple[Extract, Extract] | None | bool = False
        self._tries = self._hits = 0
        self.outcomes: dict[bytes, Any] = {}
        self.restart()

    def restart(self) -> None:
        self._extract = self._always or worth_keying(self._expressions[0])
        self._tries = self._hits = 0
        self.outcomes.clear()

    def key(self, pod: Pod) -> bytes | None:
        """The pod's key, or None: not keyed (evaluate)."""
        if self._extract is True:  # worth keying: analysed at its first use
            self._extract = _expressions_extractor(self._expressions)
        if self._extract is None or self._extract is False:
            return None
        if self._hits == 0 and self._tries >= TRIES:
            self._extract = None
            self.outcomes.clear()
            return None
        return pod.key(self._extract)

    def get(self, key: bytes | None) -> Any:
        """The outcome kept under `key`, or None."""
        if key is None:
            return None
        found = self.outcomes.get(key)
        self._tries += 1
        if found is not None:
            self._hits += 1
        return found

    def keep(self, key: bytes | None, outcome: Any) -> None:
        if key is None:
            return
        if len(self.outcomes) >= LIMIT:
            self.outcomes.clear()
        self.outcomes[key] = outcome


class Memo:
    """The kept outcomes of one list of rules: per rule its verdict (kept under what its
    expression reads) and its violation (under what the expression and the message expression
    read: the message is computed only for a pod the rule denies); per scope its value; and
    what a group of the rules that read the same on most pods (`steady`) holds, under what they
    all read (`mask`: the value of their mask program and the long ones' violations). Pods are
    keyed after the `WARMUP`-th one this list judges (a check of a few pods does not pay for the
    analysis); what each rule reads on the last half of those is compared at the last, and
    those with at most `WARMUP // 4` distinct values (of `WARMUP // 2`) are `steady`."""

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.verdicts = tuple(Kept((rule.expression,)) for rule in rules)
        self.violations = tuple(Kept((rule.expression, rule.message_expression)) for rule in rules)
        self.scopes = {rule.scope: Kept((rule.scope,)) for rule in rules}
        self._rules = rules
        self._judged = 0
        self._noted: list[Pod] = []
        self.steady: frozenset[int] | None = None
        self._hint: frozenset[int] | None = None
        self._masks: dict[tuple[str, ...], Kept] = {}

    def restart(self) -> None:
        for kept in (*self.verdicts, *self.violations, *self.scopes.values()):
            kept.restart()
        self._judged = 0
        self._noted.clear()
        self.steady = None
        self._hint = None
        self._masks.clear()

    def grouping(self) -> frozenset[int]:
        """The rules the engine groups as steady (`engine._Group`): `steady` once known, and
        before that the ones found for this list of rules by an earlier pass, in this process or
        another (kept on disk beside the programs), so that the engine does not build its groups
        twice. Only how the rules are grouped depends on it, never an outcome: until the memo is
        warm nothing is kept, and every group is judged on every pod."""
        if self.steady is not None:
            return self.steady
        if self._hint is None:
            self._hint = _kept_steady(self._rules)
        return self._hint

    def pod(self, obj: Any, old_obj: Any) -> Pod | None:
        """The pod to key, or None while warming up: the second half of the warm-up's pods are
        noted, and at the last of them what each rule reads on them is compared (`steady`). A
        check of fewer pods pays for none of it (comparing all of team-a's rules costs about
        0.1 s the first time: the analyses are read)."""
        self._judged += 1
        if self._judged > WARMUP:
            return Pod(obj, old_obj)
        if self._judged > WARMUP // 2:
            self._noted.append(Pod(obj, old_obj))
        if self._judged == WARMUP:
            self.steady = self._steady()
            self._noted.clear()
            if self.steady != self._hint:
                cel_cache.write_json(_steady_kind(), _rules_text(self._rules), sorted(self.steady))
        return None

    def _steady(self) -> frozenset[int]:
        """The rules with at most `WARMUP // 4` distinct keys over the noted pods (of what a
        short rule's expression reads; of what a long one's expression and message read: its
        violation is held with the others', `engine._Group`)."""
        steady = set()
        for index, rule in enumerate(self._rules):
            expressions: tuple[str, ...] = (rule.expression,)
            if worth_keying(rule.expression):
                expressions += (rule.message_expression,)
            extract = _expressions_extractor(expressions)
            if extract is None:
                continue
            keys = {pod.key(extract) for pod in self._noted}
            if None not in keys and len(keys) <= WARMUP // 4:
                steady.add(index)
        return frozenset(steady)

    def mask(self, expressions: tuple[str, ...]) -> Kept:
        """The kept outcomes of the group of `expressions` (a mask program's, `cel_cpp.mask_program`,
        and rules' expressions and messages: `engine._Group.held`): a function of what they read,
        so kept under all of that."""
        found = self._masks.get(expressions)
        if found is None:
            found = self._masks[expressions] = Kept(expressions, always=True)
        return found


def _kept_steady(rules: tuple[Rule, ...]) -> frozenset[int]:
    """The steady rules an earlier pass found for `rules` (`Memo.grouping`), else none."""
    found = cel_cache.read_json(_steady_kind(), _rules_text(rules))
    if not isinstance(found, list) or not all(
        type(index) is int and 0 <= index < len(rules) for index in found
    ):
        return frozenset()
    return frozenset(found)


def _rules_text(rules: tuple[Rule, ...]) -> str:
    return "\0".join(f"{r.expression}\0{r.message_expression}\0{r.scope}" for r in rules)


@functools.cache
def _steady_kind() -> str:
    return "steady:" + cel_cache.source_version(sys.modules[__name__])


def worth_keying(expression: str) -> bool:
    """Whether pods are keyed for `expression` (see `Kept`)."""
    return len(expression) >= WORTH


_MEMOS: dict[tuple[Rule, ...], Memo] = {}


def memo(rules: tuple[Rule, ...]) -> Memo:
    """The memo of this list of rules (one per list, for the life of the process)."""
    found = _MEMOS.get(rules)
    if found is None:
        found = _MEMOS[rules] = Memo(rules)
    return found


def forget() -> None:
    """Start every memo again: no outcome kept, nothing learnt (benchmarks measure first
    passes; the tests compare memo-less verdicts)."""
    for kept in _MEMOS.values():
        kept.restart()


class Pod:
    """One pod (and the pod before an UPDATE) being keyed: the key parts of lists, written once
    per pod and shared by every rule whose read of that list is the same (`_extractor`)."""

    def __init__(self, obj: Any, old_obj: Any) -> None:
        self.obj, self.old_obj = obj, old_obj
        self.parts: Parts = {}
        self._keys: dict[int, bytes | None] = {}

    def key(self, extract: tuple[Extract, Extract]) -> bytes | None:
        known = self._keys.get(id(extract), b"")
        if known != b"":
            return known
        try:
            parts = (extract[0](self.obj, self.parts), extract[1](self.old_obj, self.parts))
            key: bytes | None = marshal.dumps(parts, _MARSHAL_VERSION)
        except Exception:  # noqa: BLE001 - NotKeyedError, marshal's ValueError, anything: judge the pod
            key = None
        self._keys[id(extract)] = key
        return key


def _tree(checked: bytes) -> cel_ast.Node | None:
    try:
        return cel_ast.parse(checked)
    except ValueError:
        return None


@functools.cache
def _expressions_extractor(expressions: tuple[str, ...]) -> tuple[Extract, Extract] | None:
    """The key parts (of `object`, of `oldObject`) that cover what `expressions` read; None when
    one of them is not analysed."""
    roots = {name: Read() for name in ROOTS}
    for expression in expressions:
        if not expression:
            continue
        found = _reads(expression)
        if found is None:
            return None
        for name in ROOTS:
            _merge(roots[name], found[name])
    return _extractor(_coarsened(roots[ROOTS[0]], 0)), _extractor(_coarsened(roots[ROOTS[1]], 0))


def _reads(expression: str) -> dict[str, Read] | None:
    """`reads` of `expression`'s tree, kept on disk between processes (`cel_cache.load_json`,
    under the source of the analysis: reading a tree costs 10-30 ms for the longest rules)."""

    def analysed() -> object:
        checked = cel_cpp.checked(expression)
        tree = None if checked is None else _tree(checked)
        found = None if tree is None else reads(tree)
        return None if found is None else {name: read.to_json() for name, read in found.items()}

    data = cel_cache.load_json(_analysis_version(), expression, analysed)
    if not isinstance(data, dict) or set(data) != set(ROOTS):
        return None
    try:
        return {name: Read.from_json(data[name]) for name in ROOTS}
    except ValueError:
        return None


@functools.cache
def _analysis_version() -> str:
    """What a kept analysis depends on besides the text: the code that made it."""
    return "reads:" + cel_cache.source_version(cel_ast, reads_module)


def _merge(into: Read, read: Read) -> None:
    into.whole |= read.whole
    into.size |= read.size
    into.index |= read.index
    if read.each is not None:
        if into.each is None:
            into.each = Read()
        _merge(into.each, read.each)
    for name, child in read.fields.items():
        _merge(into.fields.setdefault(name, Read()), child)


def _coarsened(read: Read, depth: int) -> Read:
    """`read` (at `depth` below the pod) made coarser where reading more is cheaper than
    reading exactly, bottom up: a list whose elements are read whole is read whole; an element
    below depth five read by two or more plain fields (an env entry's name and value, a mount's
    path and name...) is read whole; a part at depth four or more (a container's
    `securityContext`, `resources`...) that iterates nothing is read whole. A coarser read holds
    more than `read` does."""
    if read.whole:
        return read
    for child in read.fields.values():
        _coarsened(child, depth + 1)
    element = read.each
    if element is not None:
        _coarsened(element, depth + 1)
        if depth + 1 > _COARSE_DEPTH and _plain_fields(element) >= 2:
            element.whole = True
        if element.whole and not read.fields:
            read.whole = True
    if depth >= _COARSE_DEPTH and not _iterates(read):
        read.whole = True
    return read


def _plain_fields(read: Read) -> int:
    """How many fields `read` reads, when it reads nothing but whole fields or whether a field
    is there; else 0."""
    if read.whole or read.each is not None or read.size or read.index:
        return 0
    if all(child.whole or _nothing(child) for child in read.fields.values()):
        return len(read.fields)
    return 0


def _nothing(read: Read) -> bool:
    """`read` reads nothing of its value: only whether it is there (`has(x.field)`)."""
    return not (read.whole or read.size or read.index or read.fields) and read.each is None


def _iterates(read: Read) -> bool:
    return not read.whole and (
        read.each is not None or any(_iterates(child) for child in read.fields.values())
    )


def _whole(value: Any, parts: Parts) -> Any:
    return value


def _present(value: Any, parts: Parts) -> Any:
    return True


def _extractor(read: Read) -> Extract:
    """The function building the key part of a value under `read` (one per shape of read, so
    that equal reads of a list share its part within a pod)."""
    return _extractor_of(read.shape(), read)


_BY_SHAPE: dict[object, Extract] = {}


def _extractor_of(shape: object, read: Read) -> Extract:
    known = _BY_SHAPE.get(shape)
    if known is None:
        known = _BY_SHAPE[shape] = _new_extractor(read)
    return known


def _new_extractor(read: Read) -> Extract:
    if read.whole:
        return _whole
    element = read.each
    if element is not None and _plain_fields(element) == 1 and not (read.size or read.fields):
        return _written(_list_of_one_field(next(iter(element.fields)), read.index))
    fields = tuple(
        (name, _present if _nothing(child) else _extractor(child))
        for name, child in read.fields.items()
    )
    each = None if element is None else _extractor(element)
    size, index = read.size, read.index

    def extract(value: Any, parts: Parts) -> Any:
        kind = type(value)
        if kind is dict:
            if index:
                return value  # a map indexed by a number: its values too
            part: list[Any] = ["d"]
            if each is not None:
                part.append(_keys(value))
            elif size:
                part.append(len(_keys(value)))
            for name, child in fields:
                item = value.get(name)
                if item is None:  # absent, or null: CEL is handed the pod without nulls
                    part.append(ABSENT)
                elif item is ABSENT:
                    raise NotKeyedError  # the pod holds `...` itself
                else:
                    part.append(child(item, parts))
            return tuple(part)
        if kind is list:
            if fields:
                return value
            if each is not None:
                return ("l", [each(element, parts) for element in value])
            return ("l", len(value)) if size else ("l",)
        if kind in _SCALARS:
            return value
        raise NotKeyedError

    return _written(extract) if each is not None else extract


def _keys(value: dict[Any, Any]) -> list[Any]:
    """The keys CEL sees: those of fields that are not null."""
    return [key for key, item in value.items() if item is not None]


def _written(extract: Extract) -> Extract:
    """`extract` of an iterated value, written (marshal) once per pod and value: the key holds
    those bytes at this place whatever the value, so the key stays exact."""
    ident = id(extract)

    def written(value: Any, parts: Parts) -> bytes:
        place = (ident, id(value))
        found = parts.get(place)
        if found is None:
            found = parts[place] = marshal.dumps(extract(value, parts), _MARSHAL_VERSION)
        return found

    return written


def _list_of_one_field(name: str, index: bool) -> Extract:
    """`_extractor` of a value iterated for one whole field of each element (`c.env.all(e,
    e.name ...)`), the common case made cheap: a list gives `('1', [that field per element])`."""

    def extract(value: Any, parts: Parts) -> Any:
        kind = type(value)
        if kind is list:
            if all(type(element) is dict for element in value):
                found = [element.get(name) for element in value]  # None: absent or null
                if any(item is ABSENT for item in found):
                    raise NotKeyedError  # the pod holds `...` itself
                return ("1", found)
            return ("l", value)  # elements of other kinds: the list whole
        if kind is dict:
            return value if index else ("d", _keys(value))
        if kind in _SCALARS:
            return value
        raise NotKeyedError

    return extract
