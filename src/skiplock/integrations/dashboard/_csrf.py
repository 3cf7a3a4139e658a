"""Cross-site request forgery protection of the dashboard's buttons (POST forms).

Two independent checks, both required for every POST:

* **Same origin.** The browser's ``Sec-Fetch-Site`` header must say ``same-origin``;
  without it (older browsers), the ``Origin`` header must be present and name the
  request's own host (``Host``). A cross-site form, or a request with neither header,
  is refused.
* **Double-submit token.** Every page sets a random token in the ``skiplock_csrf``
  cookie (``HttpOnly``, ``SameSite=Strict``, path: the dashboard's mount point) and puts
  the same token in each form; a POST whose form token is missing or differs from the
  cookie is refused. Another site can neither read the cookie nor make the browser send
  it (``SameSite=Strict``).
"""

from __future__ import annotations

import hmac
import re
import secrets
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit

from ..rest import Forbidden, Request

#: The cookie holding the token.
COOKIE = "skiplock_csrf"
#: The form field holding the token.
FIELD = "csrf_token"

_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def cookie_token(request: Request) -> str | None:
    """The well-formed token of the request's ``skiplock_csrf`` cookie, or None."""
    header = request.header("cookie")
    if not header:
        return None
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(header)
    except CookieError:
        return None
    morsel = cookies.get(COOKIE)
    if morsel is None or not _TOKEN.fullmatch(morsel.value):
        return None
    return morsel.value


def set_cookie(token: str, path: str) -> str:
    """The ``Set-Cookie`` value that gives the browser ``token`` for ``path``."""
    return f"{COOKIE}={token}; Path={path or '/'}; HttpOnly; SameSite=Strict"


def check_same_origin(request: Request) -> None:
    """Forbidden unless the browser says the request comes from the dashboard's origin."""
    site = request.header("sec-fetch-site")
    if site is not None:
        if site.strip().lower() != "same-origin":
            raise Forbidden(f"cross-site request refused (Sec-Fetch-Site: {site:.40})")
        return
    origin = request.header("origin")
    host = request.header("host")
    if not origin or origin == "null" or not host:
        raise Forbidden("request refused: no Origin header to check it comes from this site")
    if urlsplit(origin).netloc.lower() != host.strip().lower():
        raise Forbidden(f"cross-site request refused (Origin: {origin:.80})")


def check_token(request: Request, submitted: str | None) -> None:
    """Forbidden unless the form's token equals the cookie's."""
    expected = cookie_token(request)
    if expected is None or submitted is None:
        raise Forbidden("the form has expired: reload the page and try again")
    if not hmac.compare_digest(expected.encode(), submitted.encode()):
        raise Forbidden("the form has expired: reload the page and try again")
