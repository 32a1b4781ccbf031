"""`secureml.core.yaml_stream.load_all` gives exactly PyYAML's documents, or PyYAML's error.

The fast reader (yaml_rs) follows YAML 1.2 where PyYAML follows 1.1; the scan must send every
stream where they read apart to PyYAML. Checked on every YAML file of the repository and of
../shared/fixtures, on a table of the scalars where the two readers differ, in every position a
plain scalar can take, and on generated streams (hypothesis).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
import yaml_rs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secureml.core import yaml_stream
from tests.support.paths import FIXTURES, REPO, fixture_dir

# Scalars that one reader resolves and the other does not, or resolves to another value.
APART = [
    *("yes Yes YES no No NO on On ON off Off OFF".split()),
    *("0755 00 0_1 +0755 0o17 0O17 0x1F 0X1F -0x1F 0b101 1_000 1__0 1_000.5".split()),
    *("1:20 190:20:30 -1:20 1:2:3.5 1e3 1E3 1.0e3 1.5e3 1.0e+3 .5e3 -.5 +.5 .".split()),
    *(".inf -.Inf +.INF .nan .NaN .NAN 2001-12-14 2001-12-14T21:59:43.10-05:00 << =".split()),
    *("!!str 5", "!!int 5", "!!bool yes", "! 5", "!foo x", "2001-12-14 21:59:43.10 -5"),
]
# Scalars both read alike (the fast path must keep taking most of them).
ALIKE = [
    *("true True TRUE false False FALSE null Null NULL ~ y Y n N 0 1 -1 +1 -0 10 8080 1.5".split()),
    *(
        "1. -1.5 .5 3.14 name none one only yesterday offset onion 1.2.3 10Gi 500m v1 3s 1m0s".split()
    ),
    *(
        "sha256:00ab a:b http://x/y?q=1 - -- --- a-b a_b 0.0.0.0 1.2.3.4 9999999999999999999999".split()
    ),
]


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types all the way down (1 is not 1.0 nor True; NaN is NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def assert_like_pyyaml(text: str) -> None:
    try:
        expected = list(yaml.load_all(text, Loader=yaml_stream.PYYAML_LOADER))
    except yaml.YAMLError as err:
        with pytest.raises(yaml.YAMLError) as raised:
            yaml_stream.load_all(text)
        assert str(raised.value) == str(err)
        return
    got = yaml_stream.load_all(text)
    assert same(got, expected), f"{text!r}: {got!r} != {expected!r}"


def positions(token: str) -> list[str]:
    """`token` as a plain scalar in each place one can stand."""
    return [
        f"k: {token}\n",
        f"{token}\n",
        f"--- {token}\n",
        f"- {token}\n",
        f"k:\n  - {token}  # note\n",
        f"{token}: v\n",
        f"[{token}, x]\n",
        f"{{k: {token}}}\n",
        f'{{"k":{token}}}\n',
        f"a: 1\n---\nk: {token}\n",
        f"k:   {token}\t\n",
    ]


@pytest.mark.parametrize("token", APART + ALIKE)
def test_each_scalar_in_each_position_reads_as_pyyaml_reads_it(token: str) -> None:
    for text in positions(token):
        assert_like_pyyaml(text)


@pytest.mark.parametrize("token", APART)
def test_the_scan_sends_every_scalar_the_readers_read_apart_to_pyyaml(token: str) -> None:
    for text in positions(token):
        assert yaml_stream.needs_pyyaml(text), text


def test_the_scalars_the_readers_read_apart_do_differ_without_the_scan() -> None:
    """The table is not vacuous: yaml_rs alone reads most of APART otherwise than PyYAML (the
    rest, 0x1F or 1_000, it reads alike today; they are scanned for all the same)."""
    differ = 0
    for token in APART:
        text = f"k: {token}\n"
        try:
            alone = yaml_rs.loads(text, parse_datetime=False)
        except Exception:  # noqa: BLE001 - a refusal is a difference too
            differ += 1
            continue
        try:
            reference = yaml.load(text, Loader=yaml_stream.PYYAML_LOADER)
        except yaml.YAMLError:
            differ += 1
            continue
        differ += not same(alone, reference)
    assert differ > len(APART) // 2


@pytest.mark.parametrize("token", ALIKE)
def test_scalars_both_read_alike_keep_the_fast_path(token: str) -> None:
    assert not yaml_stream.needs_pyyaml(f"k: {token}\n- {token}\n")


@pytest.mark.parametrize(
    "text",
    [
        "- a\n- b\n",  # one document that is a list ...
        "---\n- a\n- b\n",
        "---\na\n---\nb\n",  # ... and two documents
        "",
        "# only a comment\n",
        "---\n",
        "---\n---\na: 1\n",
        "a: 1\n...\n",
        "a: 1\n...\nb: 2\n",
        "\ufeffa: 1\n",
        "a: 1\na: 2\n",  # a repeated key: the last one stands
        "x: &a {p: [1, 2]}\ny: *a\n",
        "- && b\n",  # an anchor name 1.1 refuses (1.2 takes it)
        "k: &&x v\n",
        "k: &a.b v\nj: *a.b\n",
        "- [&a x, *a]\n",
        "k: *a\n",  # an alias with no anchor: an error to both
        "--- &a x\n--- *a\n",  # anchors are per document
        'k: "from typing import\n  *\\n"\n',  # a wrapped quoted `import *`
        "k: a\n  *b\n",
        '{"a\nb": 1}\n',  # keys over two lines in a flow mapping: 1.1 refuses them
        "{a\n b: 1}\n",
        '{"a"\n : 1}\n',
        '["a\nb": 1]\n',
        '{"\r": "\r"}\n',
        "k: [a,\n  b]\n",
        "--- &a\nk: v\n",
        "k:\n  - - !!str 1\n",
        "? &k a\n: b\n",
        '{"k":&a v}\n',
        "k: |\n  x\n   y\n",
        "k: >-\n  a\n  b\n\n",
        'k: "\\u00e9\\x41\\/"\n',
        "k: 'it''s'\n",
        "{a, b}\n",
        "? a\n: b\n",
        "? [a]\n: b\n",
        "%YAML 1.1\n---\na: 1\n",
        "k: a\u2028b\n",
        "k: a\x85b\n",
        "k: \x07\n",
        "k: [1, 2\n",  # not YAML at all: PyYAML's error
        "a:\n\tb: 1\n",
        "a: b: c\n",
        "- a\nb: c\n",
    ],
)
def test_streams_with_structure_read_as_pyyaml_reads_them(text: str) -> None:
    assert_like_pyyaml(text)


def test_nothing_is_shared_between_two_places() -> None:
    """PyYAML shares an anchored mapping among its aliases; a pod changed in place must not."""
    (document,) = yaml_stream.load_all("x: &a {p: [1]}\ny: *a\nz: !!str yes\n")
    assert document["x"] == document["y"] and document["x"] is not document["y"]
    assert document["x"]["p"] is not document["y"]["p"]


def yaml_files(root: Path) -> list[Path]:
    return sorted(path for pattern in ("*.yaml", "*.yml") for path in root.rglob(pattern))


def test_every_yaml_file_of_the_repository_reads_as_pyyaml_reads_it() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "*.yaml", "*.yml"], cwd=REPO, capture_output=True, text=True, check=True
    )
    files = [REPO / name for name in listed.stdout.split()]
    assert len(files) > 100
    fast = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert_like_pyyaml(text)
        fast += not yaml_stream.needs_pyyaml(text)
    assert fast > len(files) // 3  # many take the fast path (flow collections do not)


def test_every_yaml_file_of_the_fixtures_reads_as_pyyaml_reads_it() -> None:
    fixture_dir()  # skips, saying so, in a checkout without ../shared/fixtures
    files = yaml_files(FIXTURES)
    assert len(files) > 100
    for path in files:
        assert_like_pyyaml(path.read_text(encoding="utf-8", errors="replace"))


# --- generated streams ----------------------------------------------------------------------------

# Mostly scalars both read alike, so that many streams take the fast path.
WORDS = (
    st.sampled_from(ALIKE)
    | st.sampled_from(
        [*ALIKE, "a b", "x: y", "#x", "'q'", '"q"', "-x", "[a]", "{a}", "a\tb", "yes no", "1 2"]
    )
    | st.sampled_from(APART)
)
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


def _quoted(value: str, quote: str) -> str:
    if quote == "'":
        return "'" + value.replace("'", "''") + "'"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@st.composite
def scalars(draw: st.DrawFn) -> str:
    style = draw(st.sampled_from(["plain", "plain", "plain", "'", '"', "text"]))
    if style == "plain":
        return draw(WORDS)
    if style == "text":
        return _quoted(draw(TEXT), '"')
    return _quoted(draw(WORDS), style)


@st.composite
def nodes(draw: st.DrawFn, indent: int = 0, depth: int = 0) -> str:
    """A node's text for a value position at `indent` (block or flow); starts after `key:`."""
    kinds = ["scalar", "map", "seq", "flow", "block", "alias"] if depth < 3 else ["scalar"]
    kind = draw(st.sampled_from(kinds))
    pad = " " * (indent + 2)
    if kind == "scalar":
        anchor = draw(st.sampled_from(["", "", "&a ", "&b "]))
        return " " + anchor + draw(scalars()) + draw(st.sampled_from(["", "", " # c"])) + "\n"
    if kind == "alias":
        return " " + draw(st.sampled_from(["*a", "*b"])) + "\n"
    if kind == "block":
        lines = draw(st.lists(WORDS, min_size=1, max_size=3))
        head = draw(st.sampled_from(["|", ">", "|-", ">+", "|2"]))
        return f" {head}\n" + "".join(f"{pad}{line}\n" for line in lines)
    if kind == "flow":
        items = draw(st.lists(scalars(), max_size=3))
        comma = draw(st.sampled_from([", ", ", ", ",\n" + pad, "\n" + pad + ", "]))
        if draw(st.booleans()):
            return " [" + comma.join(items) + "]\n"
        return " {" + comma.join(f"{item}: {item}" for item in items) + "}\n"
    entries = draw(st.lists(st.tuples(scalars(), st.booleans()), min_size=1, max_size=3))
    out = "\n"
    for key, nested in entries:
        child = draw(nodes(indent + 2, depth + 1)) if nested else " " + draw(scalars()) + "\n"
        out += f"{pad}- {key}\n" if kind == "seq" and not nested else ""
        key = draw(st.sampled_from([key, key, key, "[a]", "{a: b}", "[x, *a]"]))
        out += f"{pad}{key}:{child}" if kind == "map" else ""
        out += f"{pad}-{child}" if kind == "seq" and nested else ""
    return out


@st.composite
def streams(draw: st.DrawFn) -> str:
    documents = draw(st.lists(nodes(), min_size=1, max_size=3))
    return "".join(
        draw(st.sampled_from(["", "---\n", "--- # d\n"])) + "root:" + document
        for document in documents
    )


@settings(
    max_examples=int(os.environ.get("YAML_EXAMPLES", "400")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(streams())
def test_generated_streams_read_as_pyyaml_reads_them(text: str) -> None:
    assert_like_pyyaml(text)


OBJECTS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT | WORDS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT | WORDS, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=int(os.environ.get("YAML_EXAMPLES", "400")), deadline=None)
@given(
    OBJECTS,
    st.sampled_from([None, "'", '"', "|", ">"]),
    st.sampled_from([None, True, False]),
    st.booleans(),
    st.sampled_from([20, 80]),
)
def test_what_emitters_write_reads_as_pyyaml_reads_it(
    value: Any, style: str | None, flow: bool | None, unicode: bool, width: int
) -> None:
    """Most pod files are written by a YAML emitter (kubectl, Argo, PyYAML): PyYAML's, in each of
    its styles."""
    text = yaml.safe_dump_all(
        [value, value],
        default_style=style,
        default_flow_style=flow,
        allow_unicode=unicode,
        width=width,
    )
    assert_like_pyyaml(text)


def test_the_pods_the_compiler_makes_take_the_fast_path() -> None:
    """What the speed is for: the step pods of the reference pipelines (KFP's inlined component
    source holds `from kfp.dsl import *`, which the emitter may wrap before the `*`), as PyYAML
    writes them."""
    from secureml.compile.compiler import _documents, compile_pipeline
    from secureml.compile.pipeline_loader import load_pipeline
    from secureml.pods.preview import preview_pods
    from tests.support.paths import REFERENCE_PIPELINES
    from tests.support.profiles import example_profile

    profile = example_profile("team-a")
    pods = []
    for path in REFERENCE_PIPELINES:
        compiled = compile_pipeline(load_pipeline(path), profile, check_admission=False)
        assert compiled.component is not None
        pods += preview_pods(_documents(compiled.component), profile, mutate=False).values()
    assert len(pods) >= 3
    for width in (80, 30):  # block style, as kubectl writes pods; wrapped quoted source too
        text = yaml.safe_dump_all(pods, default_flow_style=False, width=width)
        assert "import *" in text
        assert not yaml_stream.needs_pyyaml(text)
        assert same(yaml_stream.load_all(text), pods)
    text = yaml.safe_dump_all(pods, default_flow_style=None)  # flow collections: PyYAML reads
    assert yaml_stream.needs_pyyaml(text) and same(yaml_stream.load_all(text), pods)


def test_an_attack_pod_written_with_a_1_1_boolean_is_read_as_kubernetes_reads_it() -> None:
    """tests/rules/attacks/t01-privileged-yaml11-yes.yaml: `privileged: yes` in block style. Only
    its `yes` sends it to PyYAML (True, as Kubernetes' decoder reads it); yaml_rs alone would give
    the string "yes" (test_attacks checks the pod is denied)."""
    text = (REPO / "tests/rules/attacks/t01-privileged-yaml11-yes.yaml").read_text()
    assert yaml_stream.needs_pyyaml(text)
    assert not yaml_stream.needs_pyyaml(text.replace("privileged: yes", "privileged: true"))
    (pod,) = yaml_stream.load_all(text)
    (alone,) = [yaml_rs.loads(text)]
    main = [c for c in pod["spec"]["containers"] if c["name"] == "main"]
    assert main[0]["securityContext"]["privileged"] is True
    assert any(
        c.get("securityContext", {}).get("privileged") == "yes" for c in alone["spec"]["containers"]
    )


def test_a_stream_the_fast_reader_reads_whole_does_not_import_pyyaml(tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: a\n"
    )
    probe = (
        "import sys\nfrom secureml.pods.workloads import read_pods\n"
        f"assert read_pods([{str(pod)!r}])[0].name == 'p'\n"
        "assert 'yaml' not in sys.modules, 'PyYAML imported'\n"
        "from secureml.core import yaml_stream\n"
        "assert yaml_stream.YAMLError is __import__('yaml').YAMLError\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)


def test_a_timestamp_is_read_as_its_text() -> None:
    """As the Kubernetes YAML reader (go-yaml v2 into an interface) reads it; both readers agree."""
    text = "a: 2026-01-01\nb: !!timestamp 2001-12-14t21:59:43.10-05:00\nc: '2026-01-01'\n"
    expected = [{"a": "2026-01-01", "b": "2001-12-14t21:59:43.10-05:00", "c": "2026-01-01"}]
    assert yaml_stream.load_all(text) == expected
    assert yaml_stream.load_all("a: 2026-01-01\n") == [{"a": "2026-01-01"}]
