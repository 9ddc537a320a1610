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


def test_torchs_facts_come_from_the_cache_only_for_the_same_torch_cores_and_variables(tmp_path, monkeypatch):
    from harness.ground import provenance

    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path))
    for name in provenance.TORCH_FACTS_ENV:
        monkeypatch.delenv(name, raising=False)
    fresh = provenance._torch_facts()
    calls = []
    real = provenance._torch_facts

    def counted():
        calls.append(1)
        return real()

    monkeypatch.setattr(provenance, "_torch_facts", counted)
    assert provenance.torch_facts() == fresh and len(calls) == 1  # computed, then kept
    assert provenance.torch_facts() == fresh and len(calls) == 1  # read back: what torch itself says
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # changes torch's default threads: asked again
    provenance.torch_facts()
    assert len(calls) == 2
    monkeypatch.delenv("OMP_NUM_THREADS")
    provenance.torch_facts()
    assert len(calls) == 2


def test_facts_that_name_a_cuda_device_are_never_kept(tmp_path, monkeypatch):
    from harness.ground import provenance

    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path))
    gpu = {"torch": "2.13.0", "cuda_available": True, "gpus": ["NVIDIA H200"]}
    calls = []
    monkeypatch.setattr(provenance, "_torch_facts", lambda: calls.append(1) or gpu)
    assert provenance.torch_facts() == gpu and provenance.torch_facts() == gpu
    assert len(calls) == 2 and not (tmp_path / "torch_facts.json").exists()


def test_a_home_that_does_not_exist_is_not_made_for_the_cache(tmp_path, monkeypatch):
    # HOME=/nonexistent (a service account's): compare made /nonexistent/home/.cache/compare with its cache files
    from harness.shared import cache

    monkeypatch.delenv("COMPARE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "nonexistent" / "home"))
    cache.write_dict("x.json", {"a": 1})
    assert not (tmp_path / "nonexistent").exists() and cache.read_dict("x.json") == {}
    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path / "c"))  # one given is made, as before
    cache.write_dict("x.json", {"a": 1})
    assert cache.read_dict("x.json") == {"a": 1}


def test_an_empty_compare_cache_is_the_default_directory_not_the_current_one(monkeypatch, tmp_path):
    # An outside check: COMPARE_CACHE= compare knobs ddp left field_docs/ in the user's current directory
    from pathlib import Path

    from harness.shared.cache import cache_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("COMPARE_CACHE", "")
    assert cache_dir() == Path(tmp_path) / ".cache" / "compare"
    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
