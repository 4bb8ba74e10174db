"""Unit tests for sinks/recovery_plan.py: the per-batch recovery rules
(docs/design.md#commit-protocol) that the template's recovery carries out and `inspect` /
`resolve` print."""

from __future__ import annotations

from sinks.recovery_plan import plan_recovery
from sinks.txn_log import BatchState

H0, H1, H2 = {"transactional_id": "p-0-0"}, {"transactional_id": "p-1-0"}, {"transactional_id": "p-2-0"}
H0_RETRY = {"transactional_id": "p-0-1"}


def state(prepared=(), decisions=(), committed=(), done=False) -> BatchState:
    return BatchState(
        batch_id=7,
        prepared={f"prepared-{p}-{a}-x.json": (p, h) for p, a, h in prepared},
        decisions=list(decisions), committed=set(committed), done=done,
    )


def test_a_done_batch_needs_nothing():
    plan = plan_recovery(state([(0, 0, H0)], [{0: H0}], [0], done=True))
    assert plan.done and plan.nothing_to_do and not plan.commit and not plan.abort
    assert plan.steps() == ["nothing: the batch is done in the sink's log"]


def test_an_undecided_batch_is_aborted_and_forgotten():
    plan = plan_recovery(state([(0, 0, H0), (1, 0, H1)]))
    assert not plan.decided and plan.forget and not plan.mark_done
    assert plan.commit == {} and plan.abort == [H0, H1] and plan.abort_partitions == (0, 1)
    assert plan.steps() == ["abort 2 undecided handle(s) of partition(s) 0, 1",
                            "forget the batch's records"]


def test_a_decided_batch_commits_what_is_not_committed_yet():
    plan = plan_recovery(state([(0, 0, H0), (1, 0, H1), (2, 0, H2)], [{0: H0, 1: H1, 2: H2}], [1]))
    assert plan.decided and plan.mark_done and not plan.forget
    assert plan.commit == {0: H0, 2: H2} and plan.abort == [] and plan.committed == (1,)
    assert plan.steps() == ["commit decided partition(s) 0, 2", "mark the batch done"]


def test_superseded_attempts_are_aborted_beside_the_commit():
    """A retried task's first attempt prepared too; the decision names the retry."""
    plan = plan_recovery(state([(0, 0, H0), (0, 1, H0_RETRY)], [{0: H0_RETRY}]))
    assert plan.commit == {0: H0_RETRY} and plan.abort == [H0] and plan.abort_partitions == (0,)
    assert "abort 1 superseded" in plan.steps()[1]


def test_a_later_decision_wins_per_partition():
    plan = plan_recovery(state([(0, 0, H0), (0, 1, H0_RETRY)], [{0: H0}, {0: H0_RETRY}]))
    assert plan.commit == {0: H0_RETRY} and plan.abort == [H0]


def test_a_fully_committed_decided_batch_is_only_marked_done():
    plan = plan_recovery(state([(0, 0, H0)], [{0: H0}], [0]))
    assert plan.commit == {} and plan.mark_done
    assert plan.steps() == ["mark the batch done"]
