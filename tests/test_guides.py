"""The guides in docs/guides/ run as written. Each example block is saved under the name its first
line gives and run in a subprocess against the installed package; what it prints must contain the
"Output" block the guide shows right after it, so a guide cannot drift from the code.

An Output line must appear in the printed lines, in the guide's order. A line ``...`` skips any
number of printed lines; ``...`` inside a line stands for any text (a port, a token, a duration).
A shell block whose first line is ``# Not run by the tests`` is only read, never run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ROOT / "docs" / "guides"
REFERENCE = ROOT / "docs" / "reference.md"
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
NOT_RUN = "# Not run by the tests"
RUNNABLE = ("python", "bash")
TIMEOUT_S = 45


@dataclass(frozen=True)
class Example:
    guide: Path
    line: int
    language: str
    code: str
    output: str | None

    @property
    def id(self) -> str:
        return f"{self.guide.stem}:{self.line}"

    @property
    def filename(self) -> str:
        first = self.code.splitlines()[0] if self.code else ""
        name = re.fullmatch(r"#\s*(\S+\.(?:py|sh))", first.strip())
        return name.group(1) if name else ("example.py" if self.language == "python" else "example.sh")

    @property
    def runs(self) -> bool:
        return not self.code.startswith(NOT_RUN)


def guides() -> list[Path]:
    return sorted(GUIDES.glob("*.md"))


def examples_of(guide: Path) -> list[Example]:
    """Every python or bash block of a guide, with the Output block that follows it (if any)."""
    text = guide.read_text(encoding="utf-8")
    fences = list(FENCE.finditer(text))
    found = []
    for index, fence in enumerate(fences):
        language = fence.group(1)
        if language not in RUNNABLE:
            continue
        output = None
        if index + 1 < len(fences):
            after = fences[index + 1]
            between = text[fence.end() : after.start()]
            if after.group(1) == "text" and "Output" in between and "```" not in between:
                output = after.group(2)
        line = text.count("\n", 0, fence.start()) + 1
        found.append(Example(guide, line, language, fence.group(2), output))
    return found


EXAMPLES = [example for guide in guides() for example in examples_of(guide)]


def _line_pattern(shown: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in shown.split("...")))


def missing_from(printed: str, shown: str) -> str | None:
    """The first line of ``shown`` (an Output block) that ``printed`` lacks, in order; None if none."""
    lines = [line.rstrip() for line in printed.splitlines()]
    at = 0
    for wanted in (line.rstrip() for line in shown.splitlines()):
        if not wanted.strip() or wanted.strip() == "...":
            continue
        pattern = _line_pattern(wanted)
        while at < len(lines) and not pattern.fullmatch(lines[at]):
            at += 1
        if at == len(lines):
            return wanted
        at += 1
    return None


def run_example(example: Example, workdir: Path) -> tuple[int, str, str]:
    """Run one example in ``workdir``; its exit status, stdout and stderr. A shell example's
    background processes (a server) are in its process group, which is killed if it overruns."""
    script = workdir / example.filename
    script.write_text(example.code, encoding="utf-8")
    scenarios = workdir / "docs" / "scenarios"  # shell examples name docs/... as from the repository
    scenarios.mkdir(parents=True)
    for scenario in (ROOT / "docs" / "scenarios").glob("*.toml"):
        shutil.copy(scenario, scenarios)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("RUN_SUPERVISOR_TOKEN", None)  # so serve generates one and prints it, as the guide reads it
    if example.language == "bash":
        command = ["bash", str(script)]
    elif script.name.startswith("test_"):
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(script)]
    else:
        command = [sys.executable, str(script)]
    with subprocess.Popen(
        command,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            return -1, stdout, f"{stderr}\n(killed after {TIMEOUT_S} s)"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # whatever it left running in the background
        return process.returncode, stdout, stderr


def test_there_is_a_guide_per_task_and_the_index_links_each() -> None:
    index = (GUIDES / "README.md").read_text(encoding="utf-8")
    names = {guide.name for guide in guides()} - {"README.md"}
    expected = {
        "sync-host.md",
        "asyncio-host.md",
        "testing-a-host.md",
        "surviving-a-crash.md",
        "reading-a-timeline.md",
        "over-http.md",
        "over-stdio.md",
    }
    assert expected <= names
    for name in sorted(names):
        assert f"]({name})" in index, f"docs/guides/README.md does not link {name}"


@pytest.mark.parametrize("guide", [g for g in guides() if g.name != "README.md"], ids=lambda g: g.stem)
def test_every_guide_has_one_runnable_example_and_every_python_block_shows_its_output(guide: Path) -> None:
    examples = examples_of(guide)
    assert any(e.runs for e in examples), f"{guide.name} has no example the tests run"
    for example in examples:
        if example.language == "python":
            assert example.runs, f"{example.id}: a python block is always run"
        if example.runs:
            assert example.output, f"{example.id}: no ```text block after the words 'Output' follows it"


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.runs], ids=lambda e: e.id)
def test_each_example_prints_the_output_its_guide_shows(example: Example, tmp_path: Path) -> None:
    if example.language == "bash" and shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    for tool in ("curl", "jq"):
        if example.language == "bash" and f"{tool} " in example.code and shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    status, stdout, stderr = run_example(example, tmp_path)
    shown = f"\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}"
    assert status == 0, f"{example.id} exited {status}{shown}"
    assert example.output is not None
    missing = missing_from(stdout, example.output)
    assert missing is None, f"{example.id}: the guide shows {missing!r}, which it did not print{shown}"


def test_an_output_block_matches_in_order_with_ellipses() -> None:
    printed = "start\nserving on http://127.0.0.1:4711\nnoise\n3 passed in 0.41s\n"
    assert missing_from(printed, "start\n...\n3 passed in ...s") is None
    assert missing_from(printed, "serving on http://127.0.0.1:...") is None
    assert missing_from(printed, "3 passed in ...s\nstart") == "start"
    assert missing_from(printed, "4 passed") == "4 passed"


def _anchors(page: Path) -> set[str]:
    """GitHub's anchor of every heading of a page."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


@pytest.mark.parametrize("guide", guides(), ids=lambda g: g.stem)
def test_every_link_of_a_guide_reaches_a_file_and_a_heading(guide: Path) -> None:
    text = FENCE.sub("", guide.read_text(encoding="utf-8"))
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        page = (guide.parent / path).resolve() if path else guide
        assert page.exists(), f"{guide.name} links to {target}: no such file"
        if anchor and page.suffix == ".md":
            assert anchor in _anchors(page), f"{guide.name} links to {target}: no such heading"


def _prose(text: str) -> list[str]:
    """A page's paragraphs of prose (a list item is one), without code, tables, headings or pictures."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", FENCE.sub("", text)):
        current: list[str] = []
        for line in block.splitlines():
            if not line.strip() or line.startswith(("#", "|", "![")):
                continue
            if re.match(r"\s*(?:[-*]|\d+\.) ", line) and current:
                paragraphs.append(" ".join(current))
                current = []
            current.append(line.strip())
        if current:
            paragraphs.append(" ".join(current))
    return [re.sub(r"`[^`]*`", "CODE", paragraph) for paragraph in paragraphs]


def _words(text: str) -> int:
    return len(re.findall(r"[\w'./#:-]+", text))


@pytest.mark.parametrize("guide", guides(), ids=lambda g: g.stem)
def test_a_guide_reads_in_short_sentences_and_short_paragraphs(guide: Path) -> None:
    paragraphs = _prose(guide.read_text(encoding="utf-8"))
    sentences = [s for p in paragraphs for s in re.split(r"(?<=[.!?])\s+(?=[A-Z*(\[])", p) if _words(s)]
    per_sentence = sum(map(_words, sentences)) / len(sentences)
    per_paragraph = sum(map(_words, paragraphs)) / len(paragraphs)
    assert per_sentence < 20, f"{guide.name}: {per_sentence:.1f} words a sentence on average"
    assert per_paragraph < 40, f"{guide.name}: {per_paragraph:.1f} words a paragraph on average"
