"""The browser pages under ``/ui/``: requests, sign-in, headers, rendering.

:class:`BrowserUI` gives the Starlette routes that ``convmem serve --http`` adds
beside ``/mcp`` (:meth:`BrowserUI.routes`) and learns the server's open store
from its lifespan (:meth:`BrowserUI.opened`).  Every request to ``/ui/``:

* passes the same ``Host``/``Origin`` checks as ``/mcp`` (``guard``: the SDK's
  ``TransportSecurityMiddleware.validate_request`` with the server's settings,
  handed over by :mod:`server.http_transport`), else 421/403;
* without a valid sign-in cookie gets the sign-in page (401) and nothing else;
* is answered with a Content-Security-Policy allowing our own script and
  style only (no inline script), ``nosniff``, no framing, no caching, and no
  referrer to other sites (``same-origin``: with ``no-referrer`` a browser's
  form POST carries ``Origin: null``, which the Origin check refuses).

Only two requests change anything: ``POST /ui/messages/{id}/delete`` (the
cookie, a CSRF token rendered into the confirmation page, a same-origin
``Origin``) and the sign-in/sign-out forms, which set or clear the cookie.
A ``GET`` never writes.  Pages are built and rendered on the server's call
threads, not on its event loop.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import jinja2
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from eventstore.errors import ConvMemError, NotFoundError

from .._process import in_thread
from ..app import AppState
from ..principals import DEFAULT, LOCAL, Principal
from ..tokens import TokenFile, split
from . import pages, text
from .reader import Reader
from .signin import COOKIE, LIFETIME, Signer

log = logging.getLogger("convmem")
HERE = os.path.dirname(os.path.abspath(__file__))
STATIC = {"ui.css": "text/css; charset=utf-8", "ui.js": "text/javascript; charset=utf-8"}
MAX_FORM = 4096                 # bytes of a form body (a token, a CSRF token, ids)
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
           "Referrer-Policy": "same-origin", "Cache-Control": "no-store"}
NAMED = "id:"                   # a cookie's subject for a named token: this, then the token's public id
STATUS_OF = {"VALIDATION_ERROR": 400, "NOT_FOUND": 404, "CONFLICT": 409, "BUSY": 503}


def when(ms: int) -> Markup:
    """``<time>`` of a time in milliseconds since the epoch: UTC, in ISO 8601 for the page's
    script, which shows it in local time (digits only: nothing to escape)."""
    t = time.gmtime(ms // 1000)
    day = f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
    clock = f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
    return Markup(f'<time datetime="{day}T{clock}.{ms % 1000:03d}Z">{day} {clock} UTC</time>')


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(HERE, "templates")),
                             autoescape=True, undefined=jinja2.StrictUndefined, auto_reload=False)
    env.globals.update(shown=text.shown, seg=text.segment, when=when, is_tool_call=pages.is_tool_call,
                       clip=pages.CLIP)
    return env


Guard = Callable[[Request, bool], Awaitable[Response | None]]
"""The Host/Origin check of ``/mcp``: a refusal, or None (given the request and whether it is a POST
of JSON; the pages always pass False, their forms are not JSON)."""


@dataclass(frozen=True)
class Visitor:
    """A signed-in browser: the principal its token stands for, and its cookie (None: no sign-in
    needed, a server without a token)."""

    principal: Principal
    cookie: str | None


class BrowserUI:
    """``token``: the server's own token (None: no sign-in, tests only); ``tokens``: the named
    tokens, any of which may sign a browser in as its principal, with its scope."""

    def __init__(self, token: str | None, tokens: TokenFile | None, guard: Guard, *, tls: bool = False) -> None:
        self.signer = Signer(token)
        self._tokens = tokens
        self._guard = guard
        self._tls = tls
        self._env = environment()
        self._state: AppState | None = None

    def opened(self, state: AppState) -> None:
        """The server's lifespan: the store is open (or failed to open)."""
        self._state = state

    def routes(self) -> list[Route]:
        page = self._page
        return [
            Route("/ui", lambda r: RedirectResponse("/ui/", 308)),
            Route("/ui/", page(lambda r, reader: pages.sessions(reader, r.query_params.get("cursor")))),
            Route("/ui/sessions/{session_id:path}", page(lambda r, reader: pages.session(
                reader, r.path_params["session_id"], r.query_params.get("cursor"), r.query_params.get("deleted")))),
            Route("/ui/search", page(lambda r, reader: pages.search(
                reader, pages.SearchForm.from_query(parse_qs(r.url.query))))),
            Route("/ui/messages/{message_id}", page(lambda r, reader: pages.message(
                reader, r.path_params["message_id"]))),
            Route("/ui/messages/{message_id}/delete", self._delete, methods=["GET", "POST"]),
            Route("/ui/health", page(lambda r, reader: pages.health(reader))),
            Route("/ui/signin", self._signin, methods=["GET", "POST"]),
            Route("/ui/signout", self._signout, methods=["POST"]),
            Route("/ui/static/{name}", self._static),
        ]

    # ------------------------------------------------------------ plumbing
    def _render(self, page: pages.Page, request: Request, visitor: Visitor | None) -> Response:
        html = self._env.get_template(page.template).render(
            **page.values, csrf=self.signer.csrf(visitor.cookie if visitor else None), signed_in=visitor is not None,
            principal=visitor.principal.name if visitor else "", path=request.url.path)
        return HTMLResponse(html, page.status, headers=HEADERS)

    def _error(self, exc: ConvMemError, request: Request, visitor: Visitor | None) -> Response:
        status = STATUS_OF.get(exc.code, 500)
        return self._render(pages.Page("error.html", {"code": exc.code, "message": exc.message}, status),
                            request, visitor)

    async def _checked(self, request: Request) -> Response | None:
        """A refusal when the request fails the Host/Origin rules of ``/mcp``."""
        refused = await self._guard(request, False)
        if refused is not None:
            for key, value in HEADERS.items():
                refused.headers[key] = value
        return refused

    def _visitor(self, request: Request) -> Visitor | None:
        """Who signed this browser in, now: None without a valid cookie, or when its token has
        been revoked since (named tokens are looked up at every request)."""
        if self.signer.open:
            return Visitor(LOCAL, None)
        cookie = request.cookies.get(COOKIE)
        subject = self.signer.subject(cookie, time.time())
        if subject == DEFAULT.name:
            return Visitor(DEFAULT, cookie)
        if subject is None or not subject.startswith(NAMED) or self._tokens is None:
            return None
        principal = self._tokens.named(subject[len(NAMED):])
        return None if principal is None else Visitor(principal, cookie)

    def _subject(self, token: str) -> str | None:
        """Whose token ``token`` is, as a cookie names it (never the token); None: no one's."""
        token = token.strip()
        if self.signer.token_matches(token):
            return DEFAULT.name
        parts = split(token)
        known = self._tokens is not None and parts is not None and self._tokens.principal(token) is not None
        return NAMED + parts[0] if known and parts is not None else None

    def _signin_page(self, request: Request, error: str = "", status: int = 401) -> Response:
        raw = request.scope.get("raw_path") or request.url.path.encode()     # as the browser sent it, encoded
        target = raw.decode("latin-1") + (f"?{request.url.query}" if request.url.query else "")
        return self._render(pages.Page("signin.html", {"next": _local(target), "error": error}, status),
                            request, None)

    async def _run(self, build: Callable[[], Any]) -> Any:
        state = self._state
        pool: ThreadPoolExecutor | None = state.calls if state is not None else None
        if pool is None:
            return build()
        return await in_thread(pool, build)

    def _reader(self, visitor: Visitor) -> Reader:
        if self._state is None:
            raise ConvMemError("the store is not open yet")
        return Reader(self._state, visitor.principal)

    async def _admitted(self, request: Request) -> Visitor | Response:
        """Who may see a signed-in page, or the answer instead: the Host/Origin refusal, or
        the sign-in page."""
        refused = await self._checked(request)
        if refused is not None:
            return refused
        visitor = self._visitor(request)
        return self._signin_page(request) if visitor is None else visitor

    def _page(self, build: Callable[[Request, Reader], pages.Page]):
        async def endpoint(request: Request) -> Response:
            visitor = await self._admitted(request)
            if isinstance(visitor, Response):
                return visitor
            return await self._run(lambda: self._answer(
                lambda: self._render(build(request, self._reader(visitor)), request, visitor), request, visitor))
        return endpoint

    async def _form(self, request: Request) -> dict[str, str] | Response:
        """The fields of a same-origin urlencoded POST, or the refusal."""
        origin = request.headers.get("origin")
        if origin is None or origin == "null":
            return _refusal(403, "a form must come from this server's own pages (no Origin header)")
        kind = request.headers.get("content-type", "")
        if not kind.startswith("application/x-www-form-urlencoded"):
            return _refusal(415, "a form must be application/x-www-form-urlencoded")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM:
                return _refusal(413, f"a form is at most {MAX_FORM} bytes")
        fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        return {key: values[-1] for key, values in fields.items()}

    # ------------------------------------------------------------ endpoints
    async def _signin(self, request: Request) -> Response:
        refused = await self._checked(request)
        if refused is not None:
            return refused
        if request.method == "GET":
            target = _local(request.query_params.get("next", "/ui/"))
            if self._visitor(request) is not None:
                return RedirectResponse(target, 303, headers=HEADERS)
            return self._render(pages.Page("signin.html", {"next": target, "error": ""}), request, None)
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        target = _local(form.get("next", "/ui/"))
        subject = self._subject(form.get("token", ""))
        if subject is None:
            log.info("browser sign-in refused: wrong token")
            page = pages.Page("signin.html", {"next": target, "error": "That is not a token of this server."}, 401)
            return self._render(page, request, None)
        log.info("browser signed in as %s", subject)
        response = RedirectResponse(target, 303, headers=HEADERS)
        response.set_cookie(COOKIE, self.signer.issue(subject, time.time()), max_age=LIFETIME, path="/ui",
                            secure=self._tls, httponly=True, samesite="strict")
        return response

    async def _signout(self, request: Request) -> Response:
        refused = await self._checked(request)
        if refused is not None:
            return refused
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        cookie = request.cookies.get(COOKIE)
        if not self.signer.open and not self.signer.csrf_matches(cookie, form.get("csrf", "")):
            return _refusal(403, "the form's CSRF token does not match: reload the page and try again")
        response = RedirectResponse("/ui/signin", 303, headers=HEADERS)
        response.delete_cookie(COOKIE, path="/ui", secure=self._tls, httponly=True, samesite="strict")
        return response

    async def _delete(self, request: Request) -> Response:
        visitor = await self._admitted(request)
        if isinstance(visitor, Response):
            return visitor
        message_id = request.path_params["message_id"]
        if request.method == "GET":         # the first click: only a confirmation page
            return await self._run(lambda: self._answer(
                lambda: self._render(pages.confirm_delete(self._reader(visitor), message_id), request, visitor),
                request, visitor))
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        if not self.signer.csrf_matches(visitor.cookie, form.get("csrf", "")):
            return _refusal(403, "the form's CSRF token does not match: reload the page and try again")
        session_id = form.get("session_id", "")

        def delete() -> Response:
            body = pages.delete(self._reader(visitor), message_id, session_id)
            if body["status"] == "NOT_FOUND":
                raise NotFoundError("message_id: no live message has this id in this session")
            log.info("%s deleted message %s from the browser page", visitor.principal.name, message_id)
            target = f"/ui/sessions/{text.segment(session_id)}?deleted={message_id}"
            return RedirectResponse(target, 303, headers=HEADERS)
        return await self._run(lambda: self._answer(delete, request, visitor))

    def _answer(self, build: Callable[[], Response], request: Request, visitor: Visitor | None) -> Response:
        try:
            return build()
        except ConvMemError as exc:
            return self._error(exc, request, visitor)
        except Exception:
            log.exception("unexpected error in the browser page %s", request.url.path)
            return _refusal(500, "unexpected internal error (see the server log)")

    async def _static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return _refusal(404, "no such file")
        return FileResponse(os.path.join(HERE, "static", name), media_type=STATIC[name],
                            headers={**HEADERS, "Cache-Control": "no-cache"})


def _local(target: str) -> str:
    """``target`` when it is a path of these pages, else ``/ui/`` (never another site)."""
    if target.startswith("/ui/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui/"


def _refusal(status: int, message: str) -> Response:
    return Response(message + "\n", status, media_type="text/plain; charset=utf-8", headers=HEADERS)


__all__ = ["BrowserUI"]
