"""Code both sides run: the parent and every rank (standard library and psutil only, nothing of the parent).
 What a launch's ranks need (spec), how they report (progress, witness), the options and registries both
build from, process facts, caches and the collectives `compare comm` runs."""
