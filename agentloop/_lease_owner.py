"""The lease owner of each run: ``host:pid:random-n``, unique to the run."""

from __future__ import annotations

import itertools
import os
import secrets
import socket


def _host() -> str:
    """This machine's name as it can go into an owner (at most 64 ASCII characters)."""
    name = socket.gethostname().encode("ascii", "replace").decode("ascii")
    return name.replace("\x00", "?")[:64] or "host"


_HOST = _host()


class _Process:
    """This process's part of every owner: ``host:pid:random``, remade in a forked child.

    A run's owner adds a counter to it, so a run costs no system call (``getpid``,
    ``getrandom``). The 64 random bits tell apart two processes that had one pid in
    turn, even one forked from the same parent (``os.register_at_fork``).
    """

    prefix = ""
    runs: itertools.count[int] = itertools.count()

    @classmethod
    def renew(cls) -> None:
        cls.prefix = f"{_HOST}:{os.getpid()}:{secrets.token_hex(8)}-"
        cls.runs = itertools.count()


_Process.renew()
os.register_at_fork(after_in_child=_Process.renew)


def new_owner() -> str:
    """A lease owner unique to one run: ``host:pid:random-n`` (``n`` counts this process's runs)."""
    return f"{_Process.prefix}{next(_Process.runs)}"
