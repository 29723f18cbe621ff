"""The browser pages in a real browser: Debian's Chromium, headless, driven by Playwright.

Sign in, browse, search with a filter, follow a relation, delete with
confirmation, sign out; stored markup, script and bidi overrides stay inert
text; a page without the cookie shows no stored text.  A screenshot of each
page goes to ``.cache/ui-screenshots/`` (git-ignored; ``$CONVMEM_SCREENSHOTS``
to put them elsewhere).

Playwright drives the system's browser (``executable_path``); it never
downloads one.  Without Chromium (or Playwright) the test is skipped with the
reason — except where ``CONVMEM_REQUIRE_BROWSER=1`` (``.ci/run`` sets it),
where it fails: CI must never pass without having run it.
"""

from __future__ import annotations

import os
import shutil

import pytest
from test_ui import CANARY, SESSION, XSS_SESSION, seeded_server

from server.ui import text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = os.environ.get("CONVMEM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = os.environ.get("CONVMEM_SCREENSHOTS") or os.path.join(ROOT, ".cache", "ui-screenshots")
TIMEOUT_MS = 60_000


def _unavailable(reason: str):
    if os.environ.get("CONVMEM_REQUIRE_BROWSER") == "1":
        pytest.fail(f"CONVMEM_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(f"{reason} (set CONVMEM_REQUIRE_BROWSER=1 to make this a failure)")


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright is not installed (pip install -e '.[test]')")
    if not os.path.exists(CHROMIUM):
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    with seeded_server(str(tmp_path_factory.mktemp("ui-browser") / "store")) as (server, ids):
        yield server, ids


class Visit:
    """One browser context (its own cookies) on the site, noting what must never happen:
    a dialog, a page error, a console message about a refused script, ``window.__pwned`` set."""

    def __init__(self, browser, server) -> None:
        self.base = server.url.rsplit("/mcp", 1)[0]
        self.token = server.token
        self.context = browser.new_context(base_url=self.base)
        self.context.set_default_timeout(TIMEOUT_MS)
        self.page = self.context.new_page()
        self.events: list[str] = []
        self.page.on("dialog", lambda d: (self.events.append(f"dialog: {d.message}"), d.dismiss()))
        self.page.on("pageerror", lambda e: self.events.append(f"page error: {e}"))
        os.makedirs(SHOTS, exist_ok=True)

    def go(self, url: str):
        return self.page.goto(url)

    def shot(self, name: str) -> None:
        self.page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)

    def text(self) -> str:
        return self.page.inner_text("body")

    def assert_unharmed(self) -> None:
        assert self.page.evaluate("typeof window.__pwned") == "undefined"
        assert self.events == []

    def sign_in(self) -> None:
        self.go("/ui/")
        self.page.fill("#token", self.token)
        self.page.click("#signin")
        self.page.wait_for_url(f"{self.base}/ui/")


def test_a_person_signs_in_browses_searches_follows_a_relation_deletes_and_signs_out(browser, site):
    server, ids = site
    visit = Visit(browser, server)
    page = visit.page
    try:
        # without the cookie: the sign-in page, and no stored text
        answer = visit.go(f"/ui/sessions/{text.segment(SESSION)}")
        assert answer.status == 401 and page.is_visible("#token")
        assert CANARY not in visit.text() and "Tuesdays" not in visit.text()
        visit.shot("01-sign-in")

        page.fill("#token", "not-the-token-0123456789")
        page.click("#signin")
        assert "not a token of this server" in visit.text()

        # signing in returns to the page asked for
        page.fill("#token", server.token)
        page.click("#signin")
        page.wait_for_url(f"{visit.base}/ui/sessions/{text.segment(SESSION)}")
        cookie = next(c for c in visit.context.cookies() if c["name"] == "convmem_ui")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and server.token not in cookie["value"]
        assert page.evaluate("document.cookie") == ""

        # browse: the sessions, most recent first, then a session's timeline
        visit.go("/ui/")
        visit.shot("02-sessions")
        page.click(f"a.sid[href='/ui/sessions/{text.segment(SESSION)}']")
        page.wait_for_url(f"**/ui/sessions/{text.segment(SESSION)}")
        assert "Deploys go out on Tuesdays" in visit.text()
        tool = page.locator("details.tool").first
        assert tool.get_attribute("open") is None and not page.is_visible("details.tool .content")
        tool.locator("summary").click()
        assert page.is_visible("details.tool .content") and "make deploy" in visit.text()
        visit.shot("03-session")

        # follow a relation: the tool call depends_on the message before it
        page.click(f"ul.rels a[href='/ui/messages/{ids.deploy}']")
        page.wait_for_url(f"**/ui/messages/{ids.deploy}")
        assert "depends_on" in visit.text() and ids.tool in visit.text()
        cells = page.locator("table.revisions tr").nth(1).locator("td").all_inner_texts()
        assert [cells[0], *cells[2:]] == ["1", "local", "created"], cells        # cells[1]: the time
        visit.shot("04-message")

        # search with a filter, the words marked
        visit.go("/ui/search")
        page.fill("#q", "deploy")
        page.check("input[name=kind][value=semantic]")
        page.click("#go")
        page.wait_for_url("**/ui/search?**kind=semantic**")
        assert "freeze on Fridays" in visit.text() and "Tuesdays" not in visit.text()
        assert page.locator("mark").first.inner_text() == "Deploy"
        visit.shot("05-search")

        # delete: the first click only asks; the confirmation POSTs
        visit.go(f"/ui/messages/{ids.doomed}")
        page.click("#delete")
        page.wait_for_url(f"**/ui/messages/{ids.doomed}/delete")
        assert "Delete this message?" in visit.text()
        visit.shot("06-confirm-delete")
        visit.go(f"/ui/messages/{ids.doomed}")
        assert "Delete me after confirming" in visit.text()          # the GET deleted nothing
        page.click("#delete")
        page.click("#confirm-delete")
        page.wait_for_url(f"**/ui/sessions/{text.segment(SESSION)}?deleted={ids.doomed}")
        assert "was deleted" in visit.text() and "Delete me after confirming" not in visit.text()
        visit.shot("07-deleted")
        assert visit.go(f"/ui/messages/{ids.doomed}").status == 404

        # health, with its chart drawn without a script library
        visit.go("/ui/health")
        assert page.locator("svg rect.bar").count() >= 1 and "active_messages" in visit.text()
        visit.shot("08-health")

        # sign out: every page is the sign-in page again
        page.click("#signout")
        page.wait_for_url("**/ui/signin")
        assert visit.go("/ui/").status == 401 and CANARY not in visit.text()
        visit.shot("09-signed-out")
        visit.assert_unharmed()
    finally:
        visit.context.close()


def test_stored_script_markup_links_and_bidi_overrides_stay_inert_text(browser, site):
    server, ids = site
    visit = Visit(browser, server)
    page = visit.page
    try:
        visit.sign_in()
        for n, url in enumerate([f"/ui/messages/{ids.xss}", f"/ui/sessions/{text.segment(SESSION)}",
                                 "/ui/search?q=payloads", "/ui/", f"/ui/sessions/{text.segment(XSS_SESSION)}",
                                 f"/ui/messages/{ids.xss}/delete"]):
            assert visit.go(url).status == 200, url
            shown = visit.text()
            assert page.locator("img").count() == 0, url
            assert page.locator("script").count() == 1, url                # our own ui.js only
            for link in page.locator("a").all():
                assert (link.get_attribute("href") or "").startswith("/ui/"), url
            visit.shot(f"1{n}-stored-payloads")
            visit.assert_unharmed()
            if url == f"/ui/messages/{ids.xss}":
                for payload in ("<script>window.__pwned=1</script>", '<img src=x onerror="window.__pwned=2">',
                                "javascript:window.__pwned=3", "</textarea><script>window.__pwned=6</script>"):
                    assert payload in shown, payload
                assert "U+202Eexe.txt" in shown and "\u202e" not in shown
                assert "U+200B" in shown and "U+0007" in shown
        visit.go(f"/ui/sessions/{text.segment(XSS_SESSION)}")
        assert XSS_SESSION in visit.text()                                  # its id, shown as text
    finally:
        visit.context.close()
