"""The contract's pytest front door, run against the agentloopmem stores."""

from __future__ import annotations

import pytest

from agentlooptest import (
    Harness,
    SessionStoreContract,
    StepStoreContract,
    memory_harness,
    memory_store_harness,
)


class TestMemoryStores(StepStoreContract, SessionStoreContract):
    """Every clause, as one pytest test each, against agentloopmem."""

    @pytest.fixture
    def harness(self) -> Harness:
        """The built-in harness for the in-memory stores."""
        return memory_harness()


class TestMemoryStore(StepStoreContract, SessionStoreContract):
    """Every clause against agentloopmem.MemoryStore, one object for both protocols."""

    @pytest.fixture
    def harness(self) -> Harness:
        """The built-in harness for the one-object in-memory store."""
        return memory_store_harness()
