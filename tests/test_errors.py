"""One line per user-facing error: npuport.errors.describe_exception."""

from __future__ import annotations

from npuport.errors import describe_exception


def test_first_line_only():
    assert describe_exception(ValueError("bad shape\nsecond line\nthird")) == "ValueError: bad shape"


def test_a_heading_line_takes_the_reason_below_it():
    # transformers' strict config checks: "Validation error for field 'hidden_size':\n    TypeError: ..."
    exc = TypeError("Validation error for field 'hidden_size':\n    TypeError: Field 'hidden_size' expected int, got str")
    assert describe_exception(exc) == ("TypeError: Validation error for field 'hidden_size': TypeError: Field "
                                       "'hidden_size' expected int, got str")
    assert describe_exception(KeyError()) == "KeyError: "
