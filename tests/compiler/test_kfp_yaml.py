"""secureml.compile.yaml_writer: PyYAML loads back exactly what was written, for awkward strings and numbers,
for generated JSON data, and for whole compiled pipelines (against kfp's own writer)."""

import math

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from secureml.compile import yaml_writer as kfp_yaml
from secureml.compile.yaml_writer import dump_documents

AWKWARD = [
    "",
    " ",
    "  lead",
    "trail ",
    "yes",
    "No",
    "ON",
    "off",
    "y",
    "N",
    "true",
    "False",
    "null",
    "Null",
    "~",
    "-",
    "--",
    "- a",
    "-m",
    "-1",
    "+1",
    "1",
    "0x1F",
    "0o17",
    "017",
    "1_000",
    "1e3",
    "1.5",
    ".5",
    ".inf",
    "-.inf",
    ".nan",
    "NaN",
    "inf",
    "1:20",
    "12:30:00",
    "2026-12-01",
    "2026-12-01T10:00:00Z",
    "a: b",
    "a:b",
    "a #b",
    "#c",
    "a#b",
    "key:",
    "? q",
    ": x",
    "*alias",
    "&anchor",
    "!tag",
    "!!str",
    "%dir",
    "@at",
    "`bt",
    "{a}",
    "[a]",
    "a, b",
    ",",
    "|",
    ">",
    "'",
    '"',
    '"quoted"',
    "back\\slash",
    "<<",
    "=",
    "---",
    "...",
    "tab\there",
    "\t",
    "nl\n",
    "two\nlines",
    "two\nlines\n",
    "ends\n\n",
    "\nleading",
    " \nspace-first",
    "crlf\r\n",
    "\r",
    "é",
    "naïve ✓",
    "😀",
    "\x7f",
    "\x85",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\x00",
    "\x1b",
    "\a",
    "%s \"$0\" > '$p'",
    "line one\n  indented\n\n\tTabbed\n# not a comment\n---\n...",
    "- item\n- item",
    "key: value\nother: 1",
    "/tmp",
    "/var/run/argo",
    "_x",
    "a.b/c-d",
]
NUMBERS = [0, -1, 10**30, 0.0, -0.0, 0.1, 1.0, 1e16, 1e-7, -2.5e300, 123456789.125]


def _loads(text: str) -> list:
    return list(yaml.safe_load_all(text))


def test_awkward_strings_load_back_as_written() -> None:
    document = {
        "values": AWKWARD,
        "keys": {text: text for text in AWKWARD if text},
        "nested": [{"name": text, "args": [text, [text]]} for text in AWKWARD],
    }
    assert _loads(dump_documents([document])) == [document]


def test_numbers_booleans_nulls_and_empty_collections() -> None:
    document = {
        "n": NUMBERS,
        "flags": [True, False, None],
        "empty": {"map": {}, "list": [], "in_list": [{}, [], ""]},
        "special": [math.inf, -math.inf],
    }
    assert _loads(dump_documents([document])) == [document]
    assert math.isnan(_loads(dump_documents([{"x": math.nan}]))[0]["x"])


def test_several_documents_and_an_empty_one() -> None:
    documents = [{"a": 1}, {}, {"b": [1, {"c": "d"}]}]
    text = dump_documents(documents)
    assert text.count("---\n") == 2
    assert _loads(text) == documents


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), json_values, max_size=5))
def test_generated_json_data_loads_back(document: dict) -> None:
    assert _loads(dump_documents([document])) == [document]


def test_a_literal_block_keeps_its_lines() -> None:
    text = dump_documents([{"command": ["sh", "-ec", "set -e\n\necho 'a: b' # c\n"]}])
    assert "- |\n" in text
    assert _loads(text) == [{"command": ["sh", "-ec", "set -e\n\necho 'a: b' # c\n"]}]


def test_keys_of_any_length() -> None:
    long = "k" * 1500
    document = {
        long: {long: [1, {long: "two\nlines"}], "short": long},
        "list": [{long: [long]}],
    }
    assert _loads(dump_documents([document])) == [document]


def test_a_text_written_again_is_written_as_the_first_time() -> None:
    """The written forms kept between documents: a text as a key and as a value, a literal
    block at two depths, and more distinct texts than are kept at once."""
    block = "line one\nline two"
    document = {
        "name": "name",
        "y": {"y": ["y", block]},
        block: {"nested": {"deeper": block}},
        "many": [f"text {index}" for index in range(kfp_yaml._KEPT + 10)],
    }
    first = dump_documents([document])
    kfp_yaml._WRITTEN_KEYS.clear()
    kfp_yaml._WRITTEN_VALUES.clear()
    assert dump_documents([document]) == first == dump_documents([document])
    assert _loads(first) == [document]
    assert len(kfp_yaml._WRITTEN_VALUES) <= kfp_yaml._KEPT
