"""Reading source files without ever raising on their content: JSON lines one
by one (a bad line is reported as ``file:line`` and skipped), a JSON export
as a file or inside a zip, and the paths a user names (files, directories,
globs) expanded to files; and a file reader's state carried from one part of
a growing file to the next.
"""

from __future__ import annotations

import glob
import json
import os
import zipfile
from collections.abc import Iterable, Iterator
from typing import Any

from .turns import Report


def expand(paths: list[str], defaults: tuple[str, ...], pattern: str) -> list[str]:
    """Files to read: each path as given (a directory: every file matching
    ``pattern`` below it; a glob: its matches); with no path, the ``defaults``
    globs (``~`` and environment variables expanded; one naming an unset
    variable is no place)."""
    found: list[str] = []
    if not paths:
        for default in defaults:
            where = os.path.expandvars(os.path.expanduser(default))
            if "$" not in where:
                found += sorted(glob.glob(where, recursive=True))
        return found
    for path in paths:
        path = os.path.expanduser(path)
        if os.path.isdir(path):
            found += sorted(glob.glob(os.path.join(path, "**", pattern), recursive=True))
        elif glob.has_magic(path):
            found += sorted(glob.glob(path, recursive=True))
        else:
            found.append(path)
    return list(dict.fromkeys(found))


def jsonl(path: str, report: Report) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each line that is a JSON object; the others are
    skipped and reported (blank lines silently)."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        report.skip(path, f"cannot read the file ({exc.strerror or type(exc).__name__})")
        return
    report.files += 1
    with fh:
        yield from objects(path, fh, report)


def objects(path: str, raws: Iterable[bytes], report: Report, first: int = 1) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`jsonl` of lines already read (``raws``, the first numbered ``first``)."""
    for number, raw in enumerate(raws, first):
        if not raw.strip():
            continue
        try:
            obj = _object(raw)
        except RecursionError:
            report.skip(f"{path}:{number}", "JSON nested too deeply")
            continue
        except ValueError:
            complete = raw.endswith(b"\n")
            report.skip(f"{path}:{number}", "not valid JSON" + ("" if complete else " (truncated last line)"))
            continue
        if not isinstance(obj, dict):
            report.skip(f"{path}:{number}", "not a JSON object")
            continue
        yield number, obj


_decode = json.JSONDecoder().decode


def _object(raw: bytes) -> Any:
    """``json.loads(raw)``: the usual line (``{`` then a byte that is not NUL,
    which ``json.loads`` takes for UTF-8) decoded as it decodes UTF-8, without
    its encoding sniffing."""
    if raw[:1] == b"{" and raw[1:2] != b"\x00":
        return _decode(raw.decode("utf-8", "surrogatepass"))
    return json.loads(raw)


def export_json(path: str, member: str, report: Report) -> Any:
    """The JSON document ``member`` (e.g. ``conversations.json``) of an export:
    ``path`` is that file or a zip holding it (anywhere inside); None, reported,
    when it cannot be read."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                names = [n for n in zf.namelist() if os.path.basename(n) == member]
                if not names:
                    report.skip(path, f"the zip holds no {member}")
                    return None
                data = zf.read(min(names, key=len))
        else:
            with open(path, "rb") as fh:
                data = fh.read()
    except (OSError, zipfile.BadZipFile, RuntimeError, NotImplementedError) as exc:
        report.skip(path, f"cannot read the file ({getattr(exc, 'strerror', None) or type(exc).__name__})")
        return None
    report.files += 1
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        report.skip(f"{path}:{member}" if zipfile.is_zipfile(path) else path, "not valid JSON")
        return None


def file_time(path: str) -> int:
    """The file's modification time in Unix milliseconds (for turns with no time at all)."""
    try:
        return int(os.path.getmtime(path) * 1000)
    except OSError:
        return 0


def conversations(files: list[str], report: Report) -> Iterator[tuple[str, dict[str, Any], int]]:
    """(where, conversation, the file's time) of every conversation object in
    the ``conversations.json`` of each export in ``files`` (a file or a zip); a file
    that is not a list, or an item that is not an object, is skipped and reported."""
    for path in files:
        data = export_json(path, "conversations.json", report)
        if data is None:
            continue
        if not isinstance(data, list):
            report.skip(path, "conversations.json is not a list of conversations")
            continue
        for number, conv in enumerate(data, 1):
            where = f"{path}:conversation {number}"
            if not isinstance(conv, dict):
                report.skip(where, "not a conversation object")
                continue
            yield where, conv, file_time(path)


def saved(reader: object, schema: dict[str, type | tuple[type, ...]]) -> dict[str, Any]:
    """The attributes of ``reader`` that ``schema`` names, to take up in a later part."""
    return {name: getattr(reader, name) for name in schema}


def restored(reader: object, schema: dict[str, type | tuple[type, ...]], state: dict[str, Any], kind: str) -> None:
    """Set the attributes of ``reader`` from ``state``, saved by :func:`saved` (ValueError
    naming ``kind``: not such a state)."""
    if set(state) != set(schema) or any(not isinstance(state[k], t) for k, t in schema.items()):
        raise ValueError(f"not the state of a {kind} reader")
    for name in schema:
        setattr(reader, name, state[name])
