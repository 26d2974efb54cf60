"""The retry policy every HTTP provider shares: which failures are retried, how long to
wait, and how a retry is reported.

A provider makes one attempt at a time and raises `Retry` for a failure that
another attempt may fix (429, 5xx, timeouts, dropped connections, a stream cut
before its end, a garbled body); anything else it raises as a `ModelError`.
`RetryPolicy.call` then waits (the server's `retry-after`, else exponential
backoff with full jitter), tells the text sink (`agentfs/models/base.py:report_retry`)
and tries again, up to `max_retries` times. An attempt returns only a complete
turn, so nothing of a failed one is ever returned, let alone stored.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from agentfs.errors import ModelError
from agentfs.models.base import RetryNotice, TextSink, report_retry

__all__ = ["Retry", "RetryPolicy", "is_transport_error"]

T = TypeVar("T")


class Retry(Exception):
    """An attempt failed in a way another attempt may fix; `reason` is for people."""

    def __init__(self, cause: Exception, reason: str | None = None) -> None:
        self.cause = cause
        self.reason = reason or f"{type(cause).__name__}: {cause}"
        super().__init__(self.reason)


@dataclass(frozen=True)
class RetryPolicy:
    """How many times, and after how long, a failed attempt is tried again."""

    max_retries: int = 6
    backoff: float = 1.0  # seconds before the first retry, doubled each time (then jittered)
    max_backoff: float = 60.0  # no wait is longer, whatever the server asks for
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    def call(self, attempt: Callable[[], T], on_text: TextSink | None, *, service: str) -> T:
        """`attempt()`'s result, retrying it while it raises `Retry`.

        Raises:
            ModelError: still failing after the retries (`service` names the API).
        """
        attempts = self.max_retries + 1
        for number in range(1, attempts + 1):
            try:
                return attempt()
            except Retry as retry:
                if number == attempts:
                    raise ModelError(
                        f"{service} still failing after {attempts} attempts: {retry.reason}",
                        hint="nothing of the failed turn was saved; try again later: "
                        "`agentfs run` continues where it stopped",
                    ) from None
                wait = self.delay(number - 1, retry.cause)
                report_retry(on_text, RetryNotice(number, attempts, wait, retry.reason))
                self.sleep(wait)
        raise AssertionError("unreachable")

    def delay(self, retries_so_far: int, exc: Exception) -> float:
        """Seconds to wait: what the server asked for (`retry-after-ms`, `retry-after`),
        else full-jitter exponential backoff."""
        response = getattr(exc, "response", None)
        headers = response.headers if response is not None else {}
        for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
            value = headers.get(name)
            if value:
                try:
                    return min(float(value) * scale, self.max_backoff)
                except ValueError:
                    pass
        return random.uniform(0, min(self.max_backoff, self.backoff * 2**retries_so_far))


def is_transport_error(exc: Exception) -> bool:
    """An HTTP-library error an SDK let through (they wrap only errors before the
    response headers; a connection cut mid-body surfaces as the library's own)."""
    return type(exc).__module__.split(".")[0] in {"httpx", "httpx2", "httpcore", "h11"}
