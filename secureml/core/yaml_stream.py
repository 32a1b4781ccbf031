"""Every document of a YAML stream, fast, and always exactly what PyYAML's SafeLoader gives.

docs/performance.md ("YAML") says how: `yaml_rs` where it reads alike, PyYAML otherwise.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

import re2  # type: ignore[import-untyped]
import yaml_rs

from secureml.core.jsontree import copy_json

if TYPE_CHECKING:
    from yaml import YAMLError as YAMLError

    PYYAML_LOADER: Any  # libyaml's CSafeLoader (else SafeLoader), timestamps read as text


def __getattr__(name: str) -> Any:
    """`PYYAML_LOADER` and `YAMLError` (PyYAML's error class), PyYAML imported at first use."""
    if name not in ("PYYAML_LOADER", "YAMLError"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import yaml

    globals().update(PYYAML_LOADER=_pyyaml_loader(), YAMLError=yaml.YAMLError)
    return globals()[name]


@functools.cache
def _pyyaml_loader() -> Any:
    """libyaml's CSafeLoader (else SafeLoader) reading a timestamp as its text: the Kubernetes YAML
    reader (go-yaml v2 into an interface) keeps `2026-01-01` a string, and a `datetime.date` is
    no JSON value (neither CEL engine takes one)."""
    import yaml

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        pass

    Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_text)
    return Loader


def _timestamp_text(loader: Any, node: Any) -> str:
    return str(loader.construct_scalar(node))


# Where a plain scalar can start: at the start, after white space, a flow indicator, or a quoted
# flow key's colon.
_START = r"""(?:^|[ \t\r\n\[\{,]|["']:)"""
# Where a node (and so its tag or anchor, or a flow collection) can start outside flow collections:
# a line's first one after the indentation and any `-`, `?`, `:` or `---` indicators, or after a
# mapping key's colon. (Inside a flow collection is not needed: a flow collection that is not
# empty is sent to PyYAML, and a scan there would match `'{{$}}'`, in every KFP pod.)
_NODE_START = r"""(?:(?:^|[\r\n])[ \t]*(?:(?:---|[-?:])[ \t]+)*|:[ \t]+|["']:[ \t]*)"""
# Where a plain scalar that is one token ends: the end of a line, a comment, a flow indicator or a
# mapping key's colon (more places than YAML ends one: that only sends more streams to PyYAML).
_END = r"[ \t]*(?:[\r\n#,\]\}]|:[ \t\r\n]|:$|$)"
_NUMBER_TAIL = r"[0-9._:]*(?:[eE][-+]?[0-9_]+)?"
# A stream with any of these is read by PyYAML (RE2: a linear scan, ten times Python's `re` here).
_NEEDS_PYYAML = re2.compile(
    "|".join(
        (
            _START
            + "(?:"
            + "|".join(
                (
                    # YAML 1.1 booleans (true/false in every case both read alike; PyYAML keeps
                    # y and n as text)
                    r"(?:yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF)" + _END,
                    # numbers the readers read apart (both read decimal integers and fractions
                    # alike): leading zeros (1.1 octal), 0x/0o/0b, underscores, base 60 (1.1),
                    # exponents (1.2 floats; 1.1 needs a dot and a sign), a signed `.5` (1.2)
                    r"[-+]?0[0-9_xXoObB]",
                    r"[-+]?[0-9.][0-9.:]*[_:]" + _NUMBER_TAIL + _END,
                    r"[-+]?[0-9.][0-9._]*[eE][-+]?[0-9_]+" + _END,
                    r"[-+]\.",
                    r"[-+]?\.(?:inf|Inf|INF|nan|NaN|NAN)?" + _END,
                    r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}",  # a 1.1 timestamp (PyYAML: a date)
                    r"(?:<<|=)" + _END,  # the 1.1 merge key and value key
                    r"\?[ \t\r\n]",  # a complex key
                )
            )
            + ")",
            # a tag or an anchor (1.1 refuses a repeated one, and names of other characters) where
            # a node can start (not `a && b` in a string). Aliases need no scan: one with no
            # anchor is an error to both readers, and every anchor is sent to PyYAML.
            _NODE_START + r"(?:!|&[^ \t\r\n])",
            r"[\]\}][ \t]*:(?:[ \t\r\n]|$)",  # a flow collection as a key (PyYAML: unhashable)
            # a flow collection that is not empty (1.2 takes a key over two lines in one, 1.1
            # refuses it; kubectl and most emitters write block style, and `{}` or `[]`)
            _NODE_START + r"[\[\{][ \t]*[^ \t\]\}]",
            r"(?m:^(?:%|\.\.\.(?:[ \t\r\n]|$)))",  # a directive, a document end marker
            # a byte order mark; 1.1's line breaks that 1.2 reads as text; what PyYAML refuses
            "[\ufeff\x85\u2028\u2029\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ufffe\uffff]",
        )
    )
)
_MARKER_END = ("", " ", "\t", "\r", "\n")
_CONTENT = re.compile(r"^[ \t]*[^\s#]", re.MULTILINE)  # a line that is neither blank nor a comment


def load_all(text: str) -> list[Any]:
    """The documents of `text`, as `yaml.load_all(text, Loader=CSafeLoader)` gives them (empty
    documents are None); raises PyYAML's `yaml.YAMLError` for a stream PyYAML refuses."""
    if not needs_pyyaml(text):
        fast = _fast(text)
        if fast is not None:
            return fast
    import yaml

    return copy_json(list(yaml.load_all(text, Loader=_pyyaml_loader())))


def needs_pyyaml(text: str) -> bool:
    """Whether `text` holds anything the fast reader may read otherwise than PyYAML."""
    return _NEEDS_PYYAML.search(text) is not None


def _fast(text: str) -> list[Any] | None:
    """The documents by the fast reader, one call per document (it gives a stream of one document
    that is a list and a stream of several documents the same way); None where it refuses one."""
    documents: list[Any] = []
    starts = _document_starts(text)
    for begin, end in zip([0, *starts], [*starts, len(text)], strict=True):
        chunk = text[begin:end]
        if begin == 0 and (not chunk or not _CONTENT.search(chunk)):
            continue  # before the first `---`: no document unless there is content
        try:
            documents.append(
                yaml_rs.loads(
                    chunk,
                    parse_datetime=False,
                    duplicate_key_policy=yaml_rs.DuplicateKeyPolicy.LastWins,
                )
            )
        except Exception:  # noqa: BLE001 - yaml_rs raises its own errors and ValueError; PyYAML decides
            return None
    return documents


def _document_starts(text: str) -> list[int]:
    """Where each document start marker (`---` at the start of a line, then white space or the
    end) is: it always starts a new document, whatever comes before it."""
    starts = [0] if text.startswith("---") and text[3:4] in _MARKER_END else []
    found = text.find("\n---")
    while found >= 0:
        if text[found + 4 : found + 5] in _MARKER_END:
            starts.append(found + 1)
        found = text.find("\n---", found + 4)
    return starts
