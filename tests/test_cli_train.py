"""``blockc train`` and ``blockc experiment trainability`` (issue 14)."""
import json
import math
import re

import numpy as np
import pytest

from blockc import GPT, GPTConfig
from blockc.experiments.trainability import markov_task, results_table
from blockc.cli import main

from helpers import plots

TEXT = ("the residual stream flows from the embedding to the output. "
        "attention mixes positions and the mlp mixes features. ") * 30


def text_file(tmp_path):
    p = tmp_path / "text.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


SMALL = ["--width", "32", "--layers", "2", "--heads", "2", "--batch", "4", "--seq", "32"]


def test_train_prints_each_step_evaluates_and_writes_a_loadable_checkpoint(tmp_path, capsys):
    f = text_file(tmp_path)
    out = tmp_path / "run"
    assert main(["train", "--text", str(f), "--steps", "40", "--lr", "3e-3", "--eval-every", "20",
                 "--out", str(out)] + SMALL) == 0
    text = capsys.readouterr().out
    steps = re.findall(r"step +(\d+)/40  loss (\d+\.\d+)  lr \S+  ([\d,]+) tokens/s", text)
    assert [int(s) for s, _, _ in steps] == list(range(1, 41))
    losses = [float(x) for _, x, _ in steps]
    assert losses[0] > math.log(256) - 0.3 and losses[-1] < losses[0] - 1.0
    evals = re.findall(r"eval +(\d+)/40  held-out loss (\d+\.\d+)", text)
    assert [int(s) for s, _ in evals] == [20, 40]
    # the directory is a checkpoint: its held-out loss is the printed one
    m = GPT.from_pretrained(out)
    assert m.config.vocab == 256 and m.config.layers == 2
    data = np.frombuffer(TEXT.encode(), np.uint8).astype(np.int64)
    held = data[data.size - int(round(data.size * 0.1)):]
    n = min((held.size - 1) // 32, 64)
    x = np.stack([held[r * 32:r * 32 + 32] for r in range(n)])
    y = np.stack([held[r * 32 + 1:r * 32 + 33] for r in range(n)])
    assert m.loss(x, y) == pytest.approx(float(evals[-1][1]), abs=1e-4)
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["step"] == 40 and len(state["history"]) == 40 and state["tokens"] == "bytes"


def test_resuming_a_run_is_the_uninterrupted_run(tmp_path, capsys):
    f = text_file(tmp_path)
    common = ["--text", str(f), "--lr", "2e-3", "--warmup", "3", "--eval-every", "4"]
    assert main(["train", "--steps", "12", "--out", str(tmp_path / "a")] + common + SMALL) == 0
    assert main(["train", "--steps", "6", "--out", str(tmp_path / "b")] + common + SMALL) == 0
    assert main(["train", "--resume", str(tmp_path / "b"), "--steps", "12"] + common) == 0
    a = (tmp_path / "a" / "model.safetensors").read_bytes()
    b = (tmp_path / "b" / "model.safetensors").read_bytes()
    assert a == b
    sa = json.loads((tmp_path / "a" / "trainer_state.json").read_text())
    sb = json.loads((tmp_path / "b" / "trainer_state.json").read_text())
    assert [h["loss"] for h in sa["history"]] == [h["loss"] for h in sb["history"]]
    assert (tmp_path / "a" / "optimizer.safetensors").read_bytes() == \
        (tmp_path / "b" / "optimizer.safetensors").read_bytes()
    assert main(["train", "--resume", str(tmp_path / "b"), "--steps", "12"] + common) == 2


def test_train_a_checkpoint_with_its_tokenizer_then_generate(tmp_path, capsys):
    from test_hf import trained_tokenizer
    src = tmp_path / "src"
    src.mkdir()
    tok = trained_tokenizer(src)
    m = GPT.random(GPTConfig(vocab=tok.get_vocab_size(), context=32, width=32, heads=2, layers=2))
    m.save_pretrained(src)
    f = text_file(tmp_path)
    out = tmp_path / "run"
    assert main(["train", "--text", str(f), "--model", str(src), "--steps", "30", "--batch", "4",
                 "--seq", "16", "--lr", "3e-3", "--out", str(out), "--quiet"]) == 0
    assert (out / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
    assert json.loads((out / "trainer_state.json").read_text())["tokens"] == "tokenizer"
    capsys.readouterr()
    assert main(["generate", "--model", str(out), "--prompt", "the residual", "--max-new-tokens",
                 "8", "--no-eos"]) == 0
    assert capsys.readouterr().out.strip()


@plots
def test_train_plots_the_loss_curve(tmp_path):
    pytest.importorskip("matplotlib")
    f = text_file(tmp_path)
    assert main(["train", "--text", str(f), "--steps", "4", "--out", str(tmp_path / "r"),
                 "--plot", str(tmp_path / "loss"), "--quiet"] + SMALL) == 0
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("extra, match", [
    (["--seq", "64", "--context", "32"], "exceeds the model's context"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--eval-frac", "1.5"], "--eval-frac"),
    (["--lr", "-1"], "--lr"),
    (["--vocab", "50"], "vocab is 50"),
])
def test_train_refusals_are_one_line_usage_errors(tmp_path, capsys, extra, match):
    f = text_file(tmp_path)
    args = ["train", "--text", str(f), "--out", str(tmp_path / "r"), "--steps", "2",
            "--width", "16", "--heads", "2", "--layers", "1", "--seq", "16"]
    assert main(args + extra) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_train_refuses_a_text_too_short_and_a_missing_out(tmp_path, capsys):
    short = tmp_path / "short.txt"
    short.write_text("tiny")
    assert main(["train", "--text", str(short), "--out", str(tmp_path / "r"), "--seq", "16"]) == 2
    assert "too few" in capsys.readouterr().err
    assert main(["train", "--text", str(short)]) == 2
    assert "--out is required" in capsys.readouterr().err
    assert main(["train", "--text", str(tmp_path / "none.txt"), "--out", str(tmp_path / "r")]) == 1
    assert main(["train", "--text", str(short), "--resume", str(tmp_path)]) == 2
    assert "trainer_state.json" in capsys.readouterr().err


# -- the experiment ------------------------------------------------------------------------

def test_the_markov_task_follows_its_table_and_its_floor_is_the_chains_entropy():
    tokens, floor = markov_task(vocab=8, choices=3, n=60_000, seed=1)
    assert tokens.min() >= 0 and tokens.max() < 8
    # each pair of tokens is followed by at most 3 tokens
    pairs = tokens[:-2] * 8 + tokens[1:-1]
    follow = {}
    for p, t in zip(pairs.tolist(), tokens[2:].tolist()):
        follow.setdefault(p, set()).add(t)
    assert max(len(s) for s in follow.values()) <= 3
    # the empirical conditional entropy of the stream estimates the floor
    counts = np.zeros((64, 8))
    np.add.at(counts, (pairs, tokens[2:]), 1)
    p = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    h = -(counts * np.log(np.where(p > 0, p, 1))).sum() / counts.sum()
    assert h == pytest.approx(floor, abs=0.02)
    assert 0 < floor < math.log(3)


def test_experiment_trainability_runs_prints_a_table_and_writes_its_section(tmp_path, capsys):
    md = tmp_path / "training.md"
    md.write_text("# Training\n\n<!-- trainability:begin -->\nold\n<!-- trainability:end -->\n\nafter\n")
    js = tmp_path / "runs.json"
    assert main(["experiment", "trainability", "--depths", "1,2", "--variants",
                 "pre-norm,no-residual", "--steps", "40", "--width", "16", "--json", str(js),
                 "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    assert "| layers | pre-norm | no-residual |" in out
    res = json.loads(js.read_text())
    assert [(r["depth"], r["variant"]) for r in res["runs"]] == [
        (1, "pre-norm"), (1, "no-residual"), (2, "pre-norm"), (2, "no-residual")]
    assert all(len(r["losses"]) == 40 for r in res["runs"])
    # no model beats the chain's own entropy; every run starts near ln(16)
    for r in res["runs"]:
        assert r["held_out"] > res["floor"] - 0.05
        assert abs(r["losses"][0] - math.log(16)) < 0.5
    text = md.read_text()
    assert "old" not in text and text.endswith("after\n")
    assert "\n".join(results_table(res)) in text


def test_experiment_refuses_unknown_variants_and_bad_depths(capsys):
    assert main(["experiment", "trainability", "--variants", "pre-norm,dropout"]) == 2
    assert "--variants" in capsys.readouterr().err
    assert main(["experiment", "trainability", "--depths", "0"]) == 2
    assert main(["experiment", "trainability", "--depths", "a"]) == 2
