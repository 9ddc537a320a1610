"""Text for one-line messages: a long error shortened at a word, never mid-word; a rate in plain digits.

Runs in: the parent and every rank."""

from __future__ import annotations

import math
import re

ELLIPSIS = "…"


# A terminal's escape sequences (ESC [ ... a letter: colours, "\x1b[2J" clearing the screen) that a framework's
# coloured log or a hostile message holds are dropped; what split() leaves of the other C0 controls and DEL (ESC
# alone, NUL, BEL) is shown escaped: a message quoted from a log or an exception neither drives the terminal nor
# lands raw in report.md
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]}


def one_line(text: str) -> str:
    """`text` with every run of whitespace (newlines too) as one space, a terminal's escape sequences dropped and
    other control characters escaped."""
    return " ".join(_ESCAPES.sub("", str(text)).split()).translate(_CONTROLS)


def newlines_shown(text: str) -> str:
    """`text` with its line breaks shown escaped ("\\n", as repr shows them): a refusal quoting what the user typed
    stays one line whatever they typed."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


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


def listed(names: list[str], most: int = 4) -> str:
    """The first `most` of `names`, then how many more: "a, b, c, d and 3 more"."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def rate(value: float) -> str:
    """A rate (samples/s) in plain digits: whole with thousands separators from 100 up ("10,683"), three significant
    figures below ("0.0127"), never in exponent form (a model of a huge cluster's 0.1 samples/s once read "0")."""
    if value <= 0:
        return f"{value:.3g}"
    places = max(0, 2 - math.floor(math.log10(value)))
    if round(value, places) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{places}f}"
