"""Sink kinds: what the operator commands need to know of a sink's handles, told by the sink.

Each handle a sink's `preCommit` returns records its kind (`"kind": "kafka-eos"`), and each
sink registers a `SinkKind` under that name: how to describe its handles to an operator
(`kafka-eos inspect`) and how to build the sink that settles them (`kafka-eos resolve`). So the
commands never re-derive a sink's private formats (its transactional ids, gids, app ids): they
look the kind up here, and the sink's own module builds and parses them.

Handles written before handles recorded their kind carry none; `kind_of` recognises those by
the keys each kind declares as its own (`legacy_keys`), here and nowhere else.

Cheap to import (no Spark, no store client): the commands start in milliseconds. A kind's
module imports its store's client only when resolve builds its sink.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from sinks.txn_log import Handle, TransactionLog

if TYPE_CHECKING:
    from sinks.recovery_plan import RecoveryPlan
    from sinks.two_phase_commit import SinkSettings, TwoPhaseCommitSink

#: The key of a handle that names its sink kind.
KIND_KEY = "kind"
#: What `kind_of` says of a handle no registered kind recognises.
UNKNOWN = "unknown"
#: How long resolve's commits may take, unless --commit-timeout says otherwise.
DEFAULT_COMMIT_TIMEOUT_MS = 60_000


class ResolveError(RuntimeError):
    """resolve cannot act: a missing store option, a table that does not match the log..."""


@dataclass
class StoreOptions:
    """What resolve needs to reach the stores: none of it is recorded in the checkpoint, so the
    operator names it (command-line flags, a properties file, the environment)."""

    kafka_conf: dict[str, str] = field(default_factory=dict, repr=False)  # may hold secrets
    pg_url: str | None = field(default=None, repr=False)
    pg_table: str | None = None
    delta_table: str | None = None
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)
    app_id: str | None = None
    commit_timeout_ms: int = DEFAULT_COMMIT_TIMEOUT_MS
    #: Kind name -> the settings of a sink kind outside this package (a user's own store): the
    #: names its `SinkKind.store_settings` declares, read by its `recovery_sink` with
    #: `SinkKind.store_setting` (`kafka-eos resolve --store-option KIND:NAME=VALUE`).
    kind_settings: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)

    def settings_of(self, kind: str) -> dict[str, str]:
        """The settings the operator named for that kind (empty if none)."""
        return self.kind_settings.get(kind, {})


@dataclass(frozen=True)
class PendingBatch:
    """One batch of a stopped query's log that resolve settles: its plan (sinks/recovery_plan.py)
    and what the operator named of the stores."""

    #: The sink's transaction log under the query's checkpoint
    log: TransactionLog
    plan: RecoveryPlan
    store: StoreOptions

    @property
    def checkpoint_location(self) -> str:
        return self.log.location

    @property
    def handles(self) -> list[Handle]:
        """The handles the plan commits, then those it aborts."""
        return [*self.plan.commit.values(), *self.plan.abort]

    def settings(self, name: str) -> SinkSettings:
        """The template's settings for the sink that settles the batch: exactly-once on the
        query's checkpoint, the commit bounded by --commit-timeout."""
        from sinks.two_phase_commit import EXACTLY_ONCE, SinkSettings

        return SinkSettings(name=name, guarantee=EXACTLY_ONCE,
                            checkpoint_location=self.checkpoint_location,
                            commit_timeout_ms=self.store.commit_timeout_ms, commit_attempts=9,
                            retain_batches=10)


class SinkKind(ABC):
    """One sink's handles as the operator commands see them. Subclass it and `register` an
    instance in a module of its own (the commands import it; the sink does not, so that it may
    import the sink without an import circle)."""

    #: The kind recorded in the handles: the sink's format name.
    name: ClassVar[str]
    #: Keys only this sink's handles have: how a handle written before handles recorded their
    #: kind is recognised (empty for a sink whose handles always carried it).
    legacy_keys: ClassVar[tuple[str, ...]] = ()
    #: The settings resolve needs to reach this kind's store, none of which the checkpoint
    #: records: name -> what it is (for the message when one is missing). The operator gives
    #: them in `StoreOptions.kind_settings[name]`; a name not declared here is refused.
    store_settings: ClassVar[Mapping[str, str]] = {}

    @abstractmethod
    def describe(self, handle: Mapping[str, Any], now_ms: int, open_txn: bool) -> dict[str, Any]:
        """The handle's fields for `inspect`'s JSON report: what it holds open or pending in the
        store (transactions, files), and for an `open_txn`, how long it has been open at
        `now_ms` where the store bounds that."""

    @abstractmethod
    def text(self, described: Mapping[str, Any]) -> str:
        """`describe`'s fields as `inspect`'s one line per handle."""

    def store_setting(self, batch: PendingBatch, name: str) -> str:
        """One of `store_settings`, as the operator named it; a ResolveError naming the flag
        when it is missing."""
        value = batch.store.settings_of(self.name).get(name)
        if value is None:
            what = self.store_settings.get(name, name)
            raise ResolveError(f"the log holds {self.name} handles: name {what} with "
                               f"--store-option {self.name}:{name}=VALUE (or "
                               f"StoreOptions.kind_settings[{self.name!r}][{name!r}])")
        return value

    def check_store_settings(self, store: StoreOptions) -> None:
        """Refuse a setting this kind does not declare (a typo would otherwise be ignored)."""
        unknown = sorted(set(store.settings_of(self.name)) - set(self.store_settings))
        if unknown:
            known = ", ".join(sorted(self.store_settings)) or "none"
            raise ResolveError(f"sink kind {self.name} has no setting {', '.join(unknown)} "
                               f"(its settings: {known})")

    @abstractmethod
    def recovery_sink(self, batch: PendingBatch) -> TwoPhaseCommitSink:
        """The sink, as the query configured it as far as the handles and `batch.store` tell,
        that commits and aborts the batch's handles (raise ResolveError naming the flag when
        the store is not named)."""


_KINDS: dict[str, SinkKind] = {}


def register(kind: SinkKind) -> SinkKind:
    """Make `kind` known to inspect and resolve (idempotent for one name and class)."""
    known = _KINDS.get(kind.name)
    if known is not None and type(known) is not type(kind):
        raise ValueError(f"sink kind {kind.name!r} is registered already, by {type(known).__name__}")
    _KINDS[kind.name] = kind
    return kind


def registered() -> list[str]:
    return sorted(_KINDS)


def sink_kind(name: str) -> SinkKind | None:
    """The registered kind of that name; None for a kind nobody registered."""
    return _KINDS.get(name)


def duration_text(seconds: float) -> str:
    """A duration as an operator reads it in `inspect`'s text: s, min or h."""
    s = abs(seconds)
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def kind_of(handle: Mapping[str, Any]) -> str:
    """The kind a handle records; for one written before handles recorded it, the kind whose
    legacy keys it has; UNKNOWN when neither tells."""
    kind = handle.get(KIND_KEY)
    if isinstance(kind, str):
        return kind
    for known in _KINDS.values():
        if any(key in handle for key in known.legacy_keys):
            return known.name
    return UNKNOWN


__all__ = ["DEFAULT_COMMIT_TIMEOUT_MS", "KIND_KEY", "UNKNOWN", "PendingBatch", "ResolveError",
           "SinkKind", "StoreOptions", "duration_text", "kind_of", "register", "registered",
           "sink_kind"]
