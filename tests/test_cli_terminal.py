"""Stored text on a terminal and in a pipe: the read commands show it, never
obey it (docs/cli.md, "Stored text is shown, never obeyed").

Rich markup in session ids and content is printed as written; control, bidi
and separator characters are escaped in every read command, on a real
terminal (a pty of a given width) and piped; piped output is one record per
line with exactly the documented fields; ``--json`` keeps the exact values;
ids are never cut in tables; ``sessions`` lists the most recent first;
``status`` on a damaged store says what to do.  A hypothesis property runs
every read command in this process (stdout a terminal or a pipe) for any
session id and content.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import tempfile
import termios
import tomllib
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import open_service, write
from test_reliability_corruption import make_store, put_raw

from server import cli
from server._terminal import visible
from tools import _proc

SGR = re.compile(r"\x1b\[[0-9;]*m")              # colours and bold: the layout's own escapes
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                    "\u200b-\u200d\u2060-\u2065\ufeff]")
RICH_ENV = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES", "TERM")
HOSTILE = ("deploy \x1b]0;pwned\x07 title \x1b[2J cleared \u202eevil\u202c nul\x00 end\ttab\r\nline2 \x9b31m"
           " zero\u200bwidth\u2060joined\ufeff")
HOSTILE_SESSION = "evil\x1b[31mred\ttab\nnl\u2066x"
FIELDS = {"sessions": ("session", "messages", "started", "last message", "summary"),
          "search": ("score", "when", "session", "role", "content", "message id"),
          "history": ("when", "role", "message id", "kind", "tags", "revision", "content")}


# ----------------------------------------------------------------- helpers
def on_terminal(*args: str, columns: int = 120) -> tuple[int, str, str]:
    """``convmem ARGS`` with stdout a pty ``columns`` wide: (exit code, what the
    terminal received, stderr).  Output processing is off (no CR added to LF)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    env = {k: v for k, v in os.environ.items() if k not in RICH_ENV}
    env.update(TERM="xterm-256color", COLUMNS=str(columns))
    received = bytearray()
    with subprocess.Popen(_proc.python("-m", "server.cli", *args), cwd=_proc.REPO, env=env,
                          stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE) as proc:
        os.close(slave)
        try:
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:                  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                received += chunk
        finally:
            os.close(master)
        err = proc.stderr.read().decode() if proc.stderr else ""
        code = proc.wait(timeout=60)
    return code, received.decode("utf-8", "replace"), err


def piped(*args: str) -> subprocess.CompletedProcess[str]:
    return _proc.run(_proc.python("-m", "server.cli", *args))


def shown(text: str) -> str:
    """What a terminal shows as text: the output without its colour and bold escapes."""
    return SGR.sub("", text)


def assert_only_layout_controls(output: str, layout: str = "\n") -> None:
    """No control, bidi or separator character but the ``layout``'s own (newline;
    tab when piped), and no escape sequence but SGR."""
    stray = [c for c in UNSAFE.findall(shown(output)) if c not in layout]
    assert not stray, f"raw {stray!r} in {output!r}"


def records(stdout: str, fields: tuple[str, ...]) -> list[list[str]]:
    """Piped output parsed back: a header line naming ``fields``, then records of exactly those fields."""
    lines = stdout.split("\n")
    assert lines.pop() == ""
    rows = [line.split("\t") for line in lines]
    assert rows[0] == list(fields), stdout
    assert all(len(row) == len(fields) for row in rows), stdout
    return rows[1:]


class Terminal(io.StringIO):
    """stdout that says it is a terminal (what rich and the commands look at)."""

    def isatty(self) -> bool:
        return True


def in_process(argv: list[str], terminal: bool) -> tuple[int, str]:
    out = Terminal() if terminal else io.StringIO()
    env = {k: v for k, v in os.environ.items() if k not in RICH_ENV}
    env.update(TERM="xterm-256color", COLUMNS="120")
    with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(argv)
    return code, out.getvalue()


def hostile_store(path: str) -> dict[str, str]:
    svc = open_service(path)
    try:
        return {"markup": write(svc, "[/bold] hello deploy", session="[/oops]"),
                "link": write(svc, "[link=http://evil.example]click[/link] deploy [red]red[/red]", session="p"),
                "tool": write(svc, '[tool_use Read] {"file": "a.py"} deploy', session="p"),
                "error": write(svc, "[error] deploy failed", session="p"),
                "control": write(svc, HOSTILE, session=HOSTILE_SESSION)}
    finally:
        svc.close()


# ------------------------------------------------------------------ markup
def test_rich_markup_in_session_ids_and_content_is_printed_as_written_on_a_terminal(store_path):
    hostile_store(store_path)
    link, tool = "[link=http://evil.example]click[/link] deploy [red]red[/red]", '[tool_use Read] {"file": "a.py"}'
    expected = {("sessions",): ("[/oops]", "[/bold] hello", "[error] deploy"),
                ("search", "deploy"): ("[/oops]", "[/bold] hello", link, tool, "[error] deploy"),
                ("history", "p"): (link, tool, "[error] deploy"),
                ("history", "[/oops]"): ("[/bold] hello",)}
    for command, texts in expected.items():
        code, out, err = on_terminal(*command, "--store", store_path, columns=220)
        assert code == 0 and "MarkupError" not in err and "Traceback" not in err, (command, err)
        assert "\x1b]8;" not in out, command                   # no OSC-8 hyperlink
        for text in texts:
            assert text in shown(out), (command, text, out)


# -------------------------------------------------------- control characters
def test_control_and_bidi_characters_are_escaped_by_every_read_command_on_a_terminal_and_piped(store_path):
    ids = hostile_store(store_path)
    commands = (["sessions"], ["search", "cleared"], ["history", HOSTILE_SESSION], ["show", ids["control"]],
                ["status"])
    for command in commands:
        code, out, err = on_terminal(*command, "--store", store_path)
        assert code == 0, (command, err)
        assert_only_layout_controls(out)
        done = piped(*command, "--store", store_path)
        assert done.returncode == 0, (command, done.stderr)
        assert_only_layout_controls(done.stdout, "\n\t")
        if command[0] != "status":
            for out_ in (shown(out), done.stdout):
                assert command[0] == "history" or visible(HOSTILE_SESSION) in out_, (command, out_)
                assert "\\x1b]0;pwned\\x07" in out_ and "\\x1b[2J" in out_ and "\\u202eevil" in out_, command
    assert "nul\\x00 end\\ttab\\r\\nline2 \\x9b31m zero\\u200bwidth\\u2060joined\\ufeff" in piped(
        "show", ids["control"], "--store", store_path).stdout


def test_piped_output_is_one_record_per_line_with_exactly_the_documented_fields(store_path):
    ids = hostile_store(store_path)
    sessions = records(piped("sessions", "--store", store_path).stdout, FIELDS["sessions"])
    assert HOSTILE_SESSION not in [row[0] for row in sessions]
    assert visible(HOSTILE_SESSION) in [row[0] for row in sessions]
    found = records(piped("search", "cleared", "--store", store_path).stdout, FIELDS["search"])
    assert [(row[2], row[5]) for row in found] == [(visible(HOSTILE_SESSION), ids["control"])]
    history = records(piped("history", HOSTILE_SESSION, "--store", store_path).stdout, FIELDS["history"])
    assert [(row[2], row[6]) for row in history] == [(ids["control"], visible(HOSTILE))]
    show = [line.split("\t") for line in piped("show", ids["control"], "--store", store_path).stdout.split("\n")[:-1]]
    assert all(len(line) == 2 for line in show)
    assert dict(show)["content"] == visible(HOSTILE) and dict(show)["session_id"] == visible(HOSTILE_SESSION)


def test_json_keeps_the_exact_values_and_writes_no_raw_bidi_or_c1_character(store_path):
    ids = hostile_store(store_path)
    for command, value in ((["show", ids["control"]], lambda j: j["message"]["content"]),
                           (["history", HOSTILE_SESSION], lambda j: j[0]["content"]),
                           (["sessions"], lambda j: next(s for s in j if s["session_id"] == HOSTILE_SESSION)[
                               "representative_summary"])):
        done = piped(*command, "--json", "--store", store_path)
        assert done.returncode == 0, done.stderr
        assert value(json.loads(done.stdout)) == HOSTILE
        assert not re.search("[\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200b\u2060\ufeff]", done.stdout), command


# -------------------------------------------------------------- whole ids
def test_ids_are_shown_whole_at_120_columns_in_a_table_or_as_labelled_lines(store_path):
    main = "claude-code:fe5e0b6c-1234-4abc-9def-0123456789ab"
    svc = open_service(store_path)
    try:
        made = [write(svc, f"deploy step {i} of the release, with words enough to need narrowing " * 2,
                      session=main if i % 2 else f"{main}/sidechain", role="assistant") for i in range(4)]
    finally:
        svc.close()
    for command in (["sessions"], ["search", "deploy"]):
        code, out, err = on_terminal(*command, "--store", store_path, columns=120)
        assert code == 0, err
        text = shown(out)
        for whole in [main, f"{main}/sidechain", *(made if command[0] == "search" else ())]:
            assert re.search(rf"(^|\s){re.escape(whole)}(\s|$)", text, re.M), (whole, out)
        if command[0] == "sessions":
            assert "┃ session" in text                     # still a table: the summary narrowed instead


def test_a_narrow_terminal_gets_labelled_lines_with_every_id_whole(store_path):
    session = "claude-code:fe5e0b6c-1234-4abc-9def-0123456789ab/agent-1234567890"
    svc = open_service(store_path)
    try:
        mid = write(svc, "deploy on tuesday", session=session)
    finally:
        svc.close()
    code, out, _ = on_terminal("search", "deploy", "--store", store_path, columns=60)
    assert code == 0
    assert f"session: {session}\n" in shown(out) and f"message id: {mid}\n" in shown(out)


# ----------------------------------------------------------------- sessions
def test_sessions_lists_the_most_recently_active_first_in_every_output(store_path):
    svc = open_service(store_path)
    try:
        for session in ("a", "b", "c", "a"):
            write(svc, f"message in {session}", session=session)
    finally:
        svc.close()
    assert [row[0] for row in records(piped("sessions", "--store", store_path).stdout, FIELDS["sessions"])] \
        == ["a", "c", "b"]
    assert [s["session_id"] for s in json.loads(piped("sessions", "--json", "--store", store_path).stdout)] \
        == ["a", "c", "b"]
    order = shown(on_terminal("sessions", "--store", store_path)[1])
    assert order.index(" a ") < order.index(" c ") < order.index(" b ")


# ------------------------------------------------------------------- status
def test_status_on_a_damaged_store_says_what_to_do(store_path):
    make_store(store_path)
    put_raw(store_path, b"meta", b"format_version", (3).to_bytes(8, "big"))
    done = piped("status", "--store", store_path)
    assert done.returncode == 2 and "CORRUPT_STORE" in done.stderr and "Traceback" not in done.stderr
    assert "CORRUPT_STORE" in done.stdout and "`convmem replay`" in done.stdout and "backup" in done.stdout


# ---------------------------------------------------------------- packaging
def test_the_wheel_holds_every_package_of_the_tree():
    """A package missing from the wheel breaks `pipx install .` (README): the
    packaging must find every directory with an ``__init__.py``."""
    import setuptools

    with open(os.path.join(_proc.REPO, "pyproject.toml"), "rb") as fh:
        config = tomllib.load(fh)["tool"]["setuptools"]
    if "packages" in config and isinstance(config["packages"], list):
        listed = set(config["packages"])
    else:
        find = config["packages"]["find"]
        listed = set(setuptools.find_packages(_proc.REPO, include=find.get("include", ("*",)),
                                              exclude=find.get("exclude", ())))
    tree = {os.path.relpath(folder, _proc.REPO).replace(os.sep, ".")
            for top in ("eventstore", "projections", "server", "tools")
            for folder, _, files in os.walk(os.path.join(_proc.REPO, top)) if "__init__.py" in files}
    assert tree <= listed, sorted(tree - listed)


# ----------------------------------------------------------------- property
FRAGMENTS = ("[", "]", "[/", "[bold]", "[/bold]", "[link=http://e.x]", "\x1b", "\x1b[2J", "\x1b]0;t\x07", "\x9b",
             "\x85", "\t", "\n", "\r", "\x7f", "\u202e", "\u2066", "\u200f", "\u061c", "\u2028", "\\", "\\x1b",
             ":smile:", " ", "会話", "é")
pieces = st.one_of(st.sampled_from(FRAGMENTS), st.text(st.characters(exclude_categories=("Cs",)), max_size=3))
session_ids = st.lists(pieces, min_size=1, max_size=8).map("".join).map(lambda s: s.replace("\x00", "")).filter(
    lambda s: 1 <= len(s.encode()) <= 256)
contents = st.lists(pieces, max_size=10).map("".join)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session=session_ids, before=contents, after=contents)
def test_any_stored_session_id_and_content_is_shown_escaped_and_parses_back_into_its_fields(session, before, after):
    content = f"{before} zqmarkerx {after}"
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        svc = open_service(store)
        try:
            mid = write(svc, content, session=session)
        finally:
            svc.close()
        commands = {"sessions": ["sessions"], "search": ["search", "zqmarkerx"], "history": ["history", session],
                    "show": ["show", mid], "log": ["log"]}
        for name, argv in commands.items():
            for terminal in (True, False):
                code, out = in_process([*argv, "--store", store], terminal)
                assert code == 0, (name, terminal)
                assert_only_layout_controls(out, "\n" if terminal else "\n\t")
                if terminal and name not in ("history", "log"):      # (log wraps a long session id)
                    assert visible(session) in shown(out), (name, out)
                if terminal:
                    continue
                if name == "log":
                    rows = [line.split("\t") for line in out.split("\n")[:-1]]
                    assert rows[0] == ["SEQ", "TIME", "PRINCIPAL", "EVENT", "MESSAGE", "SESSION", "CHANGED"], out
                    assert [(r[4], r[5]) for r in rows[1:]] == [(mid, visible(session))], out
                    continue
                if name == "show":
                    fields = dict(line.split("\t") for line in out.split("\n")[:-1])
                    assert fields["session_id"] == visible(session) and fields["content"] == visible(content)
                    continue
                rows = records(out, FIELDS[name])
                if name == "history":
                    assert [(r[2], r[6]) for r in rows] == [(mid, visible(content))]
                else:
                    assert [r[2 if name == "search" else 0] for r in rows] == [visible(session)]


def test_the_terminal_and_the_browser_pages_escape_the_same_characters_but_tab_and_newline():
    from server._terminal import json_visible
    from server.ui.text import visible as badged
    for code in range(0x110000):
        char = chr(code)
        if 0xD800 <= code <= 0xDFFF or char in "<>&'\"":
            continue
        on_terminal = visible(char) != char
        assert on_terminal == (char in "\t\n" or str(badged(char)) != char), f"U+{code:04X}"
        assert (json_visible(char) != char) == (on_terminal and code > 0x1f), f"U+{code:04X}"
    for char in "\u200b\u200c\u200d\u2060\ufeff":
        assert visible(char) == f"\\u{ord(char):04x}" and f">U+{ord(char):04X}<" in badged(char)
