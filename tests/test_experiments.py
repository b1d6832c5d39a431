"""``blockc experiment gradients`` and ``blockc experiment warmup`` (issue 23): the
per-layer gradients at initialisation against torch.autograd, the figures the same bits
at any thread count, the sweeps' bookkeeping."""
import json
import math

import numpy as np
import pytest

import blockc
from blockc import GPTConfig
from blockc.experiments import gradients as G

from helpers import plots


def _torch():
    return pytest.importorskip("torch")


def small(variant, layers=3, width=16):
    return GPTConfig(vocab=16, context=8, width=width, heads=4, layers=layers,
                     **G.VARIANTS[variant])


def torch_profile(m, ids, targets):
    """The loss, the gradient at every block's input (and the stack's output) and every
    parameter's gradient, by torch.autograd through tests/support/torch_ref.py's blocks."""
    T = _torch()
    import torch_ref
    cfg = m.config
    bcfg = G.block_config(cfg)
    sd = {k: T.from_numpy(np.array(v, np.float32)).requires_grad_(True)
          for k, v in m.state_dict().items()}
    blocks = []
    for i in range(cfg.layers):
        pre = f"blocks.{i}."
        blocks.append(torch_ref.Block.like(bcfg, {k[len(pre):]: v.detach().numpy()
                                                  for k, v in sd.items() if k.startswith(pre)}))
    t = ids.shape[1]
    x = sd["token.weight"][T.from_numpy(ids)] + sd["position.weight"][:t][None]
    states = []
    for b in blocks:
        x.retain_grad()
        states.append(x)
        x = b(x)
    x.retain_grad()
    states.append(x)
    if cfg.placement == "pre" and cfg.norm != "none":
        x = T.nn.functional.layer_norm(x, (cfg.width,), sd["norm.weight"], sd["norm.bias"],
                                       cfg.eps)
    logits = x @ sd["token.weight"].T
    loss = T.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab),
                                         T.from_numpy(targets).reshape(-1))
    loss.backward()
    params = {f"blocks.{i}.{k}": p.grad.numpy() for i, b in enumerate(blocks)
              for k, p in b.named_parameters()}
    return float(loss.detach()), np.stack([s.grad.numpy() for s in states]), params


@pytest.mark.parametrize("init", G.INITS)
@pytest.mark.parametrize("variant", list(G.VARIANTS))
def test_the_gradient_at_every_layer_matches_torch_autograd(variant, init):
    m = G.initial_model(small(variant), init, seed=3)
    rng = np.random.default_rng(1)
    ids, targets = rng.integers(0, 16, (2, 8)), rng.integers(0, 16, (2, 8))
    want_loss, want_inputs, want_params = torch_profile(m, ids, targets)
    loss, inputs = G.input_gradients(m, ids, targets)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    assert inputs.shape == (4, 2, 8, 16)
    for layer in range(4):
        scale = np.abs(want_inputs[layer]).max()
        np.testing.assert_allclose(inputs[layer], want_inputs[layer], rtol=1e-4,
                                   atol=1e-4 * scale)
    prof = G.layer_profile(m, ids, targets)
    assert prof["loss"] == pytest.approx(want_loss, rel=1e-5)
    for layer in range(3):
        block = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2))
                              for k, g in want_params.items() if k.startswith(f"blocks.{layer}.")))
        assert prof["block"][layer] == pytest.approx(block, rel=1e-4)
        assert prof["down"][layer] == pytest.approx(
            float(np.linalg.norm(want_params[f"blocks.{layer}.down.weight"])), rel=1e-4)
        assert prof["input"][layer] == pytest.approx(float(np.linalg.norm(want_inputs[layer])),
                                                     rel=1e-4)


def test_the_gradient_at_the_first_input_is_the_position_gradient_of_the_model():
    # one sequence: the position table's gradient is the gradient at the first block's input
    m = G.initial_model(small("post-norm", layers=4), "xavier", seed=0)
    ids = np.arange(8)[None] % 16
    targets = (ids * 5 + 3) % 16
    _, grads = m.grad(ids, targets)
    _, inputs = G.input_gradients(m, ids, targets)
    np.testing.assert_allclose(inputs[0, 0], grads["position.weight"], rtol=1e-4, atol=1e-6)


def test_xavier_initialisation_draws_the_glorot_variance_and_keeps_the_embeddings():
    cfg = GPTConfig(vocab=64, context=64, width=64, heads=4, layers=2)
    sd = G.initial_model(cfg, "xavier", seed=0).state_dict()
    assert np.std(sd["blocks.1.attn.qkv.weight"]) == pytest.approx(math.sqrt(2 / 128), rel=0.03)
    assert np.std(sd["blocks.0.up.weight"]) == pytest.approx(math.sqrt(2 / 320), rel=0.03)
    assert np.std(sd["blocks.0.down.weight"]) == pytest.approx(math.sqrt(2 / 320), rel=0.03)
    assert np.std(sd["token.weight"]) == pytest.approx(0.02, rel=0.05)
    assert np.all(sd["blocks.0.ln1.weight"] == 1) and np.all(sd["blocks.0.up.bias"] == 0)
    gpt2 = G.initial_model(cfg, "gpt2", seed=0).state_dict()
    assert all(np.array_equal(gpt2[k], blockc.GPT.random(cfg, seed=0).state_dict()[k])
               for k in gpt2)


def test_the_gradient_figures_are_the_same_bits_at_any_thread_count(threads):
    runs = []
    for n in (1, 2):
        threads(n)
        runs.append(json.dumps(G.gradients([3], variants=["pre-norm", "post-norm"], seeds=2,
                                           width=8, batch=3, seq=8, report=lambda s: None)))
    assert runs[0] == runs[1]


def test_the_gradient_tables_cover_every_point_and_are_written_into_their_section(tmp_path):
    res = G.gradients([1, 2], variants=["pre-norm", "no-norm"], seeds=2, width=8, batch=2,
                      seq=4, report=lambda s: None)
    assert len(res["runs"]) == 2 * 2 * 2 * 2
    assert {(r["init"], r["variant"], r["depth"], r["seed"]) for r in res["runs"]} == {
        (i, v, d, s) for i in G.INITS for v in ("pre-norm", "no-norm") for d in (1, 2)
        for s in (0, 1)}
    table = G.profile_table(res)
    assert len(table) == 2 + 4
    doc = tmp_path / "training.md"
    doc.write_text("# Training\n\nkept\n<!-- gradients:begin -->\nold\n<!-- gradients:end -->\n"
                   "also kept\n")
    G.write_markdown(str(doc), res, "blockc experiment gradients --depths 1,2")
    text = doc.read_text()
    assert "old" not in text and "kept" in text and text.endswith("also kept\n")
    assert "`blockc experiment gradients --depths 1,2`" in text
    assert table[2] in text


@plots
def test_the_gradient_plot_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    res = G.gradients([2], variants=["post-norm"], seeds=2, width=8, batch=2, seq=4,
                      report=lambda s: None)
    G.plot_profiles(res, str(tmp_path / "g.png"), cpu="a CPU")
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_input_gradients_refuse_models_the_engine_cannot_compute():
    m = blockc.GPT.random(GPTConfig(vocab=16, context=8, width=16, heads=4, layers=1,
                                    positions="rope"))
    with pytest.raises(ValueError, match="learned positions"):
        G.input_gradients(m, [[1, 2]], [[2, 3]])
    with pytest.raises(ValueError, match="init"):
        G.initial_model(small("pre-norm"), "he", 0)
    with pytest.raises(ValueError, match="width"):
        G.gradients([2], width=10)


# -- the sweeps --------------------------------------------------------------------------

from blockc.experiments import warmup as W  # noqa: E402

TINY = dict(width=8, heads=2, steps=6, batch=2, seq=8, eval_windows=8)


def test_a_run_is_classified_by_its_losses():
    uni, uniform = 2.03, math.log(8)
    assert W.classify([2.0, float("nan")], float("nan"), uni, uniform) == "diverged"
    assert W.classify([2.0, float("inf")], 1.0, uni, uniform) == "diverged"
    assert W.classify([2.0, 9.0], uniform + 0.2, uni, uniform) == "diverged"
    assert W.classify([2.0, 2.0], 2.05, uni, uniform) == "stuck"
    assert W.classify([2.0, 1.0], 1.2, uni, uniform) == "trained"


def test_every_point_is_run_once_and_a_diverged_run_is_reported_not_dropped(tmp_path):
    s = W.Settings(**TINY)
    pts = W.warmup_points([1, 2], [1e-3, 1e4], seeds=2, warmup=2, clip=1.0)
    # pre/post x warmup or not x 2 lrs x 2 seeds at 2 depths, and the clipped row
    assert len(pts) == 2 * 2 * 2 * 2 * 2 + 2 * 2
    res = W.sweep(pts, s, report=lambda line: None)
    assert [{k: r[k] for k in pt} for pt, r in zip(pts, res["runs"])] == pts
    assert len(res["runs"]) == len(pts)
    big = [r for r in res["runs"] if r["lr"] == 1e4]
    assert big and all(r["status"] == "diverged" for r in big)
    assert all(r["steps_run"] <= 6 and len(r["losses"]) == r["steps_run"] for r in res["runs"])
    assert all(r["steps_run"] == 6 and math.isfinite(r["held_out"])
               for r in res["runs"] if r["lr"] == 1e-3)
    counts = W.status_counts(res)
    assert sum(counts.values()) == len(pts) and counts["diverged"] >= len(big)
    table = W.sweep_table(res)
    assert len(table) == 2 + 9  # 4 rows per depth and the clipped one
    assert all(line.endswith("| diverged 2/2 |") for line in table[2:])
    doc = tmp_path / "training.md"
    W.write_markdown(str(doc), "warmup", res, "blockc experiment warmup --tiny")
    text = doc.read_text()
    assert f"{len(pts)} runs: {counts['trained']} trained, {counts['stuck']} stuck" in text
    assert text.count("diverged 2/2") == 9


def test_the_learning_rate_schedule_is_the_warmup_asked_for():
    s = W.Settings(**TINY)
    r = W.run_point({"variant": "pre-norm", "depth": 1, "lr": 1e-3, "warmup": 4, "clip": None,
                     "seed": 0}, s)
    assert r["status"] in W.STATUSES and r["steps_run"] == 6
    lrs = [blockc.train.fit.lr_at(i, 1e-3, 4, 6, "constant") for i in range(6)]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])


def _figures(res):
    return json.dumps([{k: v for k, v in r.items() if k != "seconds"} for r in res["runs"]])


def test_the_sweep_is_the_same_bits_at_any_thread_count(threads):
    s = W.Settings(**TINY)
    pts = W.activation_points([2], [3e-3], seeds=2, warmup=2)
    threads(1)
    one = _figures(W.sweep(pts, s, report=lambda line: None))
    threads(2)
    assert _figures(W.sweep(pts, s, report=lambda line: None)) == one


@pytest.mark.slow
def test_the_sweep_in_worker_processes_is_the_serial_sweep():
    s = W.Settings(**TINY)
    pts = W.warmup_points([1], [3e-3, 1e4], seeds=2, warmup=2, clip=None)
    assert (_figures(W.sweep(pts, s, jobs=2, report=lambda line: None))
            == _figures(W.sweep(pts, s, report=lambda line: None)))


def test_a_bad_point_is_refused_before_any_run():
    s = W.Settings(**TINY)
    seen = []
    with pytest.raises(ValueError, match="variant"):
        W.sweep([{"variant": "pre-norm", "depth": 1, "lr": 1e-3, "warmup": 0, "seed": 0},
                 {"variant": "sandwich", "depth": 1, "lr": 1e-3, "warmup": 0, "seed": 0}],
                s, report=seen.append)
    assert seen == []
    with pytest.raises(ValueError, match="warmup"):
        W.sweep([{"variant": "pre-norm", "depth": 1, "lr": 1e-3, "warmup": 99, "seed": 0}], s)
    with pytest.raises(ValueError, match="width"):
        W.Settings(width=10, heads=4)


@plots
def test_the_sweep_plot_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    s = W.Settings(**TINY)
    res = W.sweep(W.warmup_points([1], [1e-3, 1e4], seeds=2, warmup=2, clip=None), s,
                  report=lambda line: None)
    W.plot_sweep(res, str(tmp_path / "w.png"), "warmup", cpu="a CPU")
    assert (tmp_path / "w.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- the commands -------------------------------------------------------------------------

from blockc.cli import main  # noqa: E402


def test_experiment_warmup_prints_every_run_and_writes_its_table_and_json(tmp_path, capsys):
    doc = tmp_path / "training.md"
    doc.write_text("# Training\n<!-- warmup:begin -->\n<!-- warmup:end -->\n")
    out = tmp_path / "runs.json"
    assert main(["experiment", "warmup", "--depths", "1", "--lrs", "1e-3,1e4", "--seeds", "2",
                 "--steps", "5", "--warmup", "2", "--width", "8", "--batch", "2", "--seq", "8",
                 "--markdown", str(doc), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count(" seed ") == 2 * 2 * 2 * 2 + 2 * 2  # every run printed, the clipped row too
    res = json.loads(out.read_text())  # strict JSON: a diverged run's NaN is null
    assert len(res["runs"]) == 20
    assert all(r["status"] == "diverged" for r in res["runs"] if r["lr"] == 1e4)
    body = doc.read_text()
    assert "`blockc experiment warmup --depths 1 --lrs 1e-3,1e4 --seeds 2 --steps 5" in body
    assert body.count("diverged 2/2") == 5


def test_experiment_activation_and_gradients_write_their_sections(tmp_path, capsys):
    doc = tmp_path / "training.md"
    assert main(["experiment", "activation", "--depths", "1", "--lrs", "1e-3", "--seeds", "1",
                 "--steps", "3", "--warmup", "1", "--width", "8", "--batch", "2", "--seq", "8",
                 "--markdown", str(doc)]) == 0
    assert main(["experiment", "gradients", "--depths", "1,2", "--seeds", "1", "--width", "8",
                 "--batch", "2", "--seq", "4", "--markdown", str(doc)]) == 0
    body = doc.read_text()
    assert "pre-norm, ReLU, 1 steps' warmup" in body
    assert "<!-- activation:end -->" in body and "<!-- gradients:end -->" in body
    assert "| xavier | no-norm |" in body


@pytest.mark.parametrize("argv,match", [
    (["warmup", "--lrs", "1e-3,-1"], "--lrs"),
    (["warmup", "--warmup", "0"], "--warmup"),
    (["warmup", "--steps", "5", "--warmup", "6"], "--warmup"),
    (["warmup", "--clip", "-1"], "--clip"),
    (["gradients", "--inits", "he"], "--inits"),
    (["gradients", "--width", "10"], "--width"),
    (["activation", "--jobs", "0"], "--jobs"),
])
def test_experiment_options_are_checked_before_any_run(argv, match, capsys):
    assert main(["experiment"] + argv) != 0
    assert match in capsys.readouterr().err


def test_a_sweep_is_redrawn_from_its_json_without_running(tmp_path, capsys):
    common = ["experiment", "warmup", "--depths", "1", "--lrs", "1e-3,1e4", "--seeds", "1",
              "--steps", "4", "--warmup", "2", "--clip", "0", "--width", "8", "--batch", "2",
              "--seq", "8"]
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    out = tmp_path / "runs.json"
    assert main(common + ["--json", str(out), "--markdown", str(a)]) == 0
    capsys.readouterr()
    assert main(common + ["--from-json", str(out), "--markdown", str(b)]) == 0
    assert " seed " not in capsys.readouterr().out  # nothing ran
    assert a.read_text() == b.read_text()
    wrong = [x if x != "1e-3,1e4" else "1e-3" for x in common]
    assert main(wrong + ["--from-json", str(out)]) != 0
    assert "not the ones" in capsys.readouterr().err
