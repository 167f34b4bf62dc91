"""Skill-name identity across sources: two names that read alike are the same skill.

A hub or experience skill must never pass for a local (bundled or user) one, so names are
compared by a key that ignores case, spacing, punctuation, compatibility forms (NFKC:
full-width letters, ligatures), invisible format characters and the common Cyrillic and
Greek look-alikes of Latin letters: `Research-Brief `, `research_brief`, `ｒesearch brief`
and `rеsearch-brief` (Cyrillic е) all have the key of `research-brief`.
"""

from __future__ import annotations

import unicodedata
from types import MappingProxyType

# Cyrillic and Greek letters that render like Latin ones (after casefolding), mapped to the
# Latin letter a reader would see. Not the whole Unicode confusables table: the scripts an
# attacker reaches for first.
_LOOKALIKES = MappingProxyType(
    str.maketrans(
        {
            # Cyrillic
            "а": "a",
            "в": "b",
            "с": "c",
            "ԁ": "d",
            "е": "e",
            "ё": "e",
            "һ": "h",
            "і": "i",
            "ї": "i",
            "ј": "j",
            "к": "k",
            "ӏ": "l",
            "м": "m",
            "н": "h",
            "о": "o",
            "р": "p",
            "ԛ": "q",
            "ѕ": "s",
            "т": "t",
            "у": "y",
            "ԝ": "w",
            "х": "x",
            "ү": "y",
            # Greek
            "α": "a",
            "β": "b",
            "ε": "e",
            "η": "n",
            "ι": "i",
            "κ": "k",
            "ν": "v",
            "ο": "o",
            "ρ": "p",
            "τ": "t",
            "υ": "u",
            "χ": "x",
            "ω": "w",
            # Latin look-alikes outside ASCII that NFKC keeps
            "ı": "i",
            "ȷ": "j",
            "ℓ": "l",
        }
    )
)


def name_key(name: str) -> str:
    """The key two skill names share when they read alike (see the module docstring).

    Only letters and digits count; a name with none keeps its casefolded, stripped text so
    that it does not collide with every other such name."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    # Marks are dropped too (NFKD splits é into e + accent) so accents cannot tell names apart.
    decomposed = unicodedata.normalize("NFKD", folded.translate(_LOOKALIKES))
    key = "".join(ch for ch in decomposed if ch.isalnum())
    return key or " ".join(folded.split())


__all__ = ["name_key"]
