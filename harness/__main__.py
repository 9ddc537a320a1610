"""`python -m harness ...` is the same CLI as `compare ...` (for when another `compare`, e.g. ImageMagick's, is first
on PATH)."""

from harness.entry import main

main()
