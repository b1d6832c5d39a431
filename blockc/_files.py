"""Files in and out: every file blockc reads or writes goes through here.

Writing (:func:`atomic_write`, :func:`write_json`, :func:`replace_dir`): the bytes go to a
temporary file with a unique name in the target's directory, are flushed and fsynced, and
the file replaces the target with one ``os.replace`` (a rename). A reader sees the old file
or the new one, whole; two writers never share a temporary file; a failure at any point
(a full disk, Ctrl-C) removes the temporary file and leaves the target as it was.

Reading (:func:`open_regular`, :func:`read_bytes`, :func:`read_json`): a file is opened
without blocking (a FIFO cannot hang the open), and refused unless it is a regular file
after following links (``/dev/zero``, a FIFO, a directory, a socket); a read takes at most
a stated number of bytes; JSON nested deeper than :data:`MAX_JSON_DEPTH` is refused before
it is parsed. Every refusal is a :class:`blockc.BlockcValueError` naming the file.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import stat
from typing import Any, BinaryIO, Callable, Iterator, Optional, Union

import numpy as np

from ._errors import BlockcValueError

__all__ = ["atomic_write", "write_json", "write_bytes", "replace_dir", "temp_dir_for",
           "open_regular", "read_bytes", "read_json", "read_config", "loads_json",
           "check_output_file", "check_output_dir", "MAX_JSON_BYTES", "MAX_JSON_DEPTH",
           "PICKLE_SUFFIXES"]

#: the file endings of pickle checkpoints (PyTorch's and others'), which blockc never loads:
#: unpickling can run any code
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")

PathLike = Union[str, "os.PathLike[str]"]

#: The largest JSON file read (config.json, an index, trainer_state.json): 64 MiB.
MAX_JSON_BYTES = 64 * 1024 * 1024

#: The deepest nesting of arrays and objects a JSON read accepts (a config is 3 or 4 deep).
MAX_JSON_DEPTH = 64

_KIND = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR,
         "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    for test, name in _KIND:
        if test(mode):
            return name
    return "not a regular file"


def _temp_name(path: str, suffix: str = "tmp") -> str:
    """A unique name beside ``path`` (same directory, so a rename is atomic)."""
    d, base = os.path.split(os.path.abspath(path))
    return os.path.join(d, f".{base}.{suffix}-{os.getpid()}-{secrets.token_hex(6)}")


def _fsync_dir(d: str) -> None:
    """Make a rename in ``d`` durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: PathLike) -> Iterator[BinaryIO]:
    """A binary file object whose contents replace ``path`` whole when the block ends.

    The file is a new one with a unique name in ``path``'s directory (mode 0666 less
    the umask, as ``open`` makes it); at the end of the block it is flushed, fsynced and
    renamed over ``path``. If the block (or the flush) raises anything, KeyboardInterrupt
    included, the temporary file is removed and ``path`` is untouched. A symbolic link
    at ``path`` is replaced by the file, not written through.

    Raises
    ------
    OSError
        The directory cannot be written, the disk is full.
    """
    path = os.fspath(path)
    tmp = _temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    done = False
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        done = True
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def write_bytes(path: PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data``, atomically (see :func:`atomic_write`)."""
    with atomic_write(path) as f:
        f.write(data)


def write_json(path: PathLike, obj: Any, indent: Optional[int] = 2) -> None:
    """Replace ``path`` with ``obj`` as JSON (and a final newline), atomically.

    NaN and infinity are written as Python's json module writes them (a diverged loss
    is still a result), and read back by :func:`read_json`."""
    text = json.dumps(obj, indent=indent) + "\n"
    write_bytes(path, text.encode("utf-8"))


def temp_dir_for(path: PathLike) -> str:
    """A new empty directory with a unique name beside ``path``: build a directory there,
    then :func:`replace_dir` it into place."""
    tmp = _temp_name(os.fspath(path), "new")
    os.mkdir(tmp)
    return tmp


def _exchange(a: str, b: str) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where the
    system or the filesystem cannot."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOENT):
        return False
    raise OSError(err, os.strerror(err), b)


def replace_dir(tmp: PathLike, path: PathLike) -> None:
    """Put the complete directory ``tmp`` (made by :func:`temp_dir_for`) at ``path``.

    Where ``path`` exists it is swapped for ``tmp`` in one atomic exchange (Linux), so a
    reader or a crash sees the old directory or the new one; elsewhere the old one is
    renamed aside first (a crash between the two renames leaves ``path`` missing and the
    old directory beside it, never a mixture). The old directory is then removed.

    Raises
    ------
    OSError
        ``path`` cannot be replaced.
    """
    tmp, path = os.fspath(tmp), os.fspath(path)
    for f in os.listdir(tmp):  # every file of the new directory on disk before it appears
        p = os.path.join(tmp, f)
        if os.path.isfile(p) and not os.path.islink(p):
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(tmp)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.lexists(path):
        try:
            os.rename(tmp, path)
            _fsync_dir(parent)
            return
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):  # another writer came first
                raise
    if _exchange(tmp, path):
        _fsync_dir(parent)
        shutil.rmtree(tmp, ignore_errors=True)  # the old directory, now at tmp
        return
    old = _temp_name(path, "old")
    os.rename(path, old)
    os.rename(tmp, path)
    _fsync_dir(parent)
    shutil.rmtree(old, ignore_errors=True)


def open_regular(path: PathLike, what: str = "") -> BinaryIO:
    """``path`` opened for binary reading, refused unless it is a regular file.

    Opened non-blocking (a FIFO neither hangs nor is read) and checked with ``fstat`` on
    the open file, so a link swapped between a check and the open cannot slip through.

    Raises
    ------
    ValueError
        The path is a directory, FIFO, device or socket (after following links).
    OSError
        It cannot be opened (FileNotFoundError when it does not exist).
    """
    path = os.fspath(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BlockcValueError(f"{path}: {_kind(mode)}, not a regular file"
                                   + (f" ({what})" if what else ""))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: PathLike, limit: int, what: str = "") -> bytes:
    """The bytes of the regular file ``path``, refused when it holds more than ``limit``.

    Raises
    ------
    ValueError
        Not a regular file (:func:`open_regular`), or larger than ``limit`` bytes.
    OSError
        It cannot be opened or read.
    """
    with open_regular(path, what) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise BlockcValueError(f"{os.fspath(path)}: larger than {limit:,} bytes, the most "
                               f"blockc reads{' for ' + what if what else ''}")
    return data


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)


def json_depth(data: Union[bytes, str]) -> int:
    """The deepest nesting of arrays and objects in JSON text (its strings skipped)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    raw = _STRING.sub(b'""', raw)
    a = np.frombuffer(raw, np.uint8)
    step = np.isin(a, (ord("["), ord("{"))).astype(np.int64) - np.isin(a, (ord("]"), ord("}")))
    return int(step.cumsum().max(initial=0))


def loads_json(data: Union[bytes, str], where: str, depth: int = MAX_JSON_DEPTH,
               object_pairs_hook: Optional[Callable] = None) -> Any:
    """JSON text parsed, refused (naming ``where``) when it is not UTF-8, not JSON, or
    nested more than ``depth`` deep.

    Raises
    ------
    ValueError
        Not UTF-8, not JSON, too deep (a :class:`blockc.BlockcValueError`).
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise BlockcValueError(f"{where}: not valid JSON (not UTF-8: {e})") from None
    if json_depth(data) > depth:
        raise BlockcValueError(f"{where}: not valid JSON to blockc: nested more than {depth} deep")
    try:
        return json.loads(data, object_pairs_hook=object_pairs_hook)
    except RecursionError:  # not reached with the depth check; kept as a guard
        raise BlockcValueError(f"{where}: not valid JSON to blockc: nested too deep") from None
    except ValueError as e:
        raise BlockcValueError(f"{where}: not valid JSON: {e}") from None


def read_json(path: PathLike, what: str = "", limit: int = MAX_JSON_BYTES,
              depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value of the regular file ``path`` (at most ``limit`` bytes, ``depth`` deep).

    Raises
    ------
    ValueError
        Not a regular file, too large, not UTF-8, not JSON, too deep: each naming the file.
    OSError
        It cannot be opened (FileNotFoundError when it does not exist).
    """
    path = os.fspath(path)
    return loads_json(read_bytes(path, limit, what), path, depth)


def read_config(path: PathLike) -> dict:
    """A checkpoint's ``config.json`` (``path`` its directory or the file itself; any JSON
    object file, such as ``generation_config.json``) as a dict.

    Raises
    ------
    ValueError
        No such file, or not a JSON object (as :func:`read_json` refuses too), naming it.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:  # a regular file, bounded in size and depth (a FIFO or /dev/zero is refused)
        d = read_json(path, "a config.json")
    except FileNotFoundError:
        raise BlockcValueError(f"{path}: no such file (a checkpoint directory has a "
                               "config.json)") from None
    if not isinstance(d, dict):
        raise BlockcValueError(f"{path}: must hold a JSON object")
    return d


def check_output_file(path: PathLike, option: str) -> str:
    """``path`` as a file blockc may write: its directory exists and it is not a directory
    (checked before any work, so a bad path fails at once, not after it).

    Raises
    ------
    ValueError
        The path is a directory, or its directory does not exist.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise BlockcValueError(f"{option} {path}: is a directory, not a file to write")
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise BlockcValueError(f"{option} {path}: the directory {d} does not exist")
    if not os.access(d, os.W_OK):
        raise BlockcValueError(f"{option} {path}: the directory {d} is not writable")
    return path


def check_output_dir(path: PathLike, option: str) -> str:
    """``path`` as a directory blockc may create or replace: not an existing file, its
    parent directory exists and is writable.

    Raises
    ------
    ValueError
        The path is a file (or another non-directory), or its parent does not exist.
    """
    path = os.fspath(path)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise BlockcValueError(f"{option} {path}: exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise BlockcValueError(f"{option} {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise BlockcValueError(f"{option} {path}: the directory {parent} is not writable")
    return path
