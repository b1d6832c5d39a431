"""`blockc depth`: the chapter's stacking experiment from the command line."""
import sys

import pytest

from blockc.cli import main

from helpers import plots


def test_depth_prints_the_129_stack_norms(capsys):
    assert main(["depth", "--blocks", "4"]) == 0
    out = capsys.readouterr().out
    norms = [line.split()[-1] for line in out.splitlines() if line.strip().startswith(("input", "after"))]
    assert norms == ["1.3809", "1.3990", "1.4163", "1.4205", "1.4256"]
    assert "128_Block input" in out


def test_depth_glibc_and_post_norm(capsys):
    assert main(["depth", "--blocks", "4", "--rand", "glibc"]) == 0
    assert "1.4008" in capsys.readouterr().out.splitlines()[-1]
    assert main(["depth", "--blocks", "3", "--placement", "post"]) == 0
    # post-norm RMS pins every position to norm sqrt(d_model) = 2.8284
    assert capsys.readouterr().out.splitlines()[-1].split()[-1] == "2.8284"


def test_depth_other_widths_and_options(capsys):
    assert main(["depth", "--blocks", "2", "--d-model", "12", "--heads", "3", "--seq-len", "5",
                 "--norm", "layer", "--activation", "swiglu", "--causal", "--no-residual"]) == 0
    out = capsys.readouterr().out
    assert "random input 5x12" in out and "no residual" in out and "causal" in out


def test_depth_bad_arguments(capsys):
    with pytest.raises(SystemExit) as e:
        main(["depth", "--norm", "batch"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        main(["depth", "--blocks", "0"])
    assert main(["depth", "--d-model", "10", "--heads", "3"]) == 2
    assert "n_heads must divide d_model" in capsys.readouterr().err


@plots
def test_depth_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "depth.png"
    assert main(["depth", "--blocks", "6", "--plot", str(out)]) == 0
    text = capsys.readouterr().out
    assert "pre-norm" in text and "post-norm" in text
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_depth_plot_without_matplotlib(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["depth", "--blocks", "2", "--plot", str(tmp_path / "x.png")]) == 2
    assert "needs matplotlib" in capsys.readouterr().err


@plots
def test_depth_plot_is_written_whole_or_not_at_all(monkeypatch, tmp_path, capsys):
    """A figure that fails half way through leaves the previous plot as it was and no
    temporary file beside it; a good one replaces it (blockc._plot.save_figure)."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    out = tmp_path / "depth.png"
    out.write_bytes(b"previous plot")
    real = Figure.savefig

    def broken(self, fname, *a, **k):
        fname.write(b"\x89PNG half a file")
        raise RuntimeError("renderer failed")

    monkeypatch.setattr(Figure, "savefig", broken)
    assert main(["depth", "--blocks", "2", "--plot", str(out)]) != 0
    assert "renderer failed" in capsys.readouterr().err
    assert out.read_bytes() == b"previous plot"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["depth.png"]
    monkeypatch.setattr(Figure, "savefig", real)
    assert main(["depth", "--blocks", "2", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
