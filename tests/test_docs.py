"""The documentation stays true: every relative link and every repository path that README.md, CHANGELOG.md, docs/
and examples/ name exists, CITATION.cff names this release, and the README's library snippet runs."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml
from support import launch_env

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
PAGES += sorted((ROOT / "examples").rglob("*.md"))

# Links and paths known to be broken (none: a page that breaks one fails the test).
KNOWN_BROKEN: set[str] = set()

# Where a path named in prose may live: the repository's folders, and the package's (`pods_rl/...`, `run/...`).
PACKAGE = ROOT / "src" / "pods_rl"
ROOTS = {name: ROOT for name in ("src", "configs", "benchmarks", "docs", "examples", "tests", "constraints", ".ci")}
ROOTS |= {"pods_rl": ROOT / "src"} | {p.name: PACKAGE for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
PATH = re.compile(r"(?<![\w./\\-])((?:" + "|".join(map(re.escape, ROOTS)) + r")/[\w.*/-]*)")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
HTML = re.compile(r"<(?:a|img|source)\b[^>]*?\b(?:href|src)=\"([^\"]+)\"", re.IGNORECASE)
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans (links there are not links)."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def anchors(text: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation but hyphens and underscores dropped, spaces to hyphens, a
    repeated heading numbered (-1, -2, ...); plus explicit `<a id=...>` / `name=` anchors."""
    ids: set[str] = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    counts: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", FENCE.sub("", text), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", re.sub(r"<[^>]+>", "", heading).lower()).replace(" ", "-")
        ids.add(slug if slug not in counts else f"{slug}-{counts[slug]}")
        counts[slug] = counts.get(slug, 0) + 1
    return ids


def link_problems(page: Path, text: str) -> list[str]:
    """Links, images and HTML `href`/`src` outside code: each target must exist relative to the page (as GitHub
    resolves it), and a `#fragment` into a Markdown page must be one of its headings."""
    problems = []
    outside_code = prose(text)
    for target in [*LINK.findall(outside_code), *REFERENCE.findall(outside_code), *HTML.findall(outside_code)]:
        if re.match(r"[a-zA-Z][a-zA-Z+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto: ...
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if path and not linked.exists():
            problems.append(f"link {target}")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked.read_text() if path else text):
            problems.append(f"link {target} (no such heading)")
    return problems


def path_problems(text: str) -> list[str]:
    """Repository paths named anywhere on a page (prose, code spans, code blocks); `*` globs must match a file,
    `file.py::name` must define `name`; placeholders (`<arm>`, `{x}`, `$X`) are skipped."""
    problems = []
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".")
        following = text[match.end() : match.end() + 2]
        if following[:1] in ("<", "{", "$") or following == "..":
            continue
        base = ROOTS[path.split("/")[0]]
        found = sorted(base.glob(path)) if "*" in path else [base / path] if (base / path).exists() else []
        if not found:
            problems.append(f"path {path}")
        elif following.startswith("::"):
            name = re.match(r"::(\w+)", text[match.end() :])
            if name and not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name[1]}\b", found[0].read_text(), re.M):
                problems.append(f"path {path}::{name[1]}")
    return problems


def test_every_link_and_path_exists():
    problems = [
        f"{page.relative_to(ROOT)}: {problem}"
        for page in PAGES
        if page.exists()
        for problem in [*link_problems(page, page.read_text()), *path_problems(page.read_text())]
    ]
    assert sorted(set(problems) - KNOWN_BROKEN) == []
    assert sorted(KNOWN_BROKEN - set(problems)) == [], "fixed: remove from KNOWN_BROKEN"


def test_the_checks_find_what_is_broken():
    """The checkers themselves, on a page with one mistake of each kind, and on the same page mended."""
    page = ROOT / "docs" / "page.md"
    fine = [
        "# A heading",
        "## A heading",
        "[here](#a-heading), [the second](#a-heading-1)",
        "[up](../README.md#pods-rl), [a folder](../configs/accelerate)",
        "[web](https://example.com/x.md), [mail](mailto:a@b.c)",
        "`configs/accelerate/*.yaml`, `compare/statistics.py`, `pods_rl/trainer/cpu_fsdp.py`, docs/reliability.md.",
        "`tests/run/test_train.py::test_train_writes_every_output`",
        "`benchmarks/results/<name>`, `runs/DIR/final`, https://github.com/o/r/blob/main/configs/x.yaml",
        "```python\n[not a link](nowhere.md)\n```",
    ]
    broken = [
        "[gone](missing.md)",
        "[bad anchor](#no-such-heading)",
        '![picture](nothing.png) <img src="none.png">',
        "[wrong level](README.md)",
        "see `configs/no-such.yaml`",
        "run python benchmarks/nothing.py",
        "`tests/run/test_train.py::test_no_such_test`",
        "`configs/no-such-*.yaml`",
    ]
    text = "\n\n".join(fine)
    assert link_problems(page, text) == [] and path_problems(text) == []
    text = "\n\n".join([*fine, *broken])
    assert link_problems(page, text) == [
        "link missing.md",
        "link #no-such-heading (no such heading)",
        "link nothing.png",
        "link README.md",
        "link none.png",
    ]
    assert path_problems(text) == [
        "path configs/no-such.yaml",
        "path benchmarks/nothing.py",
        "path tests/run/test_train.py::test_no_such_test",
        "path configs/no-such-*.yaml",
    ]


def test_citation_names_this_release():
    """CITATION.cff: Citation File Format 1.2.0's required keys, pyproject's name, version and license, and the PODS
    paper among its references."""
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    pyproject = (ROOT / "pyproject.toml").read_text()
    project = dict(re.findall(r'^(name|version) = "([^"]+)"', pyproject, re.MULTILINE))
    assert {"cff-version", "message", "title", "authors"} <= citation.keys() and citation["cff-version"] == "1.2.0"
    assert all("name" in author or "family-names" in author for author in citation["authors"])
    assert (citation["title"], citation["version"]) == (project["name"], project["version"])
    assert citation["license"] == re.search(r'^license = \{ text = "([^"]+)" \}', pyproject, re.MULTILINE)[1]
    paper = citation["references"][0]
    assert (paper["type"], paper["doi"]) == ("article", "10.48550/arXiv.2504.13818")
    assert [author["family-names"] for author in paper["authors"]] == ["Xu", "Savani", "Fang", "Kolter"]


# The README's first ```python block that uses PODSTrainer must run as written, with these stand-ins only: any model
# given by name is the tiny model; the hub tasks (gsm8k, math) read the packaged test files; PODSConfig gets SMALL on
# top of the snippet's settings. It must construct one PODSTrainer and train it.
PRELUDE = """
import sys
import pods_rl, pods_rl.tasks, pods_rl.trainer
from pods_rl.versions import CHECKPOINTING_FIELD

TINY, FIXTURES, TRAINERS = sys.argv[1], sys.argv[2], []
SMALL = dict(max_steps=2, max_completion_length=16, bf16=False, use_cpu=True, use_vllm=False, report_to="none",
             save_strategy="no", logging_steps=1, dataloader_num_workers=0, **{CHECKPOINTING_FIELD: False})
HUB_FILES = {
    "gsm8k": {"train": f"{FIXTURES}/gsm8k_train.jsonl", "test": f"{FIXTURES}/gsm8k_test.jsonl"},
    "math": {"train": f"{FIXTURES}/math_train.jsonl", "test": f"{FIXTURES}/math500_test.jsonl"},
}
real_config, real_trainer, real_load_task = pods_rl.PODSConfig, pods_rl.PODSTrainer, pods_rl.tasks.load_task

def PODSConfig(*args, **kwargs):
    return real_config(*args, **{**kwargs, **SMALL})

def PODSTrainer(*args, **kwargs):
    if args:
        args = (TINY if isinstance(args[0], str) else args[0], *args[1:])
    elif isinstance(kwargs.get("model"), str):
        kwargs["model"] = TINY
    TRAINERS.append(real_trainer(*args, **kwargs))
    return TRAINERS[-1]

def load_task(name="arithmetic", **options):
    if name in HUB_FILES and "data_files" not in options:
        options["data_files"] = HUB_FILES[name]
    return real_load_task(name, **options)

for module in (pods_rl, pods_rl.trainer):
    module.PODSConfig, module.PODSTrainer = PODSConfig, PODSTrainer
pods_rl.tasks.load_task = load_task
"""
EPILOGUE = """
import json
print("trained steps:", json.dumps([trainer.state.global_step for trainer in TRAINERS]))
"""


def readme_snippet() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.MULTILINE | re.DOTALL)
    snippets = [block for block in blocks if "PODSTrainer" in block]
    assert snippets, "README.md has no ```python block that uses PODSTrainer"
    return snippets[0]


def test_readme_snippet_trains_the_tiny_model(tiny_model_dir, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(PRELUDE + readme_snippet() + EPILOGUE)
    fixtures = Path(__file__).parent / "fixtures"
    command = [sys.executable, str(script), str(tiny_model_dir), str(fixtures)]
    env = {**launch_env(), "HF_HUB_OFFLINE": "1"}  # nothing may come from the hub
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1].removeprefix("trained steps: ")) == [2]


def load_results_at_a_glance():
    """benchmarks/results_at_a_glance.py as a module (benchmarks/ is not a package, nor on the path)."""
    spec = importlib.util.spec_from_file_location("results_at_a_glance", ROOT / "benchmarks" / "results_at_a_glance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_results_at_a_glance_are_the_records():
    """The README's results table (PODS against GRPO) and the benchmarks index's (every arm) are what
    `benchmarks/results_at_a_glance.py` reads from the shipped comparison.json records, character for character."""
    results_at_a_glance = load_results_at_a_glance()
    readme = (ROOT / "README.md").read_text()
    index = (ROOT / "docs" / "benchmarks" / "README.md").read_text()
    pods_rows = results_at_a_glance.rows(arms=["pods"])
    assert [row["arm"].split()[0] for row in pods_rows] == ["pods"] * len(results_at_a_glance.COMPARISONS)
    assert results_at_a_glance.markdown(pods_rows, "docs/benchmarks/") in readme
    every_row = results_at_a_glance.rows()
    # 4 arms against the baseline in four comparisons, 6 and 5 in the allocation ones, 2 in each finished map level
    assert len(every_row) == 33
    assert results_at_a_glance.markdown(every_row, "") in index
    primary = {}
    for row in every_row:  # a step-clocked comparison does not test its time to target, its primary is steps
        if results_at_a_glance.untested_time(row):
            assert row["verdicts"]["time_to_target"] == "not tested" and row["roles"]["steps_to_target"] == "primary"
        key = next(measure for measure, role in row["roles"].items() if role == "primary")
        primary[row["setup"], row["arm"].split()[0]] = row["verdicts"][key]
    # Four primary verdicts of the 33 are resolved: screening on the tiny model is slower than GRPO; at the map's
    # 10% base pass rate PODS and dynamic sampling reach the target in fewer steps, at 25% PODS does; at 53% neither
    # meets its sequential boundary.
    assert {key: word for key, word in primary.items() if word != "not resolved"} == {
        ("tiny, allocation", "pods-screen"): "slower",
        ("tiny map, base pass rate 10%", "pods"): "faster",
        ("tiny map, base pass rate 10%", "grpo-ds"): "faster",
        ("tiny map, base pass rate 25%", "pods"): "faster",
    }


def test_results_at_a_glance_reads_a_comparison_clocked_by_steps():
    """A step-clocked comparison's time to target is reported untested: no p-value, and "not tested" is not a
    verdict of the row."""
    results_at_a_glance = load_results_at_a_glance()
    row = {
        "page": "page.md",
        "setup": "setup",
        "cpu": "cpu",
        "arm": "pods 16/4",
        "baseline": "grpo 4/4",
        **{key: {"estimate": 1.5, "low": 0.5, "high": 3.0} for key in ("time", "steps")},
        "window": {"estimate": 0.02, "low": -0.01, "high": 0.05},
        "adjusted": {"time_to_target": None, "steps_to_target": 0.5, "mean_accuracy": None},
        "verdicts": {
            "time_to_target": "not tested",
            "steps_to_target": "not resolved",
            "mean_accuracy": "higher",
        },
        "roles": {"time_to_target": "not tested", "steps_to_target": "primary", "mean_accuracy": "secondary"},
    }
    line = results_at_a_glance.markdown([row]).splitlines()[-1]
    assert line.endswith(
        "| not tested | 1.50x (0.50-3.00) | +2.0 (-1.0 to +5.0) | steps: not resolved (0.500) | window higher |"
    )
    # A sequential design's verdict has no Holm p-value: the row says at how many seeds it met its boundary, if any.
    sequential = {**row, "adjusted": {key: None for key in row["adjusted"]}, "resolved_at_look": None}
    assert "| steps: not resolved (sequential: at no look) |" in results_at_a_glance.markdown([sequential])
    sequential |= {"verdicts": {**row["verdicts"], "steps_to_target": "faster"}, "resolved_at_look": 16}
    assert "| steps: faster (sequential: at 16 seeds) |" in results_at_a_glance.markdown([sequential])
    # An arm that never reached the target has no estimate, and its interval no upper end.
    row["steps"] = {"estimate": None, "low": 0.0, "high": None}
    assert "| not tested | - (0.00-∞) |" in results_at_a_glance.markdown([row])
