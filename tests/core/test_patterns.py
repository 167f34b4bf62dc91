"""A person's regular expression runs on RE2: linear time, so a pattern that backtracks for
ever under Python's `re` returns; what RE2 cannot do is refused by name, with what to write."""

from __future__ import annotations

import pytest

from core.patterns import MAX_INPUT_CHARS, MAX_PROGRAM_SIZE, PatternError, UserPattern
from tests.liveness import returns_within

CATASTROPHIC = r"^(a+)+$"


def test_a_catastrophic_pattern_meets_16000_characters_and_returns() -> None:
    pattern = UserPattern(CATASTROPHIC)
    with returns_within():
        assert not pattern.matches("a" * 16_000 + "!")
        assert pattern.matches("a" * 16_000)
        assert pattern.search("a" * 16_000 + "!") is None


@pytest.mark.parametrize(
    ("pattern", "named", "instead"),
    [
        (r"(\d+) \1", "a backreference `\\1`", "write the text out again"),
        (r"(?P<n>x)(?P=n)", "a named backreference", "write the text out again"),
        (r"loss(?=:)", "a lookahead", "match the text itself"),
        (r"loss(?!:)", "a negative lookahead", "match what may follow"),
        (r"(?<=loss=)\S+", "a lookbehind", "include the preceding text"),
        (r"(?<!x)loss", "a negative lookbehind", "match what may precede"),
        (r"(?>a+)b", "an atomic group", "plain group"),
        (r"a++b", "a possessive quantifier", "drop its last `+`"),
        (r"(a)?(?(1)b|c)", "a conditional", "alternatives with `|`"),
        (r"done\Z", "`\\Z`", "write `\\z`"),
        (r"x{1001}", "a count above 1000", "at most 1000"),
    ],
)
def test_what_re2_cannot_do_is_named_with_how_to_write_it(
    pattern: str, named: str, instead: str
) -> None:
    with pytest.raises(PatternError) as refused:
        UserPattern(pattern)
    said = str(refused.value)
    assert said.startswith(named) and "is not supported by RE2" in said, said
    assert instead in said and "github.com/google/re2/wiki/Syntax" in said


def test_a_broken_pattern_says_what_re2_found() -> None:
    with pytest.raises(PatternError, match=r"not a regular expression RE2 accepts \(missing \]"):
        UserPattern("[a-z")


def test_a_pattern_too_costly_or_too_long_is_refused_with_its_size() -> None:
    with pytest.raises(PatternError) as refused:
        UserPattern(r"(\w+\s*){100}")
    assert f"at most {MAX_PROGRAM_SIZE})" in str(refused.value)
    assert "smaller counts" in str(refused.value)
    with pytest.raises(PatternError, match="600 characters long; at most 500"):
        UserPattern("a" * 600)


def test_groups_and_positions_are_those_of_the_whole_text() -> None:
    pattern = UserPattern(r"loss=(\S+)(x)?")
    found = pattern.search("step 3 loss=0.25 done")
    assert found is not None and pattern.groups == 2
    assert (found.group(1), found.start(1), found.end(1)) == ("0.25", 12, 16)
    assert found.group(2) is None and found.start(2) == -1
    # Only the last MAX_INPUT_CHARS are searched by default, the first ones with "head";
    # positions stay those of the whole text.
    text = "loss=1 " + "x" * MAX_INPUT_CHARS + " loss=2"
    tail = pattern.search(text)
    head = pattern.search(text, "head")
    assert tail is not None and tail.group(1) == "2" and tail.start(1) == len(text) - 1
    assert head is not None and head.group(1) == "1"
    assert not UserPattern("^loss=1").matches(text) and UserPattern("^loss").matches(text, "head")
