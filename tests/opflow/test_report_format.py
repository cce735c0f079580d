"""The number formats of the report (opflow/report_format.py): one per kind of number."""

from __future__ import annotations

import math

import pytest

from opflow import report_format as fmt


@pytest.mark.parametrize(
    ("x", "text"),
    [(0.008428, "8.43e-3"), (0.0084, "8.40e-3"), (7.696e-05, "7.70e-5"), (0.1164, "1.16e-1"), (1.0, "1.00e0"), (123.4, "1.23e2")],
)
def test_errors_have_three_significant_digits_and_a_short_exponent(x: float, text: str) -> None:
    assert fmt.sci(x) == text


def test_missing_numbers_are_a_dash() -> None:
    assert fmt.sci(None) == fmt.sci(math.nan) == fmt.ratio(math.inf) == fmt.hmm(None) == fmt.hours(None) == fmt.count(None) == "-"


def test_ratios_times_and_costs() -> None:
    assert fmt.ratio(0.32733) == "0.33" and fmt.ratio(1.0) == "1.00"
    assert fmt.hmm(5798) == "1:37" and fmt.hmm(85.9) == "0:01" and fmt.hmm(11049) == "3:04" and fmt.hmm(29) == "0:00"
    assert fmt.hours(1130.58) == "1,130.6" and fmt.hours(0.0723) == "0.1"
    assert fmt.count(2368001) == "2,368,001"
