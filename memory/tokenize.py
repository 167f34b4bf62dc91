"""BM25 tokenization for memory recall: code identifiers, numbers, accents and CJK text.

`tokenize(text)` NFKC-normalizes and lowercases, keeps whole identifiers (`memory.index`,
`snake_case`, `getHTTPResponse`, `kebab-case`, `v1.2.3`) and also emits their parts, folds
accents on Latin letters (`café` → `cafe`), turns CJK runs into character bigrams and applies
a tiny English suffix strip so `deploys`/`deployed`/`deploying` meet `deploy`.
"""

from __future__ import annotations

import re
import unicodedata

# A chunk is a run of word characters possibly joined by identifier punctuation, so dotted
# paths, kebab-case and version numbers stay one unit (their parts are emitted separately).
# `\w` excludes combining marks (Devanagari vowel signs, Thai vowels, accents left by NFKC),
# which would cut words apart: the mark blocks are added explicitly.
_WORD = r"[\w\u0300-\u036f\u0900-\u0dff\u0e00-\u0eff\u1ab0-\u1aff\u20d0-\u20ff\ufe20-\ufe2f]"
_CHUNK = re.compile(rf"{_WORD}+(?:[._\-:/]{_WORD}+)*", re.UNICODE)
_JOINERS = re.compile(r"[._\-:/]+")

# Function words carry no topical signal; dropping them keeps BM25 scores on content words.
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "will",
        "with",
        "you",
        "your",
    ]
)


def _is_cjk(ch: str) -> bool:
    """True for Han, Hiragana, Katakana and Hangul characters (scripts written without spaces)."""
    code = ord(ch)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x3040 <= code <= 0x30FF
        or 0xAC00 <= code <= 0xD7AF
        or 0xF900 <= code <= 0xFAFF
        or 0x20000 <= code <= 0x2A6DF
    )


def _fold_latin(text: str) -> str:
    """Strip combining marks whose base is an ASCII letter (é → e); other scripts keep theirs."""
    out: list[str] = []
    for ch in unicodedata.normalize("NFKD", text):
        if unicodedata.combining(ch) and out and out[-1].isascii():
            continue
        out.append(ch)
    return unicodedata.normalize("NFC", "".join(out))


def _char_class(ch: str) -> int:
    """0 lower/other letter, 1 upper, 2 digit: the transitions between them split camelCase."""
    if ch.isdigit():
        return 2
    return 1 if ch.isupper() else 0


def split_camel(word: str) -> list[str]:
    """Split `getHTTPResponse2` into `get`, `HTTP`, `Response`, `2` (Unicode-aware)."""
    parts: list[str] = []
    start = 0
    for i in range(1, len(word)):
        prev, cur = _char_class(word[i - 1]), _char_class(word[i])
        nxt = _char_class(word[i + 1]) if i + 1 < len(word) else cur
        lower_to_upper = prev == 0 and cur == 1
        acronym_end = prev == 1 and cur == 1 and nxt == 0 and word[i + 1 :][:1].isalpha()
        if lower_to_upper or acronym_end or (prev == 2) != (cur == 2):
            parts.append(word[start:i])
            start = i
    parts.append(word[start:])
    return [p for p in parts if p]


def stem(token: str) -> str:
    """A tiny English suffix strip (plural, -ing, -ed) on ASCII words; others pass through."""
    if not token.isascii() or not token.isalpha() or len(token) <= 3:
        return token
    if token.endswith("ies") and len(token) > 4:
        return token[:-3] + "y"
    if token.endswith("sses"):
        return token[:-2]
    if token.endswith("ing") and len(token) > 5:
        return token[:-3]
    if token.endswith("ed") and len(token) > 4:
        return token[:-2]
    if token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def _cjk_tokens(run: str) -> list[str]:
    """Character bigrams of a CJK run (a lone character stands for itself)."""
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def _split_scripts(chunk: str) -> list[tuple[bool, str]]:
    """Cut a chunk into alternating (is_cjk, run) pieces."""
    runs: list[tuple[bool, str]] = []
    for ch in chunk:
        cjk = _is_cjk(ch)
        if runs and runs[-1][0] == cjk:
            runs[-1] = (cjk, runs[-1][1] + ch)
        else:
            runs.append((cjk, ch))
    return runs


def _word_tokens(chunk: str) -> list[str]:
    """Tokens of a non-CJK chunk: its parts (stemmed) plus the whole identifier when compound."""
    out: list[str] = []
    pieces = [p for p in _JOINERS.split(chunk) if p]
    for piece in pieces:
        parts = split_camel(piece)
        out.extend(stem(p.lower()) for p in parts if p.lower() not in _STOPWORDS)
        if len(parts) > 1:
            out.append(piece.lower())  # `HybridIndex` inside `memory.index.HybridIndex`
    out.extend(_sub_paths(chunk))
    return out


def _sub_paths(chunk: str) -> list[str]:
    """Every contiguous run of 2+ pieces (`memory.index` inside `raven_bot.memory.index`)."""
    spans = [m.span() for m in re.finditer(r"[^._\-:/]+", chunk)]
    if len(spans) < 2 or len(spans) > 6:  # long paths: the whole chunk only (bounded output)
        return [chunk.lower()] if len(spans) > 1 else []
    return [
        chunk[spans[i][0] : spans[j][1]].lower()
        for i in range(len(spans))
        for j in range(i + 1, len(spans))
    ]


def tokenize(text: str) -> list[str]:
    """BM25 tokens of `text` (see the module docstring for the rules)."""
    normalized = _fold_latin(unicodedata.normalize("NFKC", text))
    tokens: list[str] = []
    for match in _CHUNK.finditer(normalized):
        for cjk, run in _split_scripts(match.group(0)):
            if cjk:
                tokens.extend(_cjk_tokens(run))
            else:
                tokens.extend(_word_tokens(run))
    return tokens
