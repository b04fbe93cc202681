"""How ``allreduce-bench`` shows its progress on stderr: a bar that redraws itself on a
terminal, and one plain line per step anywhere else, so that a log file gets no carriage
returns."""

from __future__ import annotations

import sys


class Progress:
    """``progress(done, total, what)`` after each step; ``progress.close()`` at the end."""

    def __init__(self, stream=None, *, tty: bool | None = None, width: int = 30):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.width, self.drawn = width, False

    def __call__(self, done: int, total: int, what: str) -> None:
        if self.tty:
            filled = self.width * done // max(total, 1)
            bar = "#" * filled + "." * (self.width - filled)
            print(f"\r# [{bar}] {done}/{total} {what}", end="", file=self.stream, flush=True)
            self.drawn = True
        else:
            print(f"# measured {done}/{total}: {what}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.drawn:
            print(file=self.stream, flush=True)
            self.drawn = False
