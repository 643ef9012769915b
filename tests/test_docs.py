"""The README and the documentation pages stay connected, without building the site.

The site itself (``mkdocs build --strict``, which renders the API reference from the docstrings) is
CI's docs stage; these checks are fast and need no mkdocs: every relative link of the README and of
``docs/`` points to an existing file and, where it names one, an existing heading; every page is in
the ``mkdocs.yml`` navigation; every ``::: object`` the pages render can be imported; and the README
stays a short front door.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Iterator, List, Set, Tuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_BYTES = 10_000
"""The README is the front door: what it is, install, the two commands, links. Reference goes to docs/."""

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
AUTODOC = re.compile(r"^:::\s+([\w.]+)\s*$", re.M)


def pages() -> List[Path]:
    return sorted(DOCS.rglob("*.md"))


def prose(text: str) -> str:
    """``text`` without fenced code blocks and code spans (links there are examples, not links)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(path: Path) -> Iterator[str]:
    for match in LINK.finditer(prose(path.read_text(encoding="utf-8"))):
        target = match.group(1)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ... are not checked here
            yield target


def slug(heading: str, github: bool = False) -> str:
    """The anchor of a heading: Python-Markdown's ``toc`` slug (the site), or GitHub's (the README)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)  # inline code keeps its text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"[*_]{1,2}([^*_]+)[*_]{1,2}", r"\1", text)
    if github:
        return re.sub(r" ", "-", re.sub(r"[^\w\- ]", "", text.strip().lower()))
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> Set[str]:
    """The headings' anchors of a page, plus the identifiers mkdocstrings renders there (``#pkg.Class``)."""
    text = path.read_text(encoding="utf-8")
    github = path.parent != DOCS and DOCS not in path.parents
    found: Set[str] = set()
    for _, heading in HEADING.findall(FENCE.sub("", text)):
        anchor = base = slug(heading, github)
        count = 0
        while anchor in found:  # a repeated heading gets a suffix
            count += 1
            anchor = f"{base}_{count}" if not github else f"{base}-{count}"
        found.add(anchor)
    return found | set(AUTODOC.findall(text))


def autodoc_anchor(anchor: str, page: Path) -> bool:
    """``#pkg.Class.member`` of an object the page renders with ``::: pkg.Class``."""
    rendered = AUTODOC.findall(page.read_text(encoding="utf-8"))
    return any(anchor == name or anchor.startswith(name + ".") for name in rendered)


def resolved_links() -> Iterator[Tuple[Path, str, Path, str]]:
    for source in [README, *pages()]:
        for target in links(source):
            path, _, anchor = target.partition("#")
            yield source, target, (source.parent / path).resolve() if path else source, anchor


@pytest.mark.parametrize("source", [README, *pages()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_an_existing_file_and_heading(source):
    broken = []
    for origin, target, path, anchor in resolved_links():
        if origin != source:
            continue
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif source != README and DOCS not in path.parents:
            broken.append(f"{target}: outside docs/ (the site cannot link it; name the file as code instead)")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path) and not autodoc_anchor(anchor, path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(ROOT)}")
    assert not broken, f"{source.relative_to(ROOT)}: " + "; ".join(broken)


def nav_pages(entries) -> Iterator[str]:
    for entry in entries:
        if isinstance(entry, str):
            yield entry
        elif isinstance(entry, dict):
            for value in entry.values():
                yield from nav_pages(value) if isinstance(value, list) else [value]


def test_every_page_is_in_the_navigation_and_every_nav_entry_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = list(nav_pages(config["nav"]))
    assert len(listed) == len(set(listed)), "a page is listed twice"
    on_disk = {str(page.relative_to(DOCS)) for page in pages()}
    assert on_disk - set(listed) == set(), "pages missing from mkdocs.yml's nav"
    assert set(listed) - on_disk == set(), "nav entries without a page"


def test_every_rendered_object_can_be_imported():
    missing = []
    for page in pages():
        for name in AUTODOC.findall(page.read_text(encoding="utf-8")):
            module, attribute = name, None
            while True:
                try:
                    obj = importlib.import_module(module)
                    break
                except ModuleNotFoundError:
                    module, _, tail = module.rpartition(".")
                    attribute = tail if attribute is None else f"{tail}.{attribute}"
                    if not module:
                        obj = None
                        break
            for part in attribute.split(".") if attribute and obj is not None else []:
                obj = getattr(obj, part, None)
            if obj is None:
                missing.append(f"{page.relative_to(ROOT)}: ::: {name}")
    assert not missing, "; ".join(missing)


def test_the_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) < README_MAX_BYTES, "move reference material to docs/"
    # one command sets up a fresh machine and runs the default job; the tests in their two tiers
    # (.ci/run runs the full suite and the default run)
    assert (
        "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 --index-url "
        'https://download.pytorch.org/whl/cpu && pip install -e ".[test]" && '
        "comlrl-lightning fit --config configs/madpo.yaml\n"
    ) in text
    assert 'python -m pytest -q -m "not slow"            #' in text
    # the full suite as CI runs it: two worker processes, a test file kept in one
    assert "python -m pytest -q -n 2 --dist loadfile     #" in text
    assert "python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile" in (ROOT / ".ci" / "run").read_text()


def test_the_link_checker_catches_what_it_should(tmp_path):
    """The checks above are not vacuous: a broken file link, a missing heading, code and URLs."""
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## A `code` heading: yes\n\n[a](page.md#a-code-heading-yes) [b](missing.md) "
        "`[c](ignored.md)` [d](https://example.invalid)\n\n```\n[e](ignored.md)\n```\n",
        encoding="utf-8",
    )
    assert list(links(page)) == ["page.md#a-code-heading-yes", "missing.md"]
    assert "a-code-heading-yes" in anchors(page)
    assert slug("Iterative training: rounds, comparators, replay") == "iterative-training-rounds-comparators-replay"
    assert slug("Where the parts' state lives") == "where-the-parts-state-lives"


DEFAULT_RUN_LOG = "COMLRL_LIGHTNING_DEFAULT_RUN_LOG"  # .ci/run: its default run's console output, for the test below
# the lines getting-started.md quotes from the default run's console, each printed once; the group is the number
# its page must quote (the after-training one is per CPU: the page quotes each CPU it was measured on)
DEFAULT_RUN_LINES = [
    r"(collected \d+ preference pairs from \d+ items \(candidate reward mean -?\d+\.\d{4}\))",
    r"(evaluation \(before training, 0 updates\): eval/turn_1/reward_mean = -?\d+\.\d{4})",
    r"evaluation \(after training, \d+ updates\): eval/turn_1/(reward_mean = -?\d+\.\d{4})",
]


def default_run_console(folder: Path) -> str:
    """What the README's default run printed: CI's own run of it (.ci/run runs it before the suite and
    names its console output in ``$COMLRL_LIGHTNING_DEFAULT_RUN_LOG``, so one run serves both), else a
    run of that command here, in ``folder``."""
    given = os.environ.get(DEFAULT_RUN_LOG)
    if given:
        return Path(given).read_text(encoding="utf-8")
    command = [sys.executable, "-m", "comlrl_lightning", "fit", "--config", "configs/madpo.yaml"]
    command += ["--trainer.default_root_dir", str(folder), "--trainer.enable_progress_bar", "false"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"the default run failed:\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


@pytest.mark.slow  # the default run at its full size: about 20 s of CPU time (none in CI: .ci/run's own run)
def test_the_numbers_getting_started_quotes_are_what_the_default_run_gives(tmp_path):
    """A newcomer's first run prints these numbers: the default run takes one thread on any machine
    (runtime/threads.py), so they hold whatever the core count on each CPU we measured, and the pages
    quote each CPU's (another thread count ends elsewhere, and the pages say so)."""
    console = default_run_console(tmp_path)
    # the final value depends on the CPU's kernels: the page quotes each CPU it was measured on (the
    # README quotes none: it links to the page, so each number has one source)
    started = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    for pattern in DEFAULT_RUN_LINES:
        printed = re.findall(pattern, console)
        assert len(printed) == 1, f"{pattern!r} printed {len(printed)} times:\n{console[-3000:]}"
        assert printed[0] in started, printed[0]


# ---------------------------------------------------------------------------------------------
# Every Python snippet of the README and of every docs page runs

SNIPPET_PAGES = [README, *pages()]
SNIPPET = re.compile(r"(?:^<!--\s*(no-run|slow):\s*(.*?)\s*-->\n)?^```python\n(.*?)^```\s*$", re.S | re.M)


def snippets(page: Path) -> List[Tuple[str, str, str, str]]:
    """``(id, mark, reason, code)`` of every ```` ```python ```` block of ``page``: the mark is ``""``
    (runs in the everyday tier), ``slow`` (the slow tier) or ``no-run`` (listed with its reason), from an
    HTML comment ``<!-- no-run: why -->`` or ``<!-- slow: why -->`` on the line before the fence."""
    text = page.read_text(encoding="utf-8")
    name = page.relative_to(ROOT) if ROOT in page.parents else page.name
    found = []
    for match in SNIPPET.finditer(text):
        line = text.count("\n", 0, match.start(3))
        found.append((f"{name}:{line}", match.group(1) or "", match.group(2) or "", match.group(3)))
    return found


ALL_SNIPPETS = [snippet for page in SNIPPET_PAGES for snippet in snippets(page)]


def run_snippet(code: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Run ``code`` as a script in ``folder`` (what it writes stays there) and return its names."""
    monkeypatch.chdir(folder)
    namespace: dict = {"__name__": "__snippet__"}
    exec(compile(code, "snippet", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("snippet", [s for s in ALL_SNIPPETS if not s[1]], ids=lambda s: s[0])
def test_every_unmarked_snippet_runs(snippet, tmp_path, monkeypatch):
    run_snippet(snippet[3], tmp_path, monkeypatch)


@pytest.mark.slow  # the snippets that train
@pytest.mark.parametrize(
    "snippet", [s for s in ALL_SNIPPETS if s[1] == "slow" and not s[2].startswith("checked by")], ids=lambda s: s[0]
)
def test_every_slow_snippet_runs(snippet, tmp_path, monkeypatch):
    run_snippet(snippet[3], tmp_path, monkeypatch)


NO_RUN_PER_PAGE = {
    "docs/getting-started.md": 1,  # a real model and the user's own tasks.jsonl
    "docs/checkpoints.md": 1,  # reads the ckpt/ folder of a run (tests/checkpoints/test_metadata.py)
    "docs/using-the-team.md": 2,  # loads the team/ folder an export wrote (tests/test_export.py)
    "docs/coming-from-comlrl.md": 1,  # the seed's example at its full size (benchmarks/seed_example.py; the suite: test_preference.py)
}
"""How many snippets of each page no test runs: a new one is a choice, made here."""


def test_the_snippets_that_do_not_run_say_why():
    marked = {snippet[0]: snippet[2] for snippet in ALL_SNIPPETS if snippet[1] == "no-run"}
    assert all(len(reason) > 10 for reason in marked.values()), marked
    per_page: dict = {}
    for name in marked:
        page = name.rpartition(":")[0]
        per_page[page] = per_page.get(page, 0) + 1
    assert per_page == NO_RUN_PER_PAGE, f"snippets that no test runs: {marked}"
    assert len(ALL_SNIPPETS) >= 12  # the pattern finds the pages' snippets


PYTHON_FENCE = re.compile(r"^[ \t]*(?:```|~~~)[ \t]*\{?\.?(?:py|python|python3|pycon)\b", re.M)


@pytest.mark.parametrize("page", SNIPPET_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_fence_is_a_snippet_the_finder_reads(page):
    """A ```` ```py ````, an indented or a titled Python fence would escape the snippet tests unseen."""
    text = page.read_text(encoding="utf-8")
    assert len(PYTHON_FENCE.findall(text)) == len(snippets(page)), "write Python fences as ```python, unindented"


def test_the_snippet_finder_reads_marks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("a\n\n```python\nx = 1\n```\n\n<!-- no-run: needs a GPU -->\n```python\ny\n```\n```bash\nz\n```\n")
    assert [(mark, reason, code) for _, mark, reason, code in snippets(page)] == [
        ("", "", "x = 1\n"),
        ("no-run", "needs a GPU", "y\n"),
    ]


@pytest.mark.slow  # trains the embedded team for two epochs
def test_the_readme_own_task_example_learns(tmp_path, monkeypatch):
    """The README's own-task example, as written there: its reward tells the candidates apart (pairs
    with a winner above its loser) and its training moves the team toward the winners (the joint
    margin on its own pairs rises)."""
    import copy

    import torch

    (snippet,) = [s for s in ALL_SNIPPETS if s[2] == "checked by test_the_readme_own_task_example_learns"]
    code = snippet[3]
    setup, fit = code[: code.index("Trainer(max_epochs")], code[code.index("Trainer(max_epochs") :]
    names = run_snippet(setup, tmp_path, monkeypatch)
    module, data = names["module"], names["data"]
    before = copy.deepcopy(module.team.state_dict())
    exec(compile(fit, "snippet", "exec"), names)
    pairs = data.pairs
    assert len(pairs) >= 8 and all(pair.winner_reward > pair.loser_reward for pair in pairs)

    def joint_margin() -> float:
        with torch.no_grad():
            return float(module.margins(module.collate_pairs(pairs)).sum(dim=-1).mean())

    after = joint_margin()
    module.team.load_state_dict(before)
    assert after > joint_margin() + 1.0, "the example's training did not move the team toward its winners"


# ---------------------------------------------------------------------------------------------
# One source for each number: quoted once, or tested against its source

NUMBER = re.compile(r"(?<![\d.])-?\d+\.\d{4}(?!\d)")
SEEDED_ROW = re.compile(
    r"^\|\s*`(?:configs/)?((?:overlays/)?[\w.]+\.yaml)`[^|]*" + r"\|\s*(-?\d\.\d{4}) → (-?\d\.\d{4})\s*" * 3 + r"\|",
    re.M,
)
"""A table row quoting a config's evaluation reward before → after training for seeds 0, 1 and 2."""


def test_the_readme_and_getting_started_quote_each_measured_number_once():
    """A number both pages (or one page twice) typed drifts apart when one is re-measured."""
    seen: dict = {}
    for page in (README, DOCS / "getting-started.md"):
        for number in NUMBER.findall(page.read_text(encoding="utf-8")):
            seen.setdefault(number, []).append(page.name)
    assert not {number: pages for number, pages in seen.items() if len(pages) > 1}


def default_results() -> dict:
    """The embedded defaults' results as getting-started quotes them (the source), by config:
    ``(before, after)`` for seeds 0, 1 and 2, flattened (the iterative one with one thread)."""
    text = " ".join((DOCS / "getting-started.md").read_text(encoding="utf-8").split())
    value = r"(-?\d\.\d{4})"

    def find(pattern: str) -> tuple:
        match = re.search(pattern, text)
        assert match, pattern
        return match.groups()

    (before,) = find(r"before training, 0 updates\): eval/turn_1/reward_mean = " + value)
    (after,) = find(r"after training, 320 updates\): eval/turn_1/reward_mean = " + value)
    seeds = find(rf"same run went from {value} to {value} and from {value} to {value}\.")
    (iterative,) = find(rf"and to {value} with one \(`OMP_NUM_THREADS=1`")
    iterative_seeds = find(rf"from the first evaluations above to {value} and {value}\.")
    return {
        "madpo.yaml": (before, after, *seeds),
        "madpo_iter.yaml": (before, iterative, seeds[0], iterative_seeds[0], seeds[2], iterative_seeds[1]),
    }


def test_every_page_quoting_a_default_configs_results_quotes_the_same_numbers():
    """Tables elsewhere (centralized, MARLHF) repeat the decentralized defaults' results beside their
    own: each config's row is the same on every page, and the defaults' rows are getting-started's."""
    rows: dict = {}
    for page in pages():
        for name, *values in SEEDED_ROW.findall(page.read_text(encoding="utf-8")):
            rows.setdefault(name, set()).add(tuple(values))
    assert len(rows) >= 4, rows  # the pattern finds the tables
    assert {name: quoted for name, quoted in rows.items() if len(quoted) > 1} == {}
    for name, values in default_results().items():
        assert rows.get(name, {values}) == {values}, name
    parts = " ".join((DOCS / "parts.md").read_text(encoding="utf-8").split())
    source = default_results()["madpo_iter.yaml"]
    assert f"{source[0]} to {source[1]}" in parts  # parts.md's generate() comparison: the one-thread run
