"""A harness service as a context manager: `with service:` starts it and always stops it."""

from __future__ import annotations

from typing import Self


class Service:
    """Subclasses give `start` (its keywords optional) and `stop`."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
