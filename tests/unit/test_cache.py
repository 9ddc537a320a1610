"""The on-disk caches: an answer per key, kept beside the answers of other interpreters (two checkouts' venvs)."""

from harness.shared import cache


def test_answers_of_several_keys_live_side_by_side_and_the_oldest_go(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path))
    computed = []

    def answer(k):
        def compute():
            computed.append(k)
            return {"for": k}
        return compute

    for k in ("venv-a", "venv-b", "venv-a", "venv-b"):  # two venvs in turn: each computed once
        assert cache.cached_json("probe", k, answer(k)) == {"for": k}
    assert computed == ["venv-a", "venv-b"]
    for i in range(cache.KEEP_ENTRIES):
        cache.cached_json("probe", f"other-{i}", answer(f"other-{i}"))
    cache.cached_json("probe", "venv-a", answer("venv-a"))  # pushed out by the newer ones: computed again
    assert computed[-1] == "venv-a" and computed.count("venv-a") == 2


def test_a_failed_answer_is_not_remembered_and_an_old_file_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path))
    assert cache.cached_json("probe", "k", lambda: None, keep=lambda v: v is not None) is None
    assert not (tmp_path / "probe.json").exists()
    (tmp_path / "probe.json").write_text('{"key": "k", "value": 3}')  # the one-entry form written before
    assert cache.cached_json("probe", "k", lambda: 4) == 3
    (tmp_path / "probe.json").write_text("not json")
    assert cache.cached_json("probe", "k", lambda: 5) == 5
