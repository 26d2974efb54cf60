"""Who may use the server: whoever shows the token `agentfs serve` printed.

API clients send it as `Authorization: Bearer TOKEN`. A browser opens the URL
the command printed once (`/?token=TOKEN`); the server answers with a session
cookie (HttpOnly, SameSite=Strict) and sends the browser on to `/`, so the
token leaves the address bar and the history. The cookie's value is a random
session of this server process, not the token: a browser's cookie jar is a
file, and the token belongs in none. Every comparison is in constant time.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field

__all__ = ["Access", "new_token"]

#: Characters a token given with --token must have at least.
MIN_TOKEN = 16


def new_token() -> str:
    """A token made up at start: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Access:
    """The token, and the session cookie a browser gets for showing it once.

    `cookie_name` names the server's port: cookies are not told apart by port,
    and two servers on one machine must not overwrite each other's session.
    """

    token: str
    cookie_name: str
    session: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)

    @classmethod
    def for_port(cls, token: str, port: int) -> Access:
        return cls(token, f"agentfs-serve-{port}")

    def __repr__(self) -> str:  # never print the token, even in a traceback
        return f"Access(cookie_name={self.cookie_name!r})"

    def is_token(self, given: str) -> bool:
        """`given` is the token (constant time)."""
        return hmac.compare_digest(given.encode(), self.token.encode())

    def bearer(self, authorization: str) -> bool:
        """An `Authorization` header value carries the token as a bearer token."""
        scheme, _, value = authorization.partition(" ")
        return scheme.lower() == "bearer" and self.is_token(value.strip())

    def cookie(self, cookie_header: str) -> bool:
        """A `Cookie` header holds this server's session."""
        for part in cookie_header.split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.cookie_name and hmac.compare_digest(
                    value.strip().encode(), self.session.encode()):
                return True
        return False

    def set_cookie(self) -> str:
        """The `Set-Cookie` value of a browser that showed the token: for this
        session only (no expiry), never readable by scripts, never sent along
        with a request another site starts."""
        return f"{self.cookie_name}={self.session}; HttpOnly; SameSite=Strict; Path=/"

