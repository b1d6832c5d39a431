"""Benches write their own tables into docs/: nothing there is typed by hand.

``with recorded("speed.md", "block", argv):`` runs the bench with its standard
output also captured; at the end the capture replaces the section between
``<!-- block:begin -->`` and ``<!-- block:end -->`` in docs/speed.md (the one
marker dialect, blockc.experiments._report's too), headed by
the command and the date. Only a run with ``--docs`` records (a quick run with
other options should not overwrite the published table).

The page is a path under docs/: "speed.md" for the headline tables a user reads,
"results/<topic>.md" for the rest (the A/B studies, the other shapes, the history).
Each bench names its page and section literally in its ``run(main, page, section)``
call; tests/test_docs.py checks that every section in docs/ has such a writer.
"""
from __future__ import annotations

import contextlib
import datetime
import io
import os
import re
import sys
import tempfile
from typing import Iterator, List


DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


class _Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, s):
        for st in self.streams:
            st.write(s)
        return len(s)

    def flush(self):
        for st in self.streams:
            st.flush()


def write_section(doc: str, name: str, body: str) -> None:
    """Replace the body between the section's markers in docs/<doc> (which must have them);
    ``doc`` is a path under docs/, as "speed.md" or "results/panels.md"."""
    path = os.path.join(DOCS, *doc.split("/"))
    text = open(path, encoding="utf-8").read()
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"  # the experiments' dialect too
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(end) < text.index(begin):
        raise SystemExit(f"{path} must have section {name!r} once, {begin} before {end}")
    pat = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    text = pat.sub(lambda _: f"{begin}\n{body.rstrip()}\n{end}", text)
    # a unique temporary file beside the page, renamed over it: two benches finishing at
    # once never interleave their writes, and a failure leaves the page as it was
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


@contextlib.contextmanager
def recorded(doc: str, name: str, argv: List[str], enabled: bool) -> Iterator[None]:
    """Tee standard output; on success write it into docs/<doc>, section ``name``."""
    if not enabled:
        yield
        return
    buf = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, buf)):
        yield
    cmd = " ".join(["python", os.path.relpath(sys.argv[0], os.path.dirname(DOCS))] + argv)
    day = datetime.date.today().isoformat()
    write_section(doc, name, f"`{cmd}` on {day}:\n\n```text\n{buf.getvalue().rstrip()}\n```")
    print(f"(wrote docs/{doc}, section {name})", file=sys.stderr)


def run(main, doc: str, name: str) -> None:
    """A bench's ``__main__``: ``main(argv)`` with ``--docs`` taken off the arguments
    and, when it was given, the output recorded into docs/<doc>, section ``name``."""
    argv = [a for a in sys.argv[1:] if a != "--docs"]
    with recorded(doc, name, argv, enabled="--docs" in sys.argv[1:]):
        status = main(argv)
    sys.exit(status or 0)
