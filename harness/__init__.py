"""compare's harness: CLI, launching, the per-rank loop, timing, records and reports (see README.md)."""
