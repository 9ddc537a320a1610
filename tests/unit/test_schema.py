"""The record schema is written once (harness/ground/schema.py): docs/records.md is its rendering, and every field of
every
committed fixture record is listed there for its kind (a field added in the code without a line there fails here)."""

import json
from pathlib import Path

import pytest

from harness.ground import schema

from conftest import RUNS, records_text

REPO = Path(__file__).resolve().parents[2]


def test_docs_records_md_is_the_schemas_rendering():
    assert (REPO / "docs" / "records.md").read_text() == schema.markdown(), \
        "regenerate it: .venv/bin/python -m harness.ground.schema > docs/records.md"


def test_every_field_of_every_fixture_record_is_documented_for_its_kind():
    undocumented = set()
    for path in sorted(RUNS.glob("*/records.jsonl.gz")):
        for line in records_text(path.parent).splitlines():
            rec = json.loads(line)
            kind = rec.get("kind", "run")
            undocumented |= {f"{kind}.{k} ({path.parent.name})" for k in rec if k not in schema.fields(kind)}
    assert not undocumented, sorted(undocumented)


def test_each_field_is_declared_once_with_what_it_holds():
    """A field is declared in one layer for a kind of record (a field of both run and comm records, `adapter`, in
    one layer of each), and every declaration says what it holds: docs/records.md has no blank description."""
    from harness.ground.fields import LAYERS, field_docs

    for kind in ("run", "scale", "comm"):
        layers = [layer for layer, kinds, _ in LAYERS if kind in kinds]
        names = [name for layer in layers for name in layer.__annotations__]
        assert len(names) == len(set(names)), kind
    assert all(doc for _, _, doc in schema.entries())
    nested = {"median", "p10", "p90", "n", "point", "scaling", "python", "torch"}
    for layer, _, _ in LAYERS:  # top-level layers document every field; nested ones (StepTime, Env) need not
        assert set(layer.__annotations__) - set(field_docs(layer)) <= nested, layer.__name__


def test_every_field_the_reader_requires_is_documented_with_what_it_requires():
    # the types check_record holds a record to are written once, in harness/ground/fields.py, and shown in
    # docs/records.md
    from harness.ground.fields import checked_fields
    from harness.ground.record import check_record

    required = checked_fields()
    assert set(required) <= {name for name, _, _ in schema.entries()}
    assert required["samples_per_s"] == "number, every measured run, scale and tune record"
    assert required["run_id"] == "str, every record" and required["op"] == "str, every measured comm record"
    rec = json.loads(records_text(RUNS / "digits_cpu2_20261126-045209").splitlines()[0])
    ints = [field for field, what in required.items() if field in rec and what.startswith("int")]
    assert {"repeat", "schema_version", "world_size"} <= set(ints)  # a run record has these (size_bytes is comm's)
    for field in ints:
        with pytest.raises(ValueError) as exc:
            check_record({**rec, field: "1"})
        assert f"'{field}' is str, expected int" in str(exc.value)


def test_a_status_or_kind_no_compare_writes_is_refused_naming_the_choices():
    # a misspelt status ('sucess') was read as a row that neither ran nor failed, and a kind 'rnu' as a run
    from harness.ground.record import check_record

    rec = json.loads(records_text(RUNS / "digits_cpu2_20261126-045209").splitlines()[0])
    check_record(rec)
    with pytest.raises(ValueError, match=r"^r: status 'sucess'; a record's status is one of ok, not_reached, "
                                         r"diverged, unavailable, failed, timeout, interrupted, not_run$"):
        check_record({**rec, "status": "sucess"}, "r")
    with pytest.raises(ValueError, match=r"^r: kind 'rnu'; a record's kind is one of run, scale, comm, tune$"):
        check_record({**rec, "kind": "rnu"}, "r")
    with pytest.raises(ValueError, match=r"^r: status 'diverged'; a comm record's status is one of ok, unavailable, "):
        check_record({**rec, "kind": "comm", "status": "diverged"}, "r")
