"""TOML configuration files (``dpreg run --config``, ``dpreg sweep``): read
with tomllib (tomli before Python 3.11), a UTF-8 byte-order mark ignored (as
Windows editors write one), every failure one line."""
from __future__ import annotations

from .errors import DpregError

BOM = b"\xef\xbb\xbf"


def read_toml(path: str) -> dict:
    """The parsed TOML file at ``path``; DpregError (one line) when it cannot
    be read, is not UTF-8 or is not valid TOML."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise DpregError(f"cannot read {path}: {exc.strerror or exc}") from None
    if raw.startswith(BOM):
        raw = raw[len(BOM):]
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DpregError(f"{path} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except tomllib.TOMLDecodeError as exc:
        raise DpregError(f"{path} is not valid TOML: {str(exc).splitlines()[0]}") from None
