"""The browser pages over HTTP (``/ui/``), against a real ``convmem serve --http``
child: sign-in and what a page without it shows, the Host/Origin rules, the
headers, stored text shown and never obeyed, the search form's filters, and a
delete that only a confirmed POST with the cookie and the CSRF token makes.
tests/test_ui_browser.py does the same things in a real browser."""

from __future__ import annotations

import contextlib
import html.parser
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx2
import pytest

from eventstore.events import Metadata
from server.service import MemoryService
from server.ui import chart, text
from server.ui.signin import LIFETIME, Signer
from tools._proc import python, start, stop
from tools.mcp_client import HttpServer, http_server

CANARY = "canary-5d1e"                           # in stored text: never on a page without the cookie
SESSION = f"proj/{CANARY} a?b#c%d"               # needs every kind of percent-encoding
XSS_SESSION = "<img src=x onerror=window.__pwned=4>"
PAYLOADS = (
    "<script>window.__pwned=1</script>",
    '<img src=x onerror="window.__pwned=2">',
    "javascript:window.__pwned=3",
    "[click me](javascript:window.__pwned=5)",
    "</textarea><script>window.__pwned=6</script>",
    "</details></li></ol><script>window.__pwned=7</script>",
    "\u202eexe.txt",                             # a right-to-left override
    "zero\u200bwidth and a bell \x07",
)
INVISIBLE = re.compile("[\u202e\u200b\x07]")


class Elements(html.parser.HTMLParser):
    """Every start tag of a page, with its attributes, as a browser's tokenizer sees them."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append((tag, dict(attrs)))


def assert_inert(page: str, url: str) -> None:
    """No element, attribute or link on ``page`` came from stored text: only our own script,
    no ``img``, no event handler attribute, every link a path of these pages."""
    tags = Elements(page).tags
    assert [a.get("src") for t, a in tags if t == "script"] == ["/ui/static/ui.js"], url
    assert not [t for t, _ in tags if t in ("img", "iframe", "object", "embed", "textarea", "base")], url
    assert not [(t, k) for t, a in tags for k in a if k.startswith("on")], url
    links = [a[k] or "" for t, a in tags for k in ("href", "src", "action") if k in a]
    assert all(link.startswith("/ui/") for link in links), (url, links)
    assert not INVISIBLE.search(page), url


@dataclass
class Seeded:
    """What :func:`seed` wrote: the ids the tests look for."""

    deploy: str          # user: "Deploys go out on Tuesdays"
    tool: str            # a folded tool call, depends_on → deploy
    memory: str          # a semantic memory, importance 80, tier long
    xss: str             # every payload, in content, summary and tags
    xss_session: str     # a message in a session whose id is a payload
    doomed: str          # for the delete tests
    spared: str          # for the GET-never-deletes test


def seed(path: str) -> Seeded:
    svc = MemoryService(path)
    try:
        write = lambda sid, role, content, **meta: svc.write_message(sid, role, content, Metadata(**meta))[
            "message"]["message_id"]
        deploy = write(SESSION, "user", f"Deploys go out on Tuesdays ({CANARY})", tags=("ops",))
        tool = write(SESSION, "assistant", "[tool_use Bash]\n{\"command\": \"make deploy\"}", tool_call_id="call-1",
                     tags=("tool_use", "tool:Bash"), relations=(("depends_on", deploy),))
        memory = write(SESSION, "assistant", "Deploy freeze on Fridays", memory_kind="semantic",
                       memory_tier="long", importance=80)
        xss = write(SESSION, "user", "payloads: " + "\n".join(PAYLOADS), summary=PAYLOADS[1],
                    tags=("<b>tag</b>", "\u202eevil"))
        other = write(XSS_SESSION, "user", "a message in a session named like markup")
        doomed = write(SESSION, "user", "Delete me after confirming")
        spared = write(SESSION, "user", "A GET must not delete me")
        return Seeded(deploy, tool, memory, xss, other, doomed, spared)
    finally:
        svc.close()


class Pages:
    """An HTTP client for the pages, signed in (or not) like a browser."""

    def __init__(self, server) -> None:
        self.server = server
        self.base = server.url.rsplit("/mcp", 1)[0]
        self.client = httpx2.Client(base_url=self.base, follow_redirects=False, timeout=60)

    def close(self) -> None:
        self.client.close()

    def sign_in(self, token: str | None = None) -> httpx2.Response:
        return self.post("/ui/signin", {"token": token or self.server.token, "next": "/ui/"})

    def get(self, url: str, **options) -> httpx2.Response:
        return self.client.get(url, **options)

    def post(self, url: str, data: dict, *, origin: str | None = "") -> httpx2.Response:
        headers = {} if origin is None else {"Origin": origin or self.base}
        return self.client.post(url, data=data, headers=headers)

    def csrf(self, url: str) -> str:
        match = re.search(r'name="csrf" value="([^"]+)"', self.get(url).text)
        assert match, f"no CSRF token on {url}"
        return match.group(1)


@contextlib.contextmanager
def seeded_server(path: str) -> Iterator[tuple[HttpServer, Seeded]]:
    """A server on a store :func:`seed` wrote at ``path``, and what it wrote; once the
    server stopped, its log holds no traceback."""
    ids = seed(path)
    with http_server(path) as server:
        yield server, ids
    assert "Traceback" not in "".join(server.lines), "".join(server.lines)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with seeded_server(str(tmp_path_factory.mktemp("ui") / "store")) as (server, ids):
        yield server, ids
    assert server.token not in "".join(server.lines)


@pytest.fixture
def pages(served):
    with contextlib.closing(Pages(served[0])) as client:
        yield client


@pytest.fixture
def ids(served) -> Seeded:
    return served[1]


@pytest.fixture
def signed_in(pages) -> Pages:
    assert pages.sign_in().status_code == 303
    return pages


def urls(ids: Seeded) -> list[str]:
    return ["/ui/", f"/ui/sessions/{text.segment(SESSION)}", f"/ui/search?q={CANARY}", f"/ui/messages/{ids.deploy}",
            f"/ui/messages/{ids.deploy}/delete", "/ui/health", f"/ui/sessions/{text.segment(XSS_SESSION)}"]


# ------------------------------------------------------------------ signing in
def test_without_the_cookie_every_page_is_the_sign_in_page_and_shows_no_stored_text(pages, ids):
    for url in urls(ids):
        answer = pages.get(url)
        assert answer.status_code == 401, url
        assert 'action="/ui/signin"' in answer.text
        page = re.sub(r'name="next" value="[^"]*"', "", answer.text)      # the URL asked for, to return to
        assert CANARY not in page
        assert "Tuesdays" not in answer.text and "Deploy" not in answer.text
        assert 'id="signout"' not in answer.text
        assert "script-src 'self'" in answer.headers["content-security-policy"]


def test_a_wrong_token_is_refused_and_sets_no_cookie(pages, ids):
    answer = pages.sign_in("wrong-token-0123456789abcdef")
    assert answer.status_code == 401 and "set-cookie" not in answer.headers
    assert pages.get("/ui/").status_code == 401


def test_signing_in_sets_an_httponly_samesite_strict_cookie_that_is_not_the_token(pages):
    answer = pages.sign_in()
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert pages.server.token not in cookie
    assert "Tuesdays" in pages.get(f"/ui/sessions/{text.segment(SESSION)}").text


def test_sign_in_returns_to_the_page_asked_for_but_never_to_another_site(pages, ids):
    for target, expected in ((f"/ui/messages/{ids.deploy}", f"/ui/messages/{ids.deploy}"),
                             ("https://evil.example/", "/ui/"), ("//evil.example/ui/", "/ui/"),
                             ("/mcp", "/ui/")):
        answer = pages.post("/ui/signin", {"token": pages.server.token, "next": target})
        assert answer.headers["location"] == expected


def test_signing_out_needs_the_csrf_token_and_clears_the_cookie(signed_in):
    assert signed_in.post("/ui/signout", {"csrf": "forged"}).status_code == 403
    assert signed_in.get("/ui/").status_code == 200
    answer = signed_in.post("/ui/signout", {"csrf": signed_in.csrf("/ui/")})
    assert answer.status_code == 303
    assert 'convmem_ui=""' in answer.headers["set-cookie"] or "Max-Age=0" in answer.headers["set-cookie"]
    assert signed_in.get("/ui/").status_code == 401


def test_a_cookie_is_valid_for_its_lifetime_only_and_only_under_the_key_that_signed_it():
    signer = Signer("token-0123456789abcdef")
    cookie = signer.issue("default", 1_000_000)
    assert signer.subject(cookie, 1_000_000 + LIFETIME) == "default"
    assert signer.subject(cookie, 1_000_000 + LIFETIME + 1) is None
    assert Signer("other-token-0123456789").subject(cookie, 1_000_000) is None
    issued, subject, nonce, mac = cookie.split(".")
    assert signer.subject(f"{int(issued) + 1}.{subject}.{nonce}.{mac}", 1_000_000) is None
    assert signer.subject(f"{issued}.id:0123456789ab.{nonce}.{mac}", 1_000_000) is None
    assert signer.subject(None, 1_000_000) is None and signer.subject("a.b.c", 1_000_000) is None
    assert signer.csrf_matches(cookie, signer.csrf(cookie)) and not signer.csrf_matches(cookie, signer.csrf("x.y.z"))


def test_a_named_token_signs_in_with_its_scope_read_only_limit_and_revocation(tmp_path):
    from server import tokens
    path = str(tmp_path / "store")
    ids = seed(path)
    scoped = tokens.add(tokens.default_path(path), "agent-a", sessions=("proj/*",))
    reader = tokens.add(tokens.default_path(path), "reader", read_only=True)
    with http_server(path) as server:
        a, r = Pages(server), Pages(server)
        try:
            assert a.sign_in(scoped).status_code == 303 and r.sign_in(reader).status_code == 303
            assert scoped not in a.client.cookies.get("convmem_ui", "")
            listing = a.get("/ui/").text
            assert "agent-a" in listing and text.segment(SESSION) in listing
            assert text.segment(XSS_SESSION) not in listing                   # outside proj/*
            assert a.get(f"/ui/messages/{ids.xss_session}").status_code == 404
            assert a.get("/ui/search", params={"q": "markup"}).text.count('class="msg') == 0
            assert r.get("/ui/search", params={"q": "markup"}).text.count('class="msg') == 1
            assert a.get("/ui/health").status_code == 400                     # whole-store counts
            url = f"/ui/messages/{ids.spared}/delete"
            answer = r.post(url, {"csrf": r.csrf(url), "session_id": SESSION})
            assert answer.status_code == 400 and "read-only" in answer.text
            assert r.get(f"/ui/messages/{ids.spared}").status_code == 200
            tokens.revoke(tokens.default_path(path), "agent-a")
            assert a.get("/ui/").status_code == 401                           # at the next request
            assert r.get("/ui/").status_code == 200
        finally:
            a.close()
            r.close()


# -------------------------------------------------- provenance and scope on a page
OUTSIDE = "outside-7f3a"                         # text of messages outside agent-a's scope
ODD_PRINCIPAL = "import:<b>src</b>\u202e"        # a principal name with markup and a bidi override


@dataclass
class Shared:
    """A server with named tokens, and what they wrote: ``revised`` written by agent-a and
    updated by agent-b; ``outside`` in a session agent-a's scope leaves out, related both ways
    to ``inside``; ``imported`` written by :data:`ODD_PRINCIPAL`."""

    server: object
    tokens: dict[str, str]
    revised: str
    inside: str
    outside: str
    imported: str


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    import asyncio

    from server import tokens
    from server.principals import Principal
    from tools.mcp_client import connect_http, ok
    path = str(tmp_path_factory.mktemp("ui-shared") / "store")
    svc = MemoryService(path)
    try:
        write = lambda sid, content, **options: svc.write_message(sid, "user", content, Metadata(), **options)[
            "message"]["message_id"]
        outside = write("other/secret", f"Deploy keys live in the vault ({OUTSIDE})")
        inside = svc.write_message("proj/a", "user", "Deploy from the release branch", Metadata(
            relations=(("related_to", outside),)))["message"]["message_id"]
        svc.update_message(outside, None, {"relations": (("related_to", inside),)}, None)
        imported = write("proj/a", "Imported deploy notes", principal=Principal(ODD_PRINCIPAL))
    finally:
        svc.close()
    made = {"agent-a": tokens.add(tokens.default_path(path), "agent-a", sessions=("proj/*",)),
            "agent-b": tokens.add(tokens.default_path(path), "agent-b")}

    async def write_then_update(url: str) -> str:
        async with connect_http(url, made["agent-a"]) as a:
            written = await ok(a, "write_message", {"session_id": "proj/a", "role": "user",
                                                    "content": "Deploys go out on Mondays"})
        mid = written["message"]["message_id"]
        async with connect_http(url, made["agent-b"]) as b:
            await ok(b, "update_message", {"message_id": mid, "content": "Deploys go out on Tuesdays",
                                           "metadata_json": json.dumps({"tags": ["ops"]})})
        return mid

    with http_server(path) as server:
        revised = asyncio.run(write_then_update(server.url))
        yield Shared(server, made, revised, inside, outside, imported)


def revision_rows(page: str) -> list[tuple[str, ...]]:
    """(revision, principal, what changed) of each row of a message page's revisions table."""
    table = re.search(r'<table class="revisions">(.*?)</table>', page, re.S)
    assert table, "no revisions table"
    cells = lambda row: tuple(re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S))
    return [(c[0], c[2], c[3]) for c in map(cells, re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)) if c]


def test_a_message_page_lists_its_revisions_oldest_first_with_who_made_each_and_what_changed(shared):
    pages = Pages(shared.server)
    try:
        assert pages.sign_in().status_code == 303
        page = pages.get(f"/ui/messages/{shared.revised}").text
        assert revision_rows(page) == [("1", "agent-a", "created"), ("2", "agent-b", "content, tags")]
        assert re.search(r'id="written-by"><span class="principal">agent-a</span>', page)
        assert "Tuesdays" in page and "Mondays" not in page            # the current text only
        page = pages.get(f"/ui/messages/{shared.imported}").text
        assert_inert(page, "imported")
        assert "import:&lt;b&gt;src&lt;/b&gt;" in page and "<b>src" not in page and ">U+202E<" in page
        assert revision_rows(page)[0][2] == "created"
    finally:
        pages.close()


def test_after_a_compaction_a_message_page_says_who_wrote_the_first_revision_is_not_kept(store_path):
    from server.app import AppState
    from server.principals import Principal
    from server.ui import pages
    from server.ui.app import environment
    from server.ui.reader import Reader
    svc = MemoryService(store_path)
    try:
        mid = svc.write_message("s", "user", "first", Metadata(), principal=Principal("agent-a"))["message"][
            "message_id"]
        svc.update_message(mid, "second", {}, None, principal=Principal("agent-b"))
        svc.rebuild()
        page = pages.message(Reader(AppState(svc, None, None, None), Principal("agent-c")), mid)
        html = environment().get_template(page.template).render(**page.values, principal="agent-c", signed_in=True,
                                                                path="/ui/", csrf="")
    finally:
        svc.close()
    assert revision_rows(html) == [("2", "agent-b", "rewritten")]
    assert "not kept (revisions before 2 were dropped" in html and "agent-a" not in html


def test_a_session_limited_token_sees_on_the_pages_only_its_sessions_and_nothing_outside(shared):
    a = Pages(shared.server)
    try:
        assert a.sign_in(shared.tokens["agent-a"]).status_code == 303
        listing = a.get("/ui/").text
        assert text.segment("proj/a") in listing and "other" not in listing and OUTSIDE not in listing
        answer = a.get(f"/ui/messages/{shared.outside}")
        assert answer.status_code == 404 and "NOT_FOUND" in answer.text
        assert 'action="/ui/signin"' not in answer.text                  # the error page, signed in
        assert OUTSIDE not in answer.text and "vault" not in answer.text and "other/secret" not in answer.text
        page = a.get(f"/ui/messages/{shared.inside}").text                # related both ways to outside
        assert "release branch" in page and shared.outside not in page and OUTSIDE not in page
        assert revision_rows(page) == [("1", "local", "created")]
        results = a.get("/ui/search", params={"q": "deploy"}).text
        assert "release branch" in results and "Tuesdays" in results
        assert OUTSIDE not in results and "vault" not in results and shared.outside not in results
        assert a.get(f"/ui/messages/{shared.outside}/delete").status_code == 404
        assert a.get("/ui/sessions/other%2Fsecret").status_code == 404
    finally:
        a.close()
    full = Pages(shared.server)                                           # the same pages see it all
    try:
        assert full.sign_in(shared.tokens["agent-b"]).status_code == 303
        assert "vault" in full.get("/ui/search", params={"q": "deploy"}).text
        assert shared.outside in full.get(f"/ui/messages/{shared.inside}").text
    finally:
        full.close()


# -------------------------------------------------------- Host, Origin, headers
def test_a_foreign_host_or_origin_is_refused_as_on_mcp(signed_in, ids):
    for url in urls(ids)[:2] + ["/ui/signin"]:
        assert signed_in.get(url, headers={"Host": "evil.example"}).status_code == 421
        assert signed_in.get(url, headers={"Origin": "https://evil.example"}).status_code == 403
    answer = signed_in.post("/ui/signin", {"token": signed_in.server.token}, origin="https://evil.example")
    assert answer.status_code == 403 and "set-cookie" not in answer.headers


def test_every_page_forbids_inline_script_framing_and_sniffing(signed_in, ids):
    for url in urls(ids) + ["/ui/search"]:
        answer = signed_in.get(url)
        csp = answer.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert "frame-ancestors 'none'" in csp
        scripts = re.findall(r"<script[^>]*>", answer.text)
        assert scripts == ['<script src="/ui/static/ui.js" defer>'], url
    assert signed_in.get("/ui/static/ui.js").headers["content-type"].startswith("text/javascript")
    assert signed_in.get("/ui/static/../app.py").status_code == 404


# ------------------------------------------------------------ stored text shown
def test_stored_markup_bidi_and_control_characters_are_shown_never_obeyed(signed_in, ids):
    for url in [f"/ui/sessions/{text.segment(SESSION)}", f"/ui/messages/{ids.xss}", "/ui/search?q=payloads",
                "/ui/", f"/ui/sessions/{text.segment(XSS_SESSION)}", f"/ui/messages/{ids.xss_session}",
                f"/ui/messages/{ids.xss}/delete"]:
        assert_inert(signed_in.get(url).text, url)
    page = signed_in.get(f"/ui/messages/{ids.xss}").text
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page
    assert "&lt;/textarea&gt;" in page and "javascript:window.__pwned=3" in page
    assert ">U+202E<" in page and ">U+200B<" in page and ">U+0007<" in page


def test_session_ids_are_percent_encoded_in_links_slashes_included(signed_in):
    page = signed_in.get("/ui/").text
    assert f'href="/ui/sessions/{text.segment(SESSION)}"' in page
    assert text.segment(SESSION) == "proj%2Fcanary-5d1e%20a%3Fb%23c%25d"
    assert "Tuesdays" in signed_in.get(f"/ui/sessions/{text.segment(SESSION)}").text
    assert signed_in.get("/ui/sessions/no-such-session").status_code == 404


# ------------------------------------------------------------------ the pages
def test_the_timeline_folds_tool_calls_and_links_relations(signed_in, ids):
    page = signed_in.get(f"/ui/sessions/{text.segment(SESSION)}").text
    folded = re.search(r"<details class=\"tool\">\s*<summary>(.*?)</summary>", page, re.S)
    assert folded and "[tool_use Bash]" in folded.group(1)
    assert f'href="/ui/messages/{ids.deploy}"' in page            # the tool call's depends_on
    assert page.index("Tuesdays") < page.index("tool_use Bash") < page.index("Deploy freeze")


def test_a_message_page_shows_metadata_relations_both_ways_and_context(signed_in, ids):
    page = signed_in.get(f"/ui/messages/{ids.deploy}").text
    assert f'href="/ui/messages/{ids.tool}"' in page and "depends_on" in page     # incoming
    assert "make deploy" in page                                                 # its context after it
    page = signed_in.get(f"/ui/messages/{ids.tool}").text
    assert f'href="/ui/messages/{ids.deploy}"' in page and "call-1" in page      # outgoing, tool call id
    assert signed_in.get("/ui/messages/not-an-id").status_code == 400
    assert signed_in.get("/ui/messages/01ARZ3NDEKTSV4RRFFQ69G5FAV").status_code == 404


def test_search_marks_the_words_and_applies_the_filters(signed_in, ids):
    page = signed_in.get("/ui/search", params={"q": "deploy"}).text
    assert "<mark>Deploys</mark>" in page and "<mark>Deploy</mark> freeze" in page
    page = signed_in.get("/ui/search", params={"q": "deploy", "kind": "semantic"}).text
    assert "Deploy</mark> freeze" in page and "Tuesdays" not in page
    assert 'value="semantic" checked' in page
    page = signed_in.get("/ui/search", params={"q": "deploy", "min_importance": "50", "tier": "long"}).text
    assert "freeze" in page and "Tuesdays" not in page
    page = signed_in.get("/ui/search", params={"q": "deploy", "role": "user", "tags": "ops"}).text
    assert "Tuesdays" in page and "freeze" not in page
    page = signed_in.get("/ui/search", params={"q": "deploy", "before": "2000-01-01"}).text
    assert "0 results" in page
    answer = signed_in.get("/ui/search", params={"q": "deploy", "after": "yesterday"})
    assert answer.status_code == 400 and "after: must be a date" in answer.text
    answer = signed_in.get("/ui/search", params={"q": "deploy", "kind": "nonsense"})
    assert answer.status_code == 400 and "kinds" in answer.text


def test_the_health_page_draws_messages_per_day_as_svg(signed_in):
    page = signed_in.get("/ui/health").text
    bars = re.findall(r'<rect class="bar" [^>]*height="([0-9.]+)"><title>([0-9-]+): (\d+)</title>', page)
    assert len(bars) == chart.DAYS and "active_messages" in page
    assert float(bars[-1][0]) == chart.HEIGHT and int(bars[-1][2]) >= 6
    assert all(float(h) == 0 for h, _, _ in bars[:-1])
    drawn = chart.bars({19_000: 4, 19_002: 1}, days=5)
    assert drawn is not None and [b.count for b in drawn.bars] == [0, 0, 4, 0, 1] and drawn.peak == 4
    assert (drawn.first, drawn.last, drawn.older) == ("2022-01-06", "2022-01-10", 0)
    assert drawn.bars[2].height == chart.HEIGHT and drawn.bars[3].height == 0
    drawn = chart.bars({19_000: 4, 19_002: 1, 18_000: 7}, older=2)      # 18000 is before the last 90 days
    assert drawn is not None and len(drawn.bars) == chart.DAYS and drawn.older == 9 and drawn.shown == 5


def test_messages_per_day_counts_live_messages_by_the_day_of_their_id_within_the_window(store_path):
    from helpers import Clock
    from strategies import open_service
    from strategies import write as write_one
    day = 86_400_000
    clock = Clock(now=20_000 * day + 5)
    svc = open_service(store_path, clock=clock)
    try:
        assert svc.written_per_day(90) == ({}, 0)
        for at, n in ((19_000, 2), (19_950, 3), (19_999, 1), (20_000, 4)):
            clock.now = at * day + 1000
            ids = [write_one(svc, f"m{at}-{i}") for i in range(n)]
        svc.delete_message(ids[0], None)                      # one of day 20000's: no longer counted
        assert svc.written_per_day(90) == ({19_950: 3, 19_999: 1, 20_000: 3}, 2)
        assert svc.written_per_day(1) == ({20_000: 3}, 6)
        assert svc.written_per_day(2000) == ({19_000: 2, 19_950: 3, 19_999: 1, 20_000: 3}, 0)
    finally:
        svc.close()


# ------------------------------------------------------------------- deleting
def test_a_get_never_deletes_and_the_first_click_only_asks(signed_in, ids):
    url = f"/ui/messages/{ids.spared}/delete"
    for _ in range(2):
        page = signed_in.get(url)
        assert page.status_code == 200 and "Delete this message?" in page.text
    assert signed_in.get(f"/ui/messages/{ids.spared}").status_code == 200


def test_a_delete_needs_the_cookie_the_csrf_token_and_a_same_origin_form(signed_in, ids, served):
    url = f"/ui/messages/{ids.doomed}/delete"
    csrf = signed_in.csrf(url)
    form = {"csrf": csrf, "session_id": SESSION}
    assert signed_in.post(url, {**form, "csrf": "forged"}).status_code == 403
    assert signed_in.post(url, form, origin=None).status_code == 403
    assert signed_in.post(url, form, origin="https://evil.example").status_code == 403
    stranger = Pages(served[0])
    assert stranger.post(url, form).status_code == 401
    stranger.close()
    assert signed_in.get(f"/ui/messages/{ids.doomed}").status_code == 200         # still there
    answer = signed_in.post(url, form)
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/ui/sessions/{text.segment(SESSION)}?deleted={ids.doomed}"
    assert signed_in.get(f"/ui/messages/{ids.doomed}").status_code == 404
    assert "was deleted" in signed_in.get(answer.headers["location"]).text
    assert signed_in.post(url, form).status_code == 404


# ------------------------------------------------------------- import weight
def test_serving_over_stdio_does_not_import_jinja2_but_http_does(tmp_path):
    calls = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search_messages",
                                                                       "arguments": {"query": "x"}}}]
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "server.cli", "serve", "--store",
                           str(tmp_path / "s")], input="".join(json.dumps(c) + "\n" for c in calls),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"id":2' in done.stdout
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "server.app" in imported and "projections.search" in imported
    assert not {m for m in imported if m.startswith(("jinja2", "server.ui"))}
    code = ("import sys; from server.http_transport import HttpSettings, build_app; "
            f"build_app({str(tmp_path / 's')!r}, HttpSettings()); print('jinja2' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr[-2000:]


# ----------------------------------------------------------------- convmem ui
def test_convmem_ui_prints_the_url_of_pages_on_loopback(tmp_path):
    path = str(tmp_path / "store")
    seed(path)
    proc = start([*python("-m", "server.cli", "ui", "--store", path)], stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True, env={"CONVMEM_TOKEN": "ui-test-token-0123456789"})
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/ui/", url), url
        assert httpx2.get(url, timeout=60).status_code == 401
    finally:
        stop(proc)
    missing = subprocess.run(python("-m", "server.cli", "ui", "--store", str(tmp_path / "none")),
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "no store at" in missing.stderr
