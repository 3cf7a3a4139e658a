"""Cross-site request forgery protection of the dashboard's buttons (POST forms).

Two independent checks, both required for every POST:

* **Same origin.** The browser's ``Sec-Fetch-Site`` header must say ``same-origin``;
  without it (older browsers), the ``Origin`` header must be present and name the
  request's own host (``Host``). A cross-site form, or a request with neither header,
  is refused.
* **Double-submit token bound to the caller.** Every page sets a token in the
  ``skiplock_csrf`` cookie (``HttpOnly``, ``SameSite=Strict``, ``Secure`` over https,
  path: the dashboard's mount point) and puts the same token in each form; a POST whose
  form token is missing or differs from the cookie is refused. The token is a random
  nonce with an HMAC of the nonce and the caller's identity (the authorization hook's)
  under the dashboard's secret: a token planted by someone else (a sibling subdomain
  can set cookies) is another caller's, refused. Another site can neither read the
  cookie nor make the browser send it (``SameSite=Strict``).
"""

from __future__ import annotations

import base64
import hmac
import re
import secrets
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit

from skiplock.core import ValidationError

from ..rest import Forbidden, Request

#: The cookie holding the token.
COOKIE = "skiplock_csrf"
#: The form field holding the token.
FIELD = "csrf_token"

_TOKEN = re.compile(r"[A-Za-z0-9_-]{32}\.[A-Za-z0-9_-]{43}")


def secret(value: bytes | str | None) -> bytes:
    """The key of the tokens: ``value`` (at least 16 bytes) or a random one."""
    if value is None:
        return secrets.token_bytes(32)
    key = value.encode() if isinstance(value, str) else value
    if len(key) < 16:
        raise ValidationError("csrf_secret must be at least 16 bytes (or characters)")
    return key


def _mac(secret: bytes, nonce: str, identity: str) -> str:
    digest = hmac.digest(secret, f"{nonce}\x00{identity}".encode(), "sha256")
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def new_token(secret: bytes, identity: str) -> str:
    """A fresh token for ``identity``: a random nonce (192 bits) and its HMAC."""
    nonce = secrets.token_urlsafe(24)
    return f"{nonce}.{_mac(secret, nonce, identity)}"


def valid_for(token: str, secret: bytes, identity: str) -> bool:
    """Whether ``token`` was made for ``identity`` under ``secret``."""
    nonce, _, mac = token.partition(".")
    return hmac.compare_digest(mac.encode(), _mac(secret, nonce, identity).encode())


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


def set_cookie(token: str, path: str, *, secure: bool) -> str:
    """The ``Set-Cookie`` value that gives the browser ``token`` for ``path`` (only over
    https when ``secure``)."""
    flags = "; Secure" if secure else ""
    return f"{COOKIE}={token}; Path={path or '/'}; HttpOnly; SameSite=Strict{flags}"


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
    # An origin is scheme and host: http://host is another site than https://host.
    sent = urlsplit(origin.strip())
    if (sent.scheme.lower(), sent.netloc.lower()) != (
        request.scheme.lower(),
        host.strip().lower(),
    ):
        raise Forbidden(f"cross-site request refused (Origin: {origin:.80})")


def check_token(request: Request, submitted: str | None, secret: bytes, identity: str) -> None:
    """Forbidden unless the form's token equals the cookie's and was made for
    ``identity`` (the caller the hook named)."""
    expected = cookie_token(request)
    if expected is None or submitted is None:
        raise Forbidden("the form has expired: reload the page and try again")
    if not hmac.compare_digest(expected.encode(), submitted.encode()):
        raise Forbidden("the form has expired: reload the page and try again")
    if not valid_for(expected, secret, identity):
        raise Forbidden("the form was made for someone else: reload the page and try again")
