"""Text for one-line messages: a long error shortened at a word, never mid-word.

Runs in: the parent and every rank."""

from __future__ import annotations

ELLIPSIS = "…"


def one_line(text: str) -> str:
    """`text` with every run of whitespace (newlines too) as one space."""
    return " ".join(str(text).split())


def shorten(text: str, limit: int = 300) -> str:
    """`text` on one line, at most `limit` characters: cut at the last space before the limit (a word is never cut
    in two; a single word longer than the limit is), an ellipsis marking the cut."""
    text = one_line(text)
    if len(text) <= limit:
        return text
    room = max(1, limit - len(ELLIPSIS))
    cut = text.rfind(" ", 0, room + 1)
    head = text[:cut] if cut > room // 2 else text[:room]
    return head.rstrip(" ,;:") + ELLIPSIS
