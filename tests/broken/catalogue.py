"""The catalogue: each broken store and the clause that must catch it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from agentloop import RunStep, Session
from agentlooptest import Harness

from . import batches, clocked, leases, lifecycle, sessions, steps, unusual, variations, varied
from ._good import GoodBoth, GoodForeignKey, GoodPaged, GoodSessions, GoodSteps


async def _same(store: Any) -> Any:
    return store


def _factory(cls: type) -> Callable[[], Awaitable[Any]]:
    async def new() -> Any:
        return cls()

    return new


def good_harness() -> Harness:
    """The correct reference store (one object for both protocols, with leases and the
    session lifecycle) and a true second handle."""
    return Harness(
        new_step_store=_factory(lifecycle.Lifecycle),
        new_session_store=_factory(lifecycle.Lifecycle),
        reopen=variations.second_handle,
        new_session_store_with_clock=_clocked_factory(lifecycle.Lifecycle),
    )


def _lifecycle(cls: type, expected: str) -> Broken:
    doc = (cls.__doc__ or cls.__name__).strip()
    return Broken(
        f"lifecycle.{cls.__name__}: {doc}",
        expected,
        Harness(
            new_step_store=_factory(cls),
            new_session_store=_factory(cls),
            reopen=variations.second_handle,
        ),
    )


def _two_handles(cls: type, expected: str) -> Broken:
    doc = (cls.__doc__ or cls.__name__).strip()
    return Broken(
        f"variations.{cls.__name__}: {doc}",
        expected,
        Harness(
            new_step_store=_factory(cls),
            new_session_store=_factory(cls),
            reopen=variations.second_handle,
        ),
    )


@attrs.frozen
class Broken:
    """A store with one defect, and the id of the clause that must fail on it."""

    name: str
    expected: str
    harness: Harness


def _steps(cls: type, expected: str) -> Broken:
    doc = (cls.__doc__ or cls.__name__).strip()
    return Broken(
        f"steps.{cls.__name__}: {doc}",
        expected,
        Harness(new_step_store=_factory(cls), reopen=_same),
    )


def _sessions(cls: type, expected: str) -> Broken:
    doc = (cls.__doc__ or cls.__name__).strip()
    return Broken(
        f"sessions.{cls.__name__}: {doc}",
        expected,
        Harness(new_session_store=_factory(cls), reopen=_same),
    )


async def _forgetful(store: Any) -> Any:
    """A 'second handle' that sees nothing the first wrote."""
    return type(store)()


CATALOGUE: tuple[Broken, ...] = (
    _steps(steps.NewestFirst, "step.order.oldest-first"),
    _steps(steps.OldestN, "step.window.newest-n"),
    _steps(steps.WindowWraps, "step.window.sizes"),
    _steps(steps.CapsHistory, "step.window.long-history"),
    _steps(steps.SortsByIndex, "step.order.insertion-not-index"),
    _steps(steps.IndexPrimaryKey, "step.order.insertion-not-index"),
    _steps(steps.SortsByTime, "step.order.insertion-not-time"),
    _steps(steps.SortsByTimeWhenLong, "step.order.insertion-not-time"),
    _steps(steps.GlobalWindow, "step.order.interleaved-sessions"),
    _steps(steps.LosesStepType, "step.roundtrip.fields"),
    _steps(steps.ClipsInt32, "step.roundtrip.int32-edges"),
    _steps(steps.DropsMicroseconds, "step.roundtrip.created-at"),
    _steps(steps.ShiftsTime, "step.roundtrip.created-at"),
    _steps(steps.DropsToolArgs, "step.roundtrip.tool-args"),
    _steps(steps.DropsNullArgs, "step.roundtrip.tool-args"),
    _steps(steps.StripsContent, "step.roundtrip.text"),
    _steps(steps.StripsBom, "step.roundtrip.text"),
    _steps(steps.DropsNul, "step.roundtrip.control-chars"),
    _steps(steps.Truncates64K, "step.roundtrip.large-content"),
    _steps(steps.DropsBigToolArgs, "step.roundtrip.large-content"),
    _steps(steps.LikeIds, "step.ids.sql-text"),
    _steps(steps.CaseFolds, "step.ids.case-sensitive"),
    _steps(steps.TrimsIds, "step.ids.verbatim"),
    _steps(steps.NoValidation, "step.n.validation"),
    _steps(steps.UnknownRaises, "step.unknown-session-empty"),
    _steps(steps.TruncatedKeys, "step.isolation"),
    _steps(steps.Aliases, "step.no-alias"),
    _steps(steps.SharedEmpty, "step.no-alias"),
    _steps(steps.AcceptsAnything, "step.bad-input.refused"),
    _steps(steps.SharedState, "step.fresh-store"),
    _steps(steps.CrossedAppends, "step.concurrency.many-sessions"),
    _steps(steps.LostAppends, "step.concurrency.one-session"),
    _steps(steps.TornReads, "step.concurrency.read-during-append"),
    _steps(steps.PagedReads, "step.concurrency.read-during-append"),
    _steps(steps.PartialOnCancel, "step.cancel.append"),
    _steps(steps.PartialFirstAppend, "step.cancel.append"),
    _steps(steps.LeaksLockOnCancel, "step.cancel.reads"),
    _steps(steps.PartialDelete, "step.cancel.delete"),
    _steps(steps.IgnoresClose, "step.closed"),
    _steps(steps.AllNewestFirst, "step.all.insertion-order"),
    _steps(steps.DeleteKeepsSteps, "step.delete.removes-steps"),
    Broken(
        "steps.GoodSteps with a reopen that opens an empty store: nothing is durable",
        "step.durable",
        Harness(new_step_store=_factory(GoodSteps), reopen=_forgetful),
    ),
    _steps(steps.WindowMath, "step.model-based"),
    _sessions(sessions.GetRaises, "session.get.unknown-returns-id"),
    _sessions(sessions.GetCreates, "session.get.unknown-creates-nothing"),
    _sessions(sessions.FinalizeDoesNotCreate, "session.write.creates"),
    _sessions(sessions.ExistsMeansData, "session.write.creates"),
    _sessions(sessions.FirstDataWins, "session.data.latest-wins"),
    _sessions(sessions.DropsNullData, "session.data.latest-wins"),
    _sessions(sessions.NfcData, "session.data.latest-wins"),
    _sessions(sessions.NoneIgnored, "session.data.none"),
    _sessions(sessions.NullBecomesNone, "session.data.json-null"),
    _sessions(sessions.TruncatesData, "session.data.large"),
    _sessions(sessions.AcceptsNonJson, "session.data.rejects-non-json"),
    _sessions(sessions.FinalizeOnce, "session.finalize.repeatable"),
    _sessions(sessions.FinalizeResetsData, "session.finalize.keeps-data"),
    _sessions(sessions.TruncatedKeys, "session.isolation"),
    _sessions(sessions.SummaryByPrefix, "session.isolation"),
    _sessions(sessions.FinalizeTrustsInput, "session.bad-input.refused"),
    _sessions(sessions.LikeIds, "session.ids.sql-text"),
    _sessions(sessions.CaseFolds, "session.ids.case-sensitive"),
    _sessions(sessions.TrimsIds, "session.ids.verbatim"),
    _sessions(sessions.SharedState, "session.fresh-store"),
    _sessions(sessions.TornWrites, "session.concurrency.same-session"),
    _sessions(sessions.CrossedWrites, "session.concurrency.many-sessions"),
    _sessions(sessions.CheckThenInsert, "session.concurrency.first-writes"),
    _sessions(sessions.CacheAsideSessions, "session.concurrency.read-your-writes"),
    _sessions(sessions.FinalizeStaleRow, "session.concurrency.finalize-keeps-data"),
    _sessions(sessions.PartialOnCancel, "session.cancel.writes"),
    _sessions(sessions.LeaksLockOnCancel, "session.cancel.reads"),
    _sessions(sessions.PartialDelete, "session.cancel.delete"),
    _sessions(sessions.IgnoresClose, "session.closed"),
    _sessions(sessions.PutDropsPrompt, "session.put.seeds-get"),
    _sessions(sessions.TruncatesPrompt, "session.put.seeds-get"),
    _sessions(sessions.UpdateRewritesRow, "session.put.update-keeps-settings"),
    _sessions(sessions.FinalKeepsFirst, "session.final.latest"),
    _sessions(sessions.ClipsBytesCarried, "session.final.latest"),
    _sessions(sessions.ListsByClock, "session.list.order"),
    _sessions(sessions.ListIgnoresLimit, "session.list.limit"),
    _sessions(sessions.ListLatestCount, "session.list.fields"),
    _sessions(sessions.CreatedAtResets, "session.list.fields"),
    _sessions(sessions.UpdatedAtFrozen, "session.list.fields"),
    _sessions(sessions.DeleteKeepsSummary, "session.delete.removes-all"),
    Broken(
        "sessions.GoodSessions with a reopen that opens an empty store: nothing is durable",
        "session.durable",
        Harness(new_session_store=_factory(GoodSessions), reopen=_forgetful),
    ),
    _sessions(sessions.PutKeepsRecency, "session.model-based"),
    _sessions(sessions.DeleteLeavesSteps, "session.combined.one-session"),
    _steps(batches.PartialBatch, "step.append-many.atomic"),
    _steps(batches.ReorderedBatch, "step.append-many.order"),
    _steps(batches.KeepsCallerBatch, "step.append-many.order"),
    _steps(batches.BatchPartialOnCancel, "step.append-many.cancel"),
    Broken(
        "batches.BatchNotDurable: append_many buffers batches in the handle",
        "step.append-many.durable",
        Harness(
            new_step_store=_factory(batches.BatchNotDurable), reopen=batches.reopen_sharing_steps
        ),
    ),
    _sessions(batches.GetManyDedupes, "session.get-many.aligned"),
    _sessions(batches.GetManySkipsUnknown, "session.get-many.aligned"),
    _sessions(batches.GetManyCachesList, "session.get-many.aligned"),
    _sessions(batches.GetManySkipsBadIds, "session.get-many.bad-input"),
    _sessions(batches.GetManyLeaksOnCancel, "session.get-many.cancel"),
    _sessions(batches.FinalizeKeepsRevision, "session.revision.bumps"),
    _sessions(batches.NoRevisionCheck, "session.revision.conflict"),
    _sessions(batches.CheckThenWrite, "session.revision.one-winner"),
    _sessions(batches.BumpsBeforeWrite, "session.revision.cancel"),
    Broken(
        "batches.RevisionsPerHandle: revisions live in the handle, not the backend",
        "session.revision.durable",
        Harness(
            new_session_store=_factory(batches.RevisionsPerHandle),
            reopen=batches.reopen_sharing_records,
        ),
    ),
    _sessions(variations.ListOnePage, "session.list.limit"),
    _sessions(variations.PutKeepsUpdatedAt, "session.list.fields"),
    _steps(variations.RollbackTruncates, "step.cancel.append"),
    _two_handles(variations.CachedGet, "session.durable"),
    _two_handles(variations.CachedWindow, "step.durable"),
    _steps(variations.StepIdsCut255, "step.isolation"),
    _sessions(variations.SessionIdsCut255, "session.isolation"),
    _sessions(variations.ChunksLargeData, "session.cancel.writes"),
    _sessions(variations.UpdateRestoresSummary, "session.concurrency.finalize-keeps-data"),
    _sessions(leases.SecondOwner, "session.lease.exclusive"),
    _sessions(leases.TokenReusedAfterRelease, "session.lease.tokens-increase"),
    _sessions(leases.IgnoresExpiry, "session.lease.expiry"),
    _sessions(leases.ReleaseFreesAnyone, "session.lease.release"),
    _sessions(leases.RenewForgets, "session.lease.renew"),
    _sessions(leases.RenewAfterTakeover, "session.lease.renew-lost"),
    _sessions(leases.LeaseCreatesSession, "session.lease-calls.not-a-write"),
    _sessions(leases.AcceptsAnyTtl, "session.lease-calls.bad-input"),
    _sessions(leases.GrantsThenCancels, "session.lease-calls.cancel"),
    _sessions(leases.NoFencing, "session.fenced.writes"),
    _sessions(leases.ViewWithoutAppends, "session.fenced.writes"),
    _sessions(leases.BatchesUnfenced, "session.fenced.writes"),
    _sessions(leases.FenceOutsideTheWrite, "session.fenced.race"),
    _sessions(leases.RenewByOwner, "session.lease.model-based"),
    _sessions(leases.ReleaseByOwner, "session.lease.model-based"),
    _lifecycle(lifecycle.OffsetPaging, "session.paging.exactly-once"),
    _lifecycle(lifecycle.CreatedByUpdate, "session.paging.created-order"),
    _lifecycle(lifecycle.CursorFromAnywhere, "session.paging.cursors"),
    _lifecycle(lifecycle.LabelsUnchecked, "session.labels.rules"),
    _lifecycle(lifecycle.LabelsOutOfBand, "session.labels.write"),
    _lifecycle(lifecycle.PutClearsLabels, "session.labels.kept"),
    _lifecycle(lifecycle.FilterAnyPair, "session.labels.filter"),
    _lifecycle(lifecycle.PruneWrongEnd, "step.prune.keeps-newest"),
    _lifecycle(lifecycle.PruneRenumbers, "step.prune.keeps-newest"),
    _lifecycle(lifecycle.PruneEveryone, "step.prune.keeps-newest"),
    _lifecycle(lifecycle.PruneZeroClears, "step.prune.bad-input"),
    _lifecycle(lifecycle.PruneCountsShort, "step.model-based"),
    _lifecycle(lifecycle.PruneOneByOne, "step.prune.cancel"),
    _lifecycle(lifecycle.StepsAfterOffByOne, "step.steps-after.ranges"),
    _lifecycle(lifecycle.ExpireByCreation, "session.expire.idle-only"),
    _lifecycle(lifecycle.ExpireTwice, "session.expire.idle-only"),
    _lifecycle(lifecycle.ExpireRowsOnly, "session.expire.steps-only"),
    _lifecycle(lifecycle.ExpireLeased, "session.expire.leased"),
    _lifecycle(lifecycle.ForkKeepsSummary, "session.fork.copies"),
    _lifecycle(lifecycle.ForkSharesSteps, "session.fork.isolation"),
    _lifecycle(lifecycle.ForkOverwrites, "session.fork.refused"),
    _lifecycle(lifecycle.ForkStepByStep, "session.fork.atomic"),
    _lifecycle(lifecycle.RestoreFreshTimes, "session.transfer.round-trip"),
    _lifecycle(lifecycle.RestoreOverwrites, "session.transfer.restore-exists"),
)
"""Every broken store; a test asserts each fails its expected clause."""


class _Reserializing(GoodBoth):
    """Keeps JSON re-serialized (sorted keys, compact, 1.0 as 1), as JSON columns may."""

    @staticmethod
    def _canon(text: str) -> str:
        def integral(value: float) -> float | int:
            return int(value) if value.is_integer() else value

        decoded = json.loads(text, parse_float=lambda t: integral(float(t)))
        return json.dumps(decoded, sort_keys=True, separators=(",", ":"))

    async def append(self, step: RunStep) -> None:
        if isinstance(step, RunStep):
            step = attrs.evolve(step, tool_args=self._canon(step.tool_args))
        await super().append(step)

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        if isinstance(snapshot, str):
            with contextlib.suppress(ValueError):  # left for the store's check, which refuses it
                snapshot = self._canon(snapshot)
        await super().update_data(session_id, snapshot)

    async def put(self, session: Session) -> None:
        if isinstance(session, Session) and isinstance(session.data, str):
            with contextlib.suppress(ValueError):
                session = attrs.evolve(session, data=self._canon(session.data))
        await super().put(session)


def reserializing_harness() -> Harness:
    """The reference store, re-serializing every JSON document it keeps."""
    return Harness(
        new_step_store=_factory(_Reserializing),
        new_session_store=_factory(_Reserializing),
        reopen=_same,
    )


async def _ensure_row(store: GoodForeignKey, session_id: str) -> None:
    await store.ensure_row(session_id)


def unusual_good_harnesses() -> dict[str, Harness]:
    """Correct stores built unusually, each of which the contract must pass whole."""
    return {
        "foreign-key-cascade": Harness(
            new_step_store=_factory(GoodForeignKey),
            new_session_store=_factory(GoodForeignKey),
            ensure_session=_ensure_row,
            reopen=_same,
        ),
        "paged-reads": Harness(
            new_step_store=_factory(GoodPaged),
            new_session_store=_factory(GoodPaged),
            reopen=_same,
        ),
        "canonical-json": reserializing_harness(),
        "never-suspends": _unusual(unusual.NeverSuspends),
        "chunked-batches": _unusual(unusual.ChunkedBatches),
    }


def _unusual(cls: type) -> Harness:
    return Harness(
        new_step_store=_factory(cls),
        new_session_store=_factory(cls),
        reopen=variations.second_handle,
        new_session_store_with_clock=_clocked_factory(cls),
    )


def _clocked_factory(cls: type) -> Callable[[Callable[[], Any]], Awaitable[Any]]:
    async def new(clock: Callable[[], Any]) -> Any:
        return cls(clock)

    return new


def _clocked(cls: type, expected: str) -> Broken:
    doc = (cls.__doc__ or cls.__name__).strip()
    return Broken(
        f"clocked.{cls.__name__}: {doc}",
        expected,
        Harness(
            new_session_store=_factory(cls), new_session_store_with_clock=_clocked_factory(cls)
        ),
    )


CATALOGUE = (
    *CATALOGUE,
    _clocked(clocked.LiveAtExpiresAt, "session.lease-clock.boundary"),
    _clocked(clocked.RenewRefusesExpired, "session.lease-clock.renew-expired"),
    _clocked(clocked.RenewFromOldExpiry, "session.lease-clock.renew-from-now"),
    _clocked(clocked.RefusedRenewExtends, "session.lease-clock.renew-from-now"),
)

CATALOGUE = (
    *CATALOGUE,
    _steps(varied.ChunkCommits, "step.append-many.cancel-long"),
    _steps(varied.LimitOverflows, "step.window.sizes"),
    _sessions(varied.GetManyOnePage, "session.get-many.aligned"),
    _sessions(varied.OwnersFolded, "session.lease.owner-exact"),
    _sessions(varied.OwnerPrefix, "session.lease.owner-exact"),
    _sessions(varied.FenceByOwner, "session.fenced.by-token"),
    _sessions(varied.IfSkipsChecks, "session.revision.same-rules"),
    _sessions(varied.IfKeepsOrder, "session.revision.same-rules"),
    _sessions(varied.PutCoalesces, "session.put.seeds-get"),
    _steps(varied.BatchDedupes, "step.append-many.order"),
    _steps(varied.AppendManyAfterClose, "step.closed"),
    _sessions(varied.LeaseCallsAfterClose, "session.closed"),
)

CATALOGUE = (
    *CATALOGUE,
    Broken(
        "varied.ReopenSortsByTime: a reopened handle reads rows ORDER BY created_at",
        "step.durable",
        Harness(new_step_store=_factory(varied.ReopenSortsByTime), reopen=varied.reopen_sorted),
    ),
    _sessions(varied.HalfCloses, "session.closed.cancel"),
    _steps(varied.ClipsAtOneMiB, "step.roundtrip.large-content"),
    _steps(varied.AllFirstPage, "step.window.long-history"),
    _two_handles(varied.FenceApartOnNewerWrites, "session.fenced.race"),
)
