"""Shared test set-up: ``tests/support`` (helpers, the PyTorch reference, the leak
cases, the GIL probe) is importable from every test module, and from the benches,
which add it to their path the same way. Tests never import from benches/."""
import os
import signal
import sys

SUPPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support")
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)


import pytest  # noqa: E402

import blockc  # noqa: E402
from blockc.runtime import ISAS  # noqa: E402

# A suite started in the background by a non-interactive shell (`pytest ... &`) inherits SIGINT
# ignored, and so would every process it starts: the Ctrl-C tests (the CLI, the chat on a
# terminal, the train step) send SIGINT and need it delivered, as it is to a user's terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# every instruction set this CPU has, or only the one BLOCKC_ISA forces (test_isa_forced
# runs the kernel tests a second time with BLOCKC_ISA=generic: the portable path alone)
_forced = os.environ.get("BLOCKC_ISA")
SUPPORTED_ISAS = ([blockc.get_isa()] if _forced in ISAS
                  else list(ISAS[: ISAS.index(blockc.best_isa()) + 1]))


@pytest.fixture(params=SUPPORTED_ISAS)
def isa(request):
    """Each supported instruction set in turn, the previous one restored after."""
    before = blockc.get_isa()
    blockc.set_isa(request.param)
    yield request.param
    blockc.set_isa(before)


@pytest.fixture
def threads():
    """blockc.set_num_threads, the default thread count restored after the test."""
    yield blockc.set_num_threads
    blockc.set_num_threads(0)


@pytest.fixture(scope="session")
def c_objects(tmp_path_factory):
    """The library's C sources compiled once per session (build_driver.objects, one
    compiler per CPU): the C programs of test_c_driver and test_c_alloc link them."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "c"))
    try:
        import build_driver
    finally:
        sys.path.pop(0)
    # the compiler must not inherit a sanitizer runtime preloaded into this process
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    try:
        return build_driver.objects(str(tmp_path_factory.mktemp("c-objects")), env=env)
    except RuntimeError as e:
        pytest.fail(str(e))
