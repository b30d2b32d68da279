"""bundler: move AI agents between installations without losing data or leaking credentials.

The names exported here are the supported Python API, written once, as :mod:`bundler.api`'s
``__all__``. They are imported on first use, so that ``bundler --help``, which imports this
package, loads none of the library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.3.0"

if TYPE_CHECKING:
    from bundler.api import *  # noqa: F403

    __all__: list[str]


def __getattr__(name: str) -> object:
    api = importlib.import_module("bundler.api")
    if name == "__all__":
        value: object = ["__version__", *api.__all__]
    elif name in api.__all__:
        value = getattr(api, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *importlib.import_module("bundler.api").__all__})
