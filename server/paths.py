"""Where the store is when no ``--store`` is given (standard library only:
the hook imports it at start)."""

from __future__ import annotations

import os


def default_store_path() -> str:
    env = os.environ.get("CONVMEM_STORE")
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "convmem")
