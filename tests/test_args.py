"""The argument layer (blockc._args, issue 9): every integer through operator.index and one
range check, flags bools only, one message style naming the argument, all of it a
BlockcError; and torch's bfloat16 and float16 tensors accepted wherever arrays are."""
import numpy as np
import pytest

import blockc
from blockc import ops

TINY = blockc.GPTConfig(vocab=64, context=16, width=16, heads=2, layers=2)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: blockc.init_blocks(blockc.BlockConfig(), np.uint64(2**63)), ValueError,
     r"^n must be in \[0, 2\*\*40\], got 9223372036854775808$"),
    (lambda: blockc.init_blocks(blockc.BlockConfig(), 2.0), TypeError, r"^n must be an integer, got float$"),
    (lambda: blockc.init_blocks(blockc.BlockConfig(), True), TypeError, r"^n must be an integer, got bool$"),
    (lambda: blockc.count_parameters(blockc.BlockConfig(), n_blocks=2.0), TypeError,
     r"^n_blocks must be an integer, got float$"),
    (lambda: blockc.GPTConfig(vocab=2**64), ValueError, r"^GPTConfig.vocab must be in \[1, 2\*\*40\], got 18446744073709551616$"),
    (lambda: blockc.GPT.random(TINY).new_cache(2**64, 4), ValueError, r"^batch must be in \[1, 2\*\*40\]"),
    (lambda: blockc.GPT.random(TINY).new_cache(1, np.int8(4)).capacity == 4 or 1 / 0, None, None),
    (lambda: blockc.GPT.random(TINY, seed=-1), ValueError, r"^seed must be >= 0, got -1$"),
    (lambda: blockc.GPTConfig(tie_weights="False"), TypeError, r"^GPTConfig.tie_weights must be a bool, got str$"),
    (lambda: blockc.GPTConfig(tie_weights=0), TypeError, r"^GPTConfig.tie_weights must be a bool, got int$"),
    (lambda: blockc.GPT.random(TINY)(np.zeros((1, 2), np.int64), return_hidden="no"), TypeError,
     r"^return_hidden must be a bool, got str$"),
    (lambda: blockc.GPT.random(TINY).generate(np.zeros((1, 2), np.int64), 2.0), TypeError,
     r"^max_new_tokens must be an integer, got float$"),
    (lambda: blockc.GPT.random(TINY).generate(np.zeros((1, 2), np.int64), 2, top_k=2.0), TypeError,
     r"^top_k must be an integer, got float$"),
    (lambda: blockc.GPT.random(TINY).generate(np.zeros((1, 2), np.int64), 2, temperature=np.inf),
     ValueError, r"^temperature must be finite and >= 0, got inf$"),
    (lambda: blockc.GPT.random(TINY).generate(np.zeros((1, 2), np.int64), 2, use_cache=1), TypeError,
     r"^use_cache must be a bool, got int$"),
    (lambda: blockc.GPT.random(TINY).state_dict(keep_tied="yes"), TypeError,
     r"^keep_tied must be a bool, got str$"),
    (lambda: blockc.stack_forward(np.zeros((4, 8), np.float32), [], blockc.BlockConfig(),
                                  return_hidden=1), TypeError, r"^return_hidden must be a bool, got int$"),
    (lambda: blockc.book.ffn_init(seed=1.0), TypeError, r"^seed must be an integer, got float$"),
    (lambda: blockc.CRand(seed=-1), ValueError, r"^seed must be in \[0, 2\*\*32\), got -1$"),
    (lambda: blockc.GPTConfig.preset("gpt2", heads=7), ValueError, r"width 768 is not divisible by heads 7"),
    (lambda: blockc.GPTConfig.preset("gpt2", depth=7), TypeError, r"GPTConfig has no field 'depth'"),
], ids=lambda v: "" if callable(v) or v is None or isinstance(v, type) else None)
def test_one_argument_layer(call, exc, match):
    # every integer through operator.index and one range check, flags bools only,
    # one message style naming the argument, and all of it a BlockcError
    if exc is None:
        assert call()
        return
    with pytest.raises(exc, match=match) as info:
        call()
    assert isinstance(info.value, blockc.BlockcError)


def test_bfloat16_and_float16_torch_tensors_everywhere():
    torch = pytest.importorskip("torch")
    cfg = blockc.BlockConfig(d_model=16, n_heads=2, d_ff=32)
    W = blockc.init_block(cfg, 0, "normal")
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    for dt in (torch.bfloat16, torch.float16):
        tx = torch.from_numpy(x).to(dt)
        tW = {k: torch.from_numpy(v).to(dt) for k, v in W.items()}
        xs = tx.float().numpy()
        Ws = {k: v.float().numpy() for k, v in tW.items()}
        np.testing.assert_array_equal(blockc.block_forward(tx, tW, cfg),
                                      blockc.block_forward(xs, Ws, cfg))
        np.testing.assert_array_equal(ops.rmsnorm(tx), ops.rmsnorm(xs))
        np.testing.assert_array_equal(ops.linear(tx, tW["up.weight"]), ops.linear(xs, Ws["up.weight"]))
