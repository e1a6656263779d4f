"""Which peer libraries are importable, and the one line that installs the rest.

The peers are optional (``pip install -e '.[peers]'``); nothing here imports
them at module load, so ``python -m bench`` runs without them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from types import ModuleType

import attrs

INSTALL_HINT = "pip install -e '.[peers]'"


@attrs.frozen
class Peer:
    """One peer store: its label, the module holding it and the PyPI package that ships it."""

    label: str
    module: str
    package: str


ADK = Peer("ADK InMemorySessionService", "google.adk.sessions", "google-adk")
LANGGRAPH = Peer("LangGraph InMemorySaver", "langgraph.checkpoint.memory", "langgraph-checkpoint")
OPENAI = Peer("OpenAI Agents SQLiteSession", "agents.memory.sqlite_session", "openai-agents")
PEERS = (ADK, LANGGRAPH, OPENAI)


def importable(peer: Peer) -> bool:
    """Whether ``peer``'s distribution is installed; asks the metadata, imports nothing."""
    try:
        importlib.metadata.version(peer.package)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def labelled(peer: Peer) -> str:
    """``peer``'s label with the installed version of its package, as the table shows it."""
    return f"{peer.label} ({peer.package} {importlib.metadata.version(peer.package)})"


def missing(peers: tuple[Peer, ...] = PEERS) -> list[Peer]:
    """The peers that are not installed, in ``peers`` order."""
    return [peer for peer in peers if not importable(peer)]


def missing_message(absent: list[Peer]) -> str:
    """Names every absent peer and how to install it."""
    names = ", ".join(f"{peer.label} ({peer.package})" for peer in absent)
    return f"peers not installed: {names}; install them with: {INSTALL_HINT}"


def load(peer: Peer) -> ModuleType:
    """Import ``peer``'s module (typed loosely: the peers ship without our type checks)."""
    return importlib.import_module(peer.module)


def module(name: str) -> ModuleType:
    """Import a peer's submodule by name (loosely typed, like :func:`load`)."""
    return importlib.import_module(name)
