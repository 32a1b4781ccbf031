"""The limits parser, fuzzed: generated inputs (grammar-shaped, mutated and random bytes) through
the C parser built with AddressSanitizer and UBSan, compared with an independent reading of the
grammar in docs/shim.md; and the harness's own mutation fuzzer run for a bounded time."""

from __future__ import annotations

import json
import random
import struct
import subprocess

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fakegpu import SHIM_DIR, build_native

KEYS = ("version", "memory", "compute", "scrub_on_free", "firewall")


def reference(data: bytes) -> tuple[int, int, int, int] | None:
    """docs/shim.md "Limits file", read literally: (memory, compute, scrub_on_free, firewall) or
    None."""
    if len(data) > 4096:
        return None
    values: dict[str, int] = {}
    for line in data.split(b"\n"):
        if any(b < 0x20 and b != 0x09 for b in line):
            return None
        line = line.strip(b" \t")
        if not line or line.startswith(b"#"):
            continue
        key, sep, value = line.partition(b"=")
        if not sep:
            return None
        key, value = key.rstrip(b" \t"), value.lstrip(b" \t")
        name = key.decode("latin-1")
        if name not in KEYS or name in values:
            return None
        if not value.isdigit() or len(value) > 19 or (len(value) > 1 and value.startswith(b"0")):
            return None
        number = int(value)
        if number > 2**63 - 1:
            return None
        values[name] = number
    if values.get("version") != 1 or "memory" not in values:
        return None
    compute, scrub = values.get("compute", 100), values.get("scrub_on_free", 1)
    firewall = values.get("firewall", 0)
    if not 1 <= compute <= 100 or scrub > 1 or firewall > 1:
        return None
    return values["memory"], compute, scrub, firewall


def _harness():
    sanitize = (
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=undefined",
        "-DLIMITS_FUZZ_MAIN",
        f"-I{SHIM_DIR}",
    )
    return build_native(
        "limits_batch",
        [SHIM_DIR / "fuzz" / "limits_fuzz.c", SHIM_DIR / "limits.c"],
        flags=sanitize,
        headers=(SHIM_DIR / "limits.h",),
    )


def run_parser(inputs: list[bytes]) -> list[tuple[int, int, int, int] | None]:
    payload = b"".join(struct.pack("<I", len(x)) + x for x in inputs)
    result = subprocess.run([str(_harness()), "-"], input=payload, capture_output=True, timeout=60)
    assert result.returncode == 0 and b"Sanitizer" not in result.stderr, result.stderr.decode(
        errors="replace"
    )
    out: list[tuple[int, int, int, int] | None] = []
    for line in result.stdout.decode().splitlines():
        words = line.split()
        if words == ["error"]:
            out.append(None)
        else:
            out.append((int(words[1]), int(words[2]), int(words[3]), int(words[4])))
    assert len(out) == len(inputs)
    return out


numbers = st.one_of(
    st.integers(0, 200).map(str),
    st.integers(0, 2**64).map(str),
    st.sampled_from(["", "01", "-1", "1e3", "0x10", " 5", "8M"]),
)
lines = st.one_of(
    st.tuples(
        st.sampled_from(KEYS + ("memroy", "Version", "")),
        st.sampled_from(["=", " = ", "\t=", "==", ":"]),
        numbers,
    ).map(lambda t: f"{t[0]}{t[1]}{t[2]}"),
    st.sampled_from(
        [
            "",
            "# comment",
            "   ",
            "\t# x = 1",
            "version=1",
            "memory=1024",
            "compute=50",
            "scrub_on_free=0",
            "firewall=1",
        ]
    ),
    st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=0x7F), max_size=30),
)
documents = st.one_of(
    st.lists(lines, max_size=8).map(lambda ls: "\n".join(ls).encode()),
    st.lists(lines, max_size=8).map(
        lambda ls: ("version=1\nmemory=4096\n" + "\n".join(ls)).encode()
    ),
    st.binary(max_size=48),
    st.tuples(st.integers(4070, 4100), lines).map(
        lambda t: (f"version=1\nmemory=1\n{t[1]}\n#".encode()).ljust(t[0], b"#")
    ),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(documents, min_size=20, max_size=60))
def test_parser_agrees_with_the_grammar_and_never_faults(inputs: list[bytes]) -> None:
    assert run_parser(inputs) == [reference(x) for x in inputs]


def test_known_cases() -> None:
    cases = {
        b"version=1\nmemory=1073741824\ncompute=25\nscrub_on_free=0\n": (1 << 30, 25, 0, 0),
        b"version=1\nmemory=5\nfirewall=1\n": (5, 100, 1, 1),
        b"version=1\nmemory=5\nfirewall=2\n": None,
        b"version=1\nmemory=0\n": (0, 100, 1, 0),
        b"  # pod annotation\nversion = 1\n\tmemory=5\t\n": (5, 100, 1, 0),
        b"version=1\nmemory=9223372036854775807": (2**63 - 1, 100, 1, 0),
        b"version=1\nmemory=9223372036854775808\n": None,
        b"version=2\nmemory=5\n": None,
        b"memory=5\n": None,
        b"version=1\n": None,
        b"version=1\nmemory=5\nmemory=6\n": None,
        b"version=1\nmemory=5\ncompute=0\n": None,
        b"version=1\nmemory=5\ncompute=101\n": None,
        b"version=1\nmemory=5\nscrub_on_free=2\n": None,
        b"version=1\r\nmemory=5\r\n": None,
        b"version=1\nmemory=5\0\n": None,
        b"version=1\nmemory=+5\n": None,
        b"version=1\nmemory=5\nswap=1\n": None,
        b"version=1\nmemory=5\n" + b"#" * 4096: None,
    }
    assert run_parser(list(cases)) == list(cases.values())
    assert [reference(x) for x in cases] == list(cases.values())


FUZZ_SECONDS = 5


def test_mutation_fuzzing_for_a_bounded_time() -> None:
    """The harness's own mutator (grammar-shaped seeds; bit flips, random bytes, the grammar's
    tokens, deletions, repeats past 4096 bytes) for a few seconds under ASan and UBSan: no fault, no
    broken invariant, and every accepted input reads the same again once written out canonically.
    The seed changes every run and is in the message of a failure, to replay it."""
    seed = random.randrange(1 << 32)
    result = subprocess.run(
        [str(_harness()), "-fuzz", str(FUZZ_SECONDS), str(seed)],
        capture_output=True,
        text=True,
        timeout=FUZZ_SECONDS + 60,
    )
    assert result.returncode == 0 and "Sanitizer" not in result.stderr, (seed, result.stderr)
    stats = json.loads(result.stdout)
    assert stats["execs"] > 10_000 and stats["accepted"] > 0, (seed, stats)
