"""The README and docs/ hold together: every relative link and anchor resolves, and no commit hash appears outside
CHANGELOG.md and results/ (a reader gets dates and descriptions; git keeps the hashes)."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            out.append(line)
    return out


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path.read_text()):
        m = re.match(r"^#{1,6} (.+)$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_the_slug_rule_matches_githubs(tmp_path):
    # anchors() itself, on headings whose GitHub anchors are known: punctuation dropped, spaces to hyphens (a
    # dropped character between two spaces leaves two hyphens), a repeated heading numbered
    page = tmp_path / "page.md"
    page.write_text("# Verdicts: intervals, ties and `--precision`\n## Sessions\n```\n# not a heading\n```\n"
                    "## Sessions\n### FSDP2 / ZeRO-3 (bf16)\n")
    assert anchors(page) == {"verdicts-intervals-ties-and---precision", "sessions", "sessions-1",
                             "fsdp2--zero-3-bf16"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for line in _prose(page.read_text()):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{target}: no heading with that anchor in {dest.relative_to(REPO)}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "CHANGELOG.md"], ids=lambda p: str(p.relative_to(REPO)))
def test_no_commit_hash_outside_the_changelog(page):
    found = [h for line in _prose(page.read_text()) for h in HASH.findall(line)]
    assert not found, f"{page.relative_to(REPO)} names commits {found}: say a date or what changed instead"


def test_the_readme_is_read_in_five_minutes():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


def test_every_option_of_every_subcommand_is_documented():
    import typer

    from harness.cli import app

    text = "\n".join(p.read_text() for p in PAGES)
    missing = [f"{name} {opt}" for name, sub in typer.main.get_command(app).commands.items() for prm in sub.params
               for opt in prm.opts if opt.startswith("--") and opt != "--help"
               and not re.search(re.escape(opt) + r"(?![\w-])", text)]
    assert not missing, f"options no page of README.md or docs/ names: {missing}"


def test_help_is_whole_at_80_columns_and_shows_flags_without_a_value_placeholder():
    # typer put `<bool>` beside every flag, which reads as if `--bind-cores true` were accepted (a flag takes no
    # value), and its boxed tables cut descriptions at 80 columns with "…"; click's plain layout wraps them
    import typer
    from typer.testing import CliRunner

    from harness.cli import app

    runner = CliRunner()
    names = [""] + list(typer.main.get_command(app).commands)
    for name in names:
        got = runner.invoke(app, [name, "--help"] if name else ["--help"], env={"COLUMNS": "80"})
        assert got.exit_code == 0, (name, got.output)
        assert "--help" in got.output and "<bool>" not in got.output, (name, got.output)
        lines = got.output.splitlines()
        assert all(len(line) <= 80 for line in lines), (name, max(lines, key=len))
        assert "…" not in got.output, (name, got.output)
        if not name:  # click shortens a command's line in the list with "..."
            commands = lines[lines.index("Commands:") + 1:]
            assert len(commands) >= 10 and not any(line.endswith("...") for line in commands), got.output


def test_the_readme_says_how_long_the_smallest_adapter_is():
    import re

    said = re.search(r"The smallest, `adapters/dp.py`, is (\d+) lines", (REPO / "README.md").read_text())
    assert said and int(said.group(1)) == len((REPO / "adapters" / "dp.py").read_text().splitlines())


def test_compare_knobs_describes_every_knob_and_workload_option():
    import adapters
    import workloads
    from harness.shared.options import catalogue

    undescribed = [f"{name}.{k['name']}" for name in adapters.names()
                   for k in catalogue(adapters.get(name).Knobs) if not k["doc"]]
    undescribed += [f"{name}.{k['name']}" for name in workloads.names()
                    for k in catalogue(workloads.get(name).Options) if not k["doc"]]
    assert not undescribed, f"options `compare knobs` would list without a word: {undescribed}"
