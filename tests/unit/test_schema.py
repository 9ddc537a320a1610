"""The record schema is written once (harness/schema.py): docs/records.md is its rendering, and every field of every
committed fixture record is listed there for its kind (a field added in the code without a line there fails here)."""

import json
from pathlib import Path

from harness import schema

from conftest import RUNS

REPO = Path(__file__).resolve().parents[2]


def test_docs_records_md_is_the_schemas_rendering():
    assert (REPO / "docs" / "records.md").read_text() == schema.markdown(), \
        "regenerate it: .venv/bin/python -m harness.schema > docs/records.md"


def test_every_field_of_every_fixture_record_is_documented_for_its_kind():
    undocumented = set()
    for path in sorted(RUNS.glob("*/records.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            kind = rec.get("kind", "run")
            undocumented |= {f"{kind}.{k} ({path.parent.name})" for k in rec if k not in schema.fields(kind)}
    assert not undocumented, sorted(undocumented)


def test_each_field_is_written_once():
    names = [name for name, _, _ in schema.FIELDS]
    assert len(names) == len(set(names))
