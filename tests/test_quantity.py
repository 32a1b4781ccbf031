"""secureml.core.quantity: the one parser and formatter of memory sizes."""

from __future__ import annotations

import pytest

from secureml.core.quantity import format_bytes, parse_bytes


@pytest.mark.parametrize(
    ("text", "expected"),
    [("16Gi", 16 * 2**30), ("500M", 500 * 10**6), (1024, 1024), ("7", 7), (" 2Ki ", 2048)],
)
def test_parse_bytes(text: object, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["16 GB", "-1", "Gi", True, 0, "1.5Gi", "0Mi", "1e3", "100m"])
def test_parse_bytes_rejects(text: object) -> None:
    with pytest.raises(ValueError):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        (16 * 2**30, "16Gi"),
        (3 * 2**40, "3Ti"),
        (1536 * 2**20, "1536Mi"),
        (2048, "2Ki"),
        (1000, "1000"),
    ],
)
def test_format_bytes_round_trips(amount: int, text: str) -> None:
    assert format_bytes(amount) == text
    assert parse_bytes(text) == amount
