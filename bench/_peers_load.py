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
    """One peer store: its label, the module holding it and the PyPI package that ships it.

    ``needs`` names the further distributions it needs to run here (a database
    driver the package leaves to its user).
    """

    label: str
    module: str
    package: str
    needs: tuple[str, ...] = ()

    @property
    def packages(self) -> tuple[str, ...]:
        """Every distribution the peer needs, its own first."""
        return (self.package, *self.needs)


_ON_POSTGRES = ("sqlalchemy", "greenlet", "asyncpg")  # the SQLAlchemy async URL their docs show

ADK = Peer("ADK InMemorySessionService", "google.adk.sessions", "google-adk")
LANGGRAPH = Peer("LangGraph InMemorySaver", "langgraph.checkpoint.memory", "langgraph-checkpoint")
OPENAI = Peer("OpenAI Agents SQLiteSession", "agents.memory.sqlite_session", "openai-agents")
LANGGRAPH_PG = Peer(
    "LangGraph AsyncPostgresSaver",
    "langgraph.checkpoint.postgres.aio",
    "langgraph-checkpoint-postgres",
)
OPENAI_PG = Peer(
    "OpenAI Agents SQLAlchemySession",
    "agents.extensions.memory.sqlalchemy_session",
    "openai-agents",
    _ON_POSTGRES,
)
ADK_PG = Peer(
    "ADK DatabaseSessionService",
    "google.adk.sessions.database_session_service",
    "google-adk",
    _ON_POSTGRES,
)
IN_MEMORY = (ADK, LANGGRAPH)
ON_POSTGRES = (LANGGRAPH_PG, OPENAI_PG, ADK_PG)
PEERS = (ADK, LANGGRAPH, OPENAI, *ON_POSTGRES)


def importable(peer: Peer) -> bool:
    """Whether every distribution ``peer`` needs is installed (asks the metadata, imports none)."""
    for package in peer.packages:
        try:
            importlib.metadata.version(package)
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
    names = ", ".join(f"{peer.label} ({' + '.join(peer.packages)})" for peer in absent)
    return f"peers not installed: {names}; install them with: {INSTALL_HINT}"


def load(peer: Peer) -> ModuleType:
    """Import ``peer``'s module (typed loosely: the peers ship without our type checks)."""
    return importlib.import_module(peer.module)


def module(name: str) -> ModuleType:
    """Import a peer's submodule by name (loosely typed, like :func:`load`)."""
    return importlib.import_module(name)
