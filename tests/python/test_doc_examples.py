"""Every code block of README.md and docs/*.md runs as a user would run it (issue 45, item 16): Python blocks
with /usr/bin/python3 and this build's module, C++ blocks compiled against the installed package (pkg-config,
as docs/using-weft.md says) and run. A block that is not a program (shell commands, output, a file format, a
fragment) says so right before it, `<!-- not run: why -->`, and is counted; an unmarked block of another
language fails. Printed output is compared where the doc shows it: a block marked `<!-- output of the block
above -->` is the previous block's whole output, and a print line's comment that reads like output (`# [1. 1.
1.]`, `// [28. 28. ...]`, on the line or the line after) must appear in the output, in order. A C++ block
without `main` is a user's main body: its `#include` and `using` lines go on top, the rest in `int main()`.
(A C++ block compiles in ~1.5 s here, so the whole file stays in the fast tier.)
"""
import os
import re
import subprocess

import pytest

from conftest import PYTHON, ROOT, build_dir, cmake

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python": "python", "cpp": "cpp", "c++": "cpp"}
NOT_RUN = re.compile(r"<!-- not run: (.+?) -->")
OUTPUT_OF_ABOVE = "<!-- output of the block above -->"


class Block:
    def __init__(self, path, line, lang, code, marker):
        self.path, self.line, self.lang, self.code, self.marker = path, line, lang, code, marker

    def __repr__(self):
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks():
    """Every fenced block of the docs, with the HTML comment right before it (or "")."""
    found = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = re.match(r"^\s*```(\S*)\s*$", lines[i])
            if not m:
                i += 1
                continue
            j = i + 1
            while not re.match(r"^\s*```\s*$", lines[j]):
                j += 1
            k = i - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            marker = lines[k].strip() if k >= 0 and lines[k].strip().startswith("<!--") else ""
            found.append(Block(path, i + 1, m.group(1), "\n".join(lines[i + 1:j]) + "\n", marker))
            i = j + 1
    return found


BLOCKS = blocks()


def output_like(text):
    return bool(re.match(r"""[\[\{\(\-0-9'"]""", text))


def expected_in_comments(code, comment):
    """The output a block's print lines say they print (see the module's docstring)."""
    lines = code.splitlines()
    printing = re.compile(r"\bprint\(|std::cout\b")
    out = []
    for n, line in enumerate(lines):
        if not printing.search(line):
            continue
        trailing = re.search(rf"{re.escape(comment)}\s*(.*)$", line)
        after = re.match(rf"\s*{re.escape(comment)}\s*(.*)$", lines[n + 1]) if n + 1 < len(lines) else None
        for m in (trailing, after):
            if m and output_like(m.group(1)):
                out.append(m.group(1).strip())
                break
    return out


def squeeze(text):
    return " ".join(text.split())


def check_output(block, stdout, comment):
    printed = squeeze(stdout)
    at = 0
    for want in expected_in_comments(block.code, comment):
        found = printed.find(squeeze(want), at)
        assert found >= 0, f"{block}: the doc says it prints {want!r}; it printed:\n{stdout}"
        at = found + len(squeeze(want))
    following = BLOCKS.index(block) + 1
    if following < len(BLOCKS) and BLOCKS[following].marker == OUTPUT_OF_ABOVE:
        shown = BLOCKS[following]
        assert [l.rstrip() for l in stdout.strip("\n").splitlines()] == \
            [l.rstrip() for l in shown.code.strip("\n").splitlines()], \
            f"{block} prints, where {shown} shows its output:\n{stdout}"


def test_every_block_runs_or_says_why_not():
    unmarked = [b for b in BLOCKS if b.lang not in RUNNABLE and not NOT_RUN.match(b.marker)
                and b.marker != OUTPUT_OF_ABOVE]
    assert unmarked == [], f"blocks that do not run and do not say why (<!-- not run: ... -->): {unmarked}"
    outputs = [b for b in BLOCKS if b.marker == OUTPUT_OF_ABOVE]
    for b in outputs:
        above = BLOCKS[BLOCKS.index(b) - 1]
        assert above.lang in RUNNABLE and above.path == b.path and not NOT_RUN.match(above.marker), b
    not_run = [b for b in BLOCKS if NOT_RUN.match(b.marker)]
    run = [b for b in BLOCKS if b.lang in RUNNABLE and not NOT_RUN.match(b.marker)]
    print(f"{len(BLOCKS)} blocks: {len(run)} run, {len(outputs)} outputs compared, {len(not_run)} not run")
    assert len(run) >= 10


PYTHON_BLOCKS = [b for b in BLOCKS if RUNNABLE.get(b.lang) == "python" and not NOT_RUN.match(b.marker)]
CPP_BLOCKS = [b for b in BLOCKS if RUNNABLE.get(b.lang) == "cpp" and not NOT_RUN.match(b.marker)]


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=repr)
def test_python_block(block, tmp_path):
    (tmp_path / "example.py").write_text(block.code)
    env = dict(os.environ, PYTHONPATH=str(build_dir() / "python"))
    done = subprocess.run([PYTHON, "example.py"], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, f"{block}:\n{done.stdout}{done.stderr}"
    check_output(block, done.stdout, "#")


def as_program(code):
    """A block with main as it is; else its #include / using lines, then the rest as main's body."""
    if re.search(r"\bint main\s*\(", code):
        return code
    lines = code.splitlines()
    head = [l for l in lines if l.startswith("#include") or l.startswith("using ")]
    body = [l for l in lines if l not in head]
    return "\n".join(head) + "\n\nint main() {\n" + "\n".join("  " + l for l in body) + "\n}\n"


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """This build installed into a scratch prefix, as a user installs it."""
    where = tmp_path_factory.mktemp("prefix")
    done = subprocess.run([cmake(), "--install", str(build_dir()), "--prefix", str(where)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return where


@pytest.mark.parametrize("block", CPP_BLOCKS, ids=repr)
def test_cpp_block(block, tmp_path, prefix):
    source = tmp_path / "example.cc"
    source.write_text(as_program(block.code))
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "weft"], capture_output=True, text=True, env=env,
                           check=True).stdout.split()
    compiler = os.environ.get("CXX", "c++")
    built = subprocess.run([compiler, "-std=c++20", "-O0", str(source), "-o", str(tmp_path / "example"), *flags],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, f"{block} does not compile as written:\n{source.read_text()}\n{built.stderr}"
    env["LD_LIBRARY_PATH"] = str(prefix / "lib")
    done = subprocess.run([str(tmp_path / "example")], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, f"{block}:\n{done.stdout}{done.stderr}"
    check_output(block, done.stdout, "//")
