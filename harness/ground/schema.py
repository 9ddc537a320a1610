"""docs/records.md, generated from the one definition of a record: the TypedDict layers of harness/ground/fields.py,
whose fields (required, or NotRequired) each carry their docstring, which `check_record` reads the types of.

Runs in: the parent (and `python -m harness.ground.schema`, which prints docs/records.md). A test checks that every
field of every committed fixture record is declared for its kind, and that docs/records.md is this module's
rendering, so the record cannot grow in the code without growing there. Nested fields are described inside their
parent's entry.
"""

from __future__ import annotations

import functools

from harness.ground.fields import LAYERS, checked_fields, field_docs
from harness.ground.record import READABLE_SCHEMAS, SCHEMA_VERSION


@functools.cache
def entries() -> list[tuple[str, tuple[str, ...], str]]:
    """(field, the kinds of record it is in, what it holds) for every top-level field, in the order the layers of
    harness/ground/fields.py declare them; a field two layers declare (`adapter` in run and comm records) once."""
    out: dict[str, tuple[list[str], str]] = {}
    for layer, kinds, _ in LAYERS:
        docs = field_docs(layer)
        for name in layer.__annotations__:
            seen = out.setdefault(name, ([], docs.get(name, "")))
            seen[0].extend(k for k in kinds if k not in seen[0])
    return [(name, tuple(kinds), doc) for name, (kinds, doc) in out.items()]


def fields(kind: str) -> dict[str, str]:
    return {name: doc for name, kinds, doc in entries() if kind in kinds}


def markdown() -> str:
    lines = ["# Records", "",
             "Every run writes `records.jsonl`: one JSON object per row and launch (`compare run`, `compare scale`) "
             "or per backend, op and size (`compare comm`). `compare report DIR` renders a report from these alone. "
             "This page is generated from `harness/ground/schema.py` (`python -m harness.ground.schema > "
             "docs/records.md`); a test keeps the two equal and every field of the committed fixture records listed. "
             "The `required` column is what `compare report` checks before it renders anything "
             "(harness/ground/record.py `check_record`; nested fields are checked too); a field without it is "
             "optional, and checked against its declared type where a record holds it. Every field, its type and "
             "what it holds are declared once, as TypedDicts in "
             "harness/ground/fields.py (`Base`, `Run`, `RunOnly`, `Measured`, `Scale`, `Comm`, `CommMeasured`; "
             "nested: `Env`, `Controls`, `StepTime`, `ScalePoint`, `TimeToTarget`, `Reached`), which the check reads "
             "and readers are typed with (`RunRecord`, `CommRecord`).", "",
             "| field | in | required | what it holds |", "|---|---|---|---|"]
    required = checked_fields()
    for name, kinds, doc in entries():
        doc = doc.replace("SCHEMA_VERSION", str(SCHEMA_VERSION)).replace(
            "every one of READABLE_SCHEMAS", " and ".join(map(str, READABLE_SCHEMAS)))
        lines.append(f"| `{name}` | {', '.join(kinds)} | {required.get(name, '')} | {doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
