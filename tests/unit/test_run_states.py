"""A run as a state machine: phases entered only in order, an agent only after a spawn, a stop's escalation."""

import itertools

import pytest
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from jobs.models import Task
from jobs.supervision.supervisor import NEXT_PHASES, Phase, Stopping, StopStep, TaskRun


class NoSupervisor:
    def wake(self) -> None:
        pass


def new_run() -> TaskRun:
    return TaskRun(NoSupervisor(), Task(prompt="say hi", cwd="/nowhere"))  # an unsaved row: nothing is written


def reachable(start: Phase) -> set[Phase]:
    seen, todo = set(), [start]
    while todo:
        for phase in NEXT_PHASES[todo.pop()] - seen:
            seen.add(phase)
            todo.append(phase)
    return seen


def test_a_new_run_has_no_agent_until_a_spawn_succeeds():
    run = new_run()
    assert run.phase is Phase.STARTING
    with pytest.raises(RuntimeError, match="no agent in phase starting"):
        _ = run.agent


def test_the_phases_only_go_forward_and_every_one_can_end():
    """No phase can be entered twice or return to one before it, and each can reach its recorded end."""
    for phase in Phase:
        assert phase not in reachable(phase)
        assert phase is Phase.ENDED or Phase.ENDED in reachable(phase)
    assert NEXT_PHASES[Phase.ENDED] == set()


@pytest.mark.parametrize("start, to", list(itertools.product(Phase, Phase)))
def test_a_run_enters_a_phase_only_from_one_before_it(start, to):
    run = new_run()
    run.phase = start
    if to in NEXT_PHASES[start]:
        run._enter(to)
        assert run.phase is to
    else:
        with pytest.raises(RuntimeError, match=f"cannot go from {start.value} to {to.value}"):
            run._enter(to)
        assert run.phase is start


def test_running_is_entered_only_by_a_spawn():
    """Only STARTING leads to RUNNING, and an agent is set where it is entered (TaskRun._spawn)."""
    assert [phase for phase, following in NEXT_PHASES.items() if Phase.RUNNING in following] == [Phase.STARTING]


@given(
    grace=st.integers(1, 30),
    started=st.integers(0, 10**6),
    offset=st.integers(0, 200).map(lambda n: n / 2),  # halves: exact in binary, so the edges are exact
    step=st.sampled_from(StopStep),
)
def test_a_stop_escalates_to_sigterm_after_one_grace_and_to_sigkill_after_two(grace, started, offset, step):
    """An agent may not ignore a stop: asked, it gets SIGTERM BRIDGE_KILL_GRACE_S after the stop began; terminated,
    SIGKILL at twice that; killed, nothing more."""
    stop = Stopping(reason="cancelled", status="cancelled", started=started, step=step)
    now = started + offset
    with override_settings(BRIDGE_KILL_GRACE_S=grace):
        due, next_at = stop.due(now), stop.next_step_at()
    if step is StopStep.ASKED:
        assert (next_at, due) == (started + grace, StopStep.SIGTERM if offset >= grace else None)
    elif step is StopStep.SIGTERM:
        assert (next_at, due) == (started + 2 * grace, StopStep.SIGKILL if offset >= 2 * grace else None)
    else:
        assert (next_at, due) == (None, None)


def test_after_sigkill_nothing_more_is_due():
    stop = Stopping(reason="timeout", status="timeout", started=0.0, step=StopStep.SIGKILL)
    assert stop.next_step_at() is None and stop.due(1e9) is None
