"""The rate limiter of a sharded buffer, in its own threaded actor (shared by every copy)."""

from __future__ import annotations

from typing import Any

from ..ratelimit import RateLimiter


class LimiterActor:
    """A ``RateLimiter`` in its own (threaded) actor, shared by every writer and reader."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter

    def acquire(self, what: str, n: int, timeout: float | None) -> None:
        if what == "insert":
            self.limiter.insert(n, timeout=timeout)
        else:
            self.limiter.sample(n, timeout=timeout)

    def refund(self, what: str, n: int) -> None:
        self.limiter.refund(what, n)

    def close(self) -> None:
        self.limiter.close()

    def state(self) -> dict[str, Any]:
        return self.limiter.state_dict()

    def load_state(self, state: dict[str, Any]) -> None:
        self.limiter.load_state_dict(state)
