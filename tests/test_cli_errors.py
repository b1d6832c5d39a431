"""The command line's failures (issues 6, 9 and 19): every error is one line naming the
option or file, exit status 2 for a usage error, 1 for a failure, nothing written over an
input; output paths are checked before the work starts."""
import os

import numpy as np
import pytest

from helpers import snapshot

import blockc
from blockc import safetensors as bst
from blockc.cli import main

TINY = blockc.GPTConfig(vocab=64, context=16, width=16, heads=2, layers=2)


# ---- usage errors, --version, --help, --plot ---------------------------------------------

class _exit_or_status:
    """argparse errors exit(2); errors found after parsing return 2: accept both."""
    status = None

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if typ is SystemExit:
            self.status = exc.code
            return True
        return False


@pytest.mark.parametrize("argv, match", [
    (["depth", "--blocks", "-1"], r"blockc depth: error: argument --blocks: expected an integer in \[1, 100000\], got -1"),
    (["depth", "--blocks", "x"], r"blockc depth: error: argument --blocks: expected a positive integer, got 'x'"),
    (["depth", "--norm", "batch"], r"blockc depth: error: argument --norm: invalid choice: 'batch'"),
    (["depth", "--d-model", "8", "--heads", "3"], r"blockc depth: error: n_heads must divide d_model"),
    (["gpt", "--preset", "gpt9"], r"blockc gpt: error: argument --preset: invalid choice: 'gpt9'"),
    (["gpt", "--params", "--layers", "-2"], r"blockc gpt: error: GPTConfig.layers must be in \[1, 2\*\*40\], got -2"),
    (["figures", "--rand", "posix"], r"blockc figures: error: argument --rand: invalid choice: 'posix'"),
    (["nosuch"], r"blockc: error: argument COMMAND: invalid choice: 'nosuch'"),
], ids=["blocks-neg", "blocks-str", "norm", "heads", "preset", "layers", "rand", "command"])
def test_bad_command_line(argv, match, capsys):
    from blockc.cli import main
    with _exit_or_status() as st:
        status = main(argv)
        st.status = status
    err = capsys.readouterr().err
    assert st.status == 2, err
    assert __import__("re").search(match, err), err
    assert err.count("\n") == 1  # one clear line, no traceback, no usage dump


@pytest.mark.parametrize("argv, code, match", [
    (["gpt", "--params", "--vocab", str(2**64)], 2,
     r"^blockc gpt: error: GPTConfig.vocab must be in \[1, 2\*\*40\], got 18446744073709551616$"),
    (["gpt", "--params", "--heads", "5"], 2, r"^blockc gpt: error: GPTConfig: width 768 is not divisible by heads 5$"),
    (["gpt", "--norms", "--seed", "-1"], 2, r"^blockc gpt: error: --seed must be >= 0, got -1$"),
    # 3.4 TB of parameters: refused by the allocator, not the size checks (not under ASan,
    # whose allocator logs a warning for an allocation it refuses)
    pytest.param(["gpt", "--norms", "--preset", "gpt2-xl", "--vocab", str(2**29), "--layers", "1"], 1,
                 r"^blockc gpt: error: out of memory",
                 marks=pytest.mark.skipif(os.environ.get("BLOCKC_UNDER_SANITIZER") == "1",
                                          reason="ASan's allocator logs refused allocations")),
    (["depth", "--plot", "{tmp}/missing/x.png"], 2,
     r"^blockc depth: error: --plot .*x\.png: the directory .*missing does not exist$"),
    (["depth", "--plot", "{tmp}"], 2, r"^blockc depth: error: --plot .*: is a directory"),
    (["gpt", "--norms", "--layers", "1", "--plot", "{tmp}/nope/n.png"], 2,
     r"^blockc gpt: error: --plot .*: the directory .*nope does not exist$"),
    ([], 2, r"usage: blockc"),
])
def test_cli_errors_are_one_line(argv, code, match, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    import re
    assert re.search(match, err.strip(), flags=re.M), err
    if argv:
        assert len(err.strip().splitlines()) == 1, err


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"blockc {blockc.__version__}"


def test_cli_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["depth", "--help"])
    out = capsys.readouterr().out
    assert "exit status:" in out and "2  a usage error" in out and "130  interrupted" in out


@pytest.mark.skipif(os.environ.get("BLOCKC_UNDER_SANITIZER") == "1",
                    reason="matplotlib's C++ extension aborts under an LD_PRELOADed ASan")
def test_cli_plot_without_extension_says_what_it_wrote(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    target = tmp_path / "curve"
    assert main(["depth", "--blocks", "3", "--plot", str(target)]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith(f"wrote {target}.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000 and not target.exists()


# ---- inputs and output paths -------------------------------------------------------------

def test_convert_refuses_to_write_over_its_input(tmp_path, capsys):
    from blockc.cli import main
    d = tmp_path / "ck"
    blockc.GPT.random(TINY).save_pretrained(d)
    before = snapshot(d)
    assert main(["convert", str(d), str(d / "model.safetensors")]) == 2
    assert "input" in capsys.readouterr().err
    assert snapshot(d) == before
    sd = tmp_path / "sd.safetensors"
    assert main(["convert", str(d), str(sd)]) == 0
    assert main(["convert", str(sd), str(d / "model.safetensors"), "--config-json",
                 str(d / "config.json")]) == 2  # a directory path that is a file of the input
    capsys.readouterr()


def test_convert_metadata_that_is_not_json_names_the_file(tmp_path, capsys):
    from blockc.cli import main
    sd = tmp_path / "sd.safetensors"
    bst.write(sd, {"x": np.zeros(1, np.float32)}, {"config": "[" * 5000 + "]" * 5000})
    assert main(["convert", str(sd), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "sd.safetensors" in err and "internal error" not in err
    bst.write(sd, {"x": np.zeros(1, np.float32)}, {"config": "{nope"})
    assert main(["convert", str(sd), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "sd.safetensors" in err and "not valid JSON" in err


@pytest.mark.parametrize("opt", ["--json", "--markdown"])
def test_experiment_output_paths_are_checked_before_the_experiment(tmp_path, capsys, opt):
    from blockc.cli import main
    assert main(["experiment", "trainability", "--depths", "1", "--variants", "pre-norm",
                 "--steps", "1", "--width", "16", opt, str(tmp_path / "missing" / "x")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "trainability:" not in capsys.readouterr().out


def test_experiment_markdown_with_markers_out_of_order_is_refused(tmp_path, capsys):
    from blockc.cli import main
    md = tmp_path / "doc.md"
    text = "intro\n<!-- trainability:end -->\nmine\n<!-- trainability:begin -->\nend\n"
    md.write_text(text)
    assert main(["experiment", "trainability", "--depths", "1", "--variants", "pre-norm",
                 "--steps", "1", "--width", "16", "--markdown", str(md)]) == 2
    assert "marker" in capsys.readouterr().err
    assert md.read_text() == text


def test_generate_ids_past_int64_are_named(tmp_path, capsys):
    from blockc.cli import main
    d = tmp_path / "ck"
    blockc.GPT.random(TINY).save_pretrained(d)
    assert main(["generate", "--model", str(d), "--ids", f"1,{2 ** 64}"]) == 2
    err = capsys.readouterr().err
    assert "--ids" in err and "dtype" not in err
