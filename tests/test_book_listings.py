"""`blockc listing` against the chapter's own listings, compiled and run.

At test time each listing's source is cut from the chapter file (from its
``/* 12x_Name.c */`` marker to the closing brace of ``main``), compiled with gcc
and run; its stdout must equal ``blockc listing`` byte for byte, for several
seeds and both generators. glibc: the listing as it is (Linux's rand()). msvc: the
token RAND_MAX becomes 32767 and rand/srand are renamed (-D) to a shim written
here, the MSVC runtime's LCG. The seed comes from the environment so that one
build serves every seed: the listing's ``srand(42)`` reads it.

Nothing of the listings is stored in the repository.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from blockc import listings
from blockc.cli import main

ROOT = Path(__file__).resolve().parent.parent
SEED_DIRS = [ROOT.parent / "shared" / "seeds", Path("/work/shared/seeds")]
SEEDS = [0, 1, 42, 2**31 + 5, 2**32 - 1]
RANDOM = ["126_Ffn", "128_Block", "129_Stack"]  # the listings that call rand()

MSVC_SHIM = r"""
/* The Microsoft C runtime's rand(): state = state * 214013 + 2531011 (mod 2^32). */
static unsigned int state = 1;
void msvc_srand(unsigned int seed) { state = seed; }
int msvc_rand(void)
{
    state = state * 214013u + 2531011u;
    return (int)((state >> 16) & 0x7fffu);
}
"""


def chapter_text():
    for d in SEED_DIRS:
        if d.is_dir():
            for f in sorted(d.glob("*.txt")):
                text = f.read_text(encoding="utf-8")
                if "/* 126_Ffn.c */" in text:
                    return text
    return None


def extract(text, name):
    """The listing's source: its marker to the closing brace of main."""
    start = text.index(f"/* {name}.c */")
    m = re.compile(r"\bint\s+main\s*\(\s*void\s*\)\s*\{").search(text, start)
    depth, i, in_str = 0, m.end() - 1, None
    while True:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 1
            elif c == in_str:
                in_str = None
        elif c in "\"'":
            in_str = c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i + 1] + "\n"
        i += 1


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    text = chapter_text()
    if text is None:
        pytest.skip("chapter 24 (000_*.txt with the listings) not found in "
                    + " or ".join(map(str, SEED_DIRS)))
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not found")
    tmp = tmp_path_factory.mktemp("listings")
    (tmp / "msvc_rand.c").write_text(MSVC_SHIM)
    cache = {}

    def get(name, rand):
        if (name, rand) in cache:
            return cache[(name, rand)]
        src = extract(text, name)
        assert src.count("srand(42)") == (1 if name in RANDOM else 0)
        src = src.replace("srand(42)", 'srand((unsigned)strtoul(getenv("BLOCKC_SEED"), 0, 10))')
        flags = ["-O2", "-ffp-contract=off"]  # the listings' arithmetic, unfused, as written
        extra = []
        if rand == "msvc":
            src = re.sub(r"\bRAND_MAX\b", "32767", src)
            flags += ["-Drand=msvc_rand", "-Dsrand=msvc_srand"]
            extra = [str(tmp / "msvc_rand.c")]
        c = tmp / f"{name}_{rand}.c"
        c.write_text(src)
        exe = tmp / f"{name}_{rand}"
        r = subprocess.run([gcc, *flags, str(c), *extra, "-o", str(exe), "-lm"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        cache[(name, rand)] = exe
        return exe

    return get


def run(exe, seed):
    env = dict(os.environ, BLOCKC_SEED=str(seed))
    return subprocess.run([str(exe)], capture_output=True, env=env, check=True).stdout


@pytest.mark.slow
@pytest.mark.parametrize("rand", ["msvc", "glibc"])
@pytest.mark.parametrize("name", listings.LISTINGS)
def test_listing_matches_compiled_listing(build, name, rand):
    exe = build(name, rand)
    for seed in SEEDS if name in RANDOM else [42]:
        want = run(exe, seed)
        assert listings.render(name, seed, rand).encode() == want, (name, rand, seed)


@pytest.mark.slow
def test_book_figures_come_from_msvc_not_glibc(build):
    # the rand() finding: the same listing prints the book's numbers only with MSVC's rand()
    book_line = b"  Output: [+0.000, +0.006, -0.006, +0.004, -0.007, -0.002]"
    assert book_line in run(build("126_Ffn", "msvc"), 42)
    assert book_line not in run(build("126_Ffn", "glibc"), 42)
    assert b"after block 4   avg norm = 1.4256" in run(build("129_Stack", "msvc"), 42)
    assert b"after block 4   avg norm = 1.4008" in run(build("129_Stack", "glibc"), 42)


@pytest.mark.slow
def test_cli_prints_the_compiled_listing(build, capsys):
    for argv, name, rand, seed in [(["listing", "128"], "128_Block", "msvc", 42),
                                   (["listing", "129_Stack", "--rand", "glibc", "--seed", "7"],
                                    "129_Stack", "glibc", 7),
                                   (["listing", "126_Ffn", "--seed", str(2**32 - 1)],
                                    "126_Ffn", "msvc", 2**32 - 1)]:
        assert main(argv) == 0
        assert capsys.readouterr().out.encode() == run(build(name, rand), seed)


@pytest.mark.slow
def test_python_dash_m_blockc():
    r = subprocess.run([sys.executable, "-m", "blockc", "listing", "130"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout == listings.render("130_Real_Params")
    assert "  DeepSeek-V3       7168  18432  61   469.8M    28.7B   671.0B\n" in r.stdout


@pytest.mark.parametrize("rand", ["msvc", "glibc"])
def test_cli_figures(rand, capsys):
    assert main(["figures", "--rand", rand]) == 0
    out = capsys.readouterr().out
    assert ("12 of 12 figures agree." if rand == "msvc" else "11 of 11 figures agree") in out
    row = [l for l in out.splitlines() if l.startswith("129_Stack")][0]
    want = {"msvc": "1.3809, 1.3990, 1.4163, 1.4205, 1.4256",
            "glibc": "1.3809, 1.3935, 1.4311, 1.4277, 1.4008"}[rand]
    assert row.count(want) == 2 and row.endswith("yes")


@pytest.mark.parametrize("argv, message", [
    (["listing", "131"], "unknown listing '131'"),
    (["listing", "Ffn"], "unknown listing 'Ffn'"),
    (["listing", "126", "--seed", "-1"], "must be in [0, 2**32)"),
    (["listing", "126", "--seed", str(2**32)], "must be in [0, 2**32)"),
    (["listing", "126", "--seed", "abc"], "not an integer"),
    (["listing", "126", "--rand", "posix"], "invalid choice: 'posix'"),
    (["listing", "126", "--bogus"], "unrecognized arguments: --bogus"),
    (["listing"], "required: NAME"),
    (["figures", "--rand", "bsd"], "invalid choice: 'bsd'"),
    (["nosuch"], "invalid choice: 'nosuch'"),
])
def test_cli_errors_one_line_exit_2(argv, message):
    r = subprocess.run([sys.executable, "-m", "blockc", *argv], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_listing_names():
    assert listings.listing_name("126") == "126_Ffn"
    assert listings.listing_name("130_real_params") == "130_Real_Params"
    assert listings.listing_name("127_Residual.c") == "127_Residual"
    with pytest.raises(ValueError, match="choose one of 126_Ffn"):
        listings.listing_name("12")


def test_figures_disagreement_is_reported(monkeypatch, capsys):
    import blockc.cli.book as cli_book
    good = listings.figures("msvc")
    bad = [listings.Figure("129_Stack", "avg norms", "1.3809", "1.3810")] + good[1:]
    monkeypatch.setattr(cli_book, "figures", lambda rand: bad)
    assert main(["figures"]) == 1
    out = capsys.readouterr().out
    assert "11 of 12 figures agree." in out
    assert [l for l in out.splitlines() if l.startswith("129_Stack")][0].endswith("NO")
