"""Byte sizes as users type them ("64M", "1K:256M") and as reports print them; each the other's inverse.

Runs in: the parent.
"""

from __future__ import annotations

import re

_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_size(text: str) -> int:
    """"4096", "1K", "64M", "1G" (binary units; "KiB"/"MB" spellings too) -> bytes."""
    m = re.fullmatch(r"\s*([0-9]+)\s*([KMG]?)(i?B)?\s*", text, re.IGNORECASE | re.ASCII)  # not "１K"
    if not m:
        raise ValueError(f"size '{text}' is not a byte count such as 4096, 1K, 64M or 1G")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def parse_sizes(text: str, factor: int = 2) -> list[int]:
    """"1K:256M" -> 1K, 2K, ... 256M (x factor); "4K,1M" -> those; "64M" -> one size. Every size must be > 0."""
    if ":" in text:
        lo, hi = (parse_size(p) for p in text.split(":", 1))
        if lo < 1 or hi < lo:
            raise ValueError(f"size range '{text}' must go from a positive size up")
        sizes, s = [], lo
        while s <= hi:
            sizes.append(s)
            s *= factor
        return sizes
    if "," in text and not all(p.strip() for p in text.split(",")) and any(p.strip() for p in text.split(",")):
        raise ValueError(f"an empty size in '{text}' (two commas in a row, or one at an end); e.g. 4K,1M")
    sizes = [parse_size(p) for p in text.split(",") if p.strip()]
    for p, s in zip((p for p in text.split(",") if p.strip()), sizes):
        if s < 1:
            raise ValueError(f"size '{p.strip()}' must be at least 1 byte")
    return sizes


def format_size(b: int) -> str:
    """The inverse of parse_size for whole units: 1024 -> "1K", 64 MiB -> "64M", 1000 -> "1000B"."""
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if b >= scale and b % scale == 0:
            return f"{b // scale}{unit}"
    return f"{b}B"


def format_mib(b: float | None) -> str:
    """Memory for tables: "1,234 MiB", or "–" when not measured."""
    return "–" if b is None else f"{b / 2**20:,.0f} MiB"
