"""What recovery does with one batch of the transaction log: a pure function of its state.

The template's recovery (sinks/two_phase_commit.py, `TwoPhaseCommitWriter.recover_batch`)
carries out this plan at every query start, and the operator commands `inspect` and `resolve`
(connectors/inspection.py, connectors/resolution.py) print and carry out the same plan: the
rules of docs/design.md#commit-protocol live here once, so what an operator is told and what a
restart does cannot disagree. No I/O, no Spark: importable by a command-line tool in milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sinks.txn_log import BatchState, Handle


@dataclass(frozen=True)
class RecoveryPlan:
    """What recovery will do with one batch of the log.

    * `decided` False: nothing was decided; `abort` every prepared handle and `forget` the
      batch's records (Spark's replay writes it afresh);
    * `decided` True: `commit` the decided handles not yet marked committed (unless the store
      itself records the batch as in, e.g. Delta's txn action: then only mark them), `abort`
      the prepared handles no decision names, then mark the batch done (unless a commit was
      lost: that partition is rewritten by the replay);
    * `done` True: nothing to do.
    """

    batch_id: int
    done: bool
    decided: bool
    commit: dict[int, Handle] = field(default_factory=dict)
    abort: list[Handle] = field(default_factory=list)
    #: The partitions of `abort`'s handles (from their prepared records' names).
    abort_partitions: tuple[int, ...] = ()
    #: Partitions already committed by an earlier run (the replay writes nothing for them).
    committed: tuple[int, ...] = ()

    @property
    def forget(self) -> bool:
        """An undecided batch's records are dropped once its handles are aborted."""
        return not self.done and not self.decided

    @property
    def mark_done(self) -> bool:
        """A decided batch is marked done once its commits succeed."""
        return not self.done and self.decided

    @property
    def nothing_to_do(self) -> bool:
        return self.done

    def steps(self) -> list[str]:
        """The plan in words, for operators (the same words in `inspect` and `resolve`)."""
        if self.done:
            return ["nothing: the batch is done in the sink's log"]
        out: list[str] = []
        if self.commit:
            out.append(f"commit decided partition(s) {_list(self.commit)}")
        if self.abort:
            which = "undecided" if not self.decided else "superseded (no decision names them)"
            out.append(f"abort {len(self.abort)} {which} handle(s)"
                       + (f" of partition(s) {_list(self.abort_partitions)}"
                          if self.abort_partitions else ""))
        out.append("mark the batch done" if self.decided else "forget the batch's records")
        return out


def plan_recovery(state: BatchState) -> RecoveryPlan:
    """The plan for one batch, from what the log says of it (BatchState)."""
    if state.done:
        return RecoveryPlan(state.batch_id, done=True, decided=bool(state.decisions),
                            committed=tuple(sorted(state.committed)))
    decided = state.decided()
    undecided = state.undecided_handles()
    parts = tuple(sorted({p for p, h in state.prepared.values() if h in undecided}))
    if not decided:
        return RecoveryPlan(state.batch_id, done=False, decided=False, abort=undecided,
                            abort_partitions=parts)
    todo = {p: h for p, h in sorted(decided.items()) if p not in state.committed}
    return RecoveryPlan(state.batch_id, done=False, decided=True, commit=todo, abort=undecided,
                        abort_partitions=parts, committed=tuple(sorted(state.committed)))


def _list(items) -> str:
    return ", ".join(str(i) for i in sorted(items))
