"""Runs in: the parent. Its ground floor: the modules that import nothing else of the parent, so that everything
above stands on them without a loop: errors (one-line refusals), argv (a request is its command's options), record
and schema (a record's shape, every field), stats (intervals, pairs and their outcome, sessions combined), provenance
(machine and versions), sizes, and outdir (the results directory)."""
