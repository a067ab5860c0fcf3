# Shipped with stepwise: the lab puts this directory on PYTHONPATH of every process it runs on
# a node (see the stepwise_lab connection plugin).
"""A compiled-code cache for the Python code Ansible modules import from their zipped payload.

Every Ansible module run imports `ansible.module_utils.basic` and ~40 more files from the
AnsiballZ zip it was sent as, and `zipimport` cannot keep bytecode: each run compiles them
again (~0.1 s CPU of a ~0.25 s module run on the lab's machines, where a lab scenario runs
hundreds of module runs). Here a compiled module is kept in the machine's cache, keyed by the
interpreter's bytecode magic and the hash of the source, so the next run unmarshals it. The
code that runs is the same: only the compile is skipped. Nothing but zip-imported source is
touched, and any failure falls back to compiling.
"""

import hashlib
import marshal
import os
import zipimport

try:
    import _imp
    from importlib.util import MAGIC_NUMBER
except ImportError:  # pragma: no cover - not CPython
    _imp = None

_DIR = os.environ.get("STEPWISE_LAB_CODE_CACHE", "")
_compile_source = getattr(zipimport, "_compile_source", None)


def _cached_compile(pathname, source):
    key = hashlib.sha256(MAGIC_NUMBER + source).hexdigest()
    path = os.path.join(_DIR, key[:2], key)
    try:
        with open(path, "rb") as f:
            code = marshal.loads(f.read())
        _imp._fix_co_filename(code, pathname)
        return code
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = _compile_source(pathname, source)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(marshal.dumps(code))
        os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
    except OSError:
        pass
    return code


if _DIR and _imp is not None and _compile_source is not None:
    zipimport._compile_source = _cached_compile
