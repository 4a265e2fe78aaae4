"""From a regression's commit range to a run of the `bisect` deployment, on the session's real Prefect server.

The deployment is registered from `flows/bisection.py` as `prefect deploy` would; no worker executes its run here
(`test_bisect.py` runs a real bisection): what is checked is the hand-over, the parameters the flow gets.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from yolo_mlops import names
from yolo_mlops.bisect import trigger
from yolo_mlops.errors import ConfigError
from yolo_mlops.trends.commit_range import BisectRange, bisect_range
from yolo_mlops.trends.trend import ChangeEvent, VersionChange

GOOD, BAD = "a" * 40, "b" * 40


def change(
    direction: str = "regression", commits: tuple[str, str] | None = (GOOD, BAD), metric: str = names.STEP_TIME_P50
) -> ChangeEvent:
    what: tuple[VersionChange, ...] = (VersionChange("torch", ("2.13.0",), ("2.14.1",)),)
    if commits is not None:
        what += (VersionChange("commit", (commits[0],), (commits[1],)),)
    return ChangeEvent(
        metric=metric,
        index=4,
        run_id="r" * 32,
        start_time_ms=0,
        mean_before=100.0,
        mean_after=120.0,
        change_pct=20.0,
        pvalue=1e-6,
        direction=direction,  # type: ignore[arg-type]
        what_changed=what,
        before_run_ids=("x",),
        after_run_ids=("y",),
    )


def a_range(**kwargs) -> BisectRange:
    """The range of a change that has one."""
    target = bisect_range(change(**kwargs))
    assert target is not None
    return target


def test_range_of_a_regression_with_a_commit_change():
    target = a_range()
    assert target == BisectRange(good=GOOD, bad=BAD, run_id="r" * 32, metric=names.STEP_TIME_P50)
    assert target.command() == f"yolo-mlops bisect --good {GOOD[:12]} --bad {BAD[:12]} --run {'r' * 32}"
    other = bisect_range(change(metric=names.IMAGES_PER_S))
    assert other is not None and other.command().endswith(f"--metric {names.IMAGES_PER_S}")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"direction": "improvement"},
        {"commits": None},
        {"commits": ("none", BAD)},
        {"commits": (GOOD, "?")},
        {"commits": (GOOD, GOOD)},
    ],
)
def test_nothing_to_bisect(kwargs):
    assert bisect_range(change(**kwargs)) is None


def test_start_creates_a_run_of_the_bisect_deployment_with_the_range(prefect_server):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType

    from yolo_mlops.flows.bisection import bisect

    bisect.to_deployment(name="bisect").apply()
    flow_run_id, where = trigger.start(a_range())
    assert where == "any machine (the series' machine is not recorded)"
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(UUID(flow_run_id))
        assert flow_run.deployment_id is not None
        deployment = client.read_deployment(flow_run.deployment_id)
    assert deployment.name == "bisect"
    assert flow_run.parameters == {"good": GOOD, "bad": BAD, "run_id": "r" * 32, "metric": names.STEP_TIME_P50}
    assert flow_run.state is not None and flow_run.state.type == StateType.SCHEDULED  # handed over, not waited


def test_start_sends_the_bisection_to_the_regressed_machine(prefect_server):
    """The run goes to the work queue named after the series' machine (its worker polls it), with
    YOLO_MLOPS_MACHINE in its job environment: the bisection runs where the series regressed."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    from yolo_mlops.flows.bisection import bisect

    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="bisect-machines", type="process"))
    bisect.to_deployment(name="bisect-pooled", work_pool_name="bisect-machines").apply()
    flow_run_id, where = trigger.start(a_range(), "bisect/bisect-pooled", machine="node-7")
    assert where == "work queue 'node-7' of pool 'bisect-machines'"
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(UUID(flow_run_id))
    assert flow_run.work_queue_name == "node-7"
    assert flow_run.job_variables == {"env": {"YOLO_MLOPS_MACHINE": "node-7"}}
    bisect.to_deployment(name="bisect").apply()
    with pytest.raises(
        ConfigError, match="deployment 'bisect/bisect' has no work pool, so it cannot be sent to machine 'node-7'"
    ):
        trigger.start(a_range(), "bisect/bisect", machine="node-7")


def test_a_version_boundary_that_moved_a_metric_has_a_range_to_bisect():
    """A regression found at a commit boundary by the direct test (no change point) is bisected too."""
    from yolo_mlops.trends.candidates import Candidate
    from yolo_mlops.trends.commit_range import candidate_range
    from yolo_mlops.trends.trend import CandidateEvent

    def event(moved=True, direction="regression", changed=(("commit", GOOD, BAD),)):
        test = Candidate(
            index=6,
            changed=changed,
            size_before=6,
            size_after=6,
            mean_before=112.0,
            mean_after=139.0,
            pvalue=0.001 if moved else 0.4,
            moved=moved,
        )
        return CandidateEvent(names.STEP_TIME_P50, "c" * 32, 0, direction, test, at_change_point=False)

    target = candidate_range(event())
    assert target == BisectRange(good=GOOD, bad=BAD, run_id="c" * 32, metric=names.STEP_TIME_P50)
    for kwargs in (
        {"moved": False},
        {"direction": "improvement"},
        {"changed": (("torch", "2.13", "2.14"),)},
        {"changed": (("commit", "none", BAD),)},
    ):
        assert candidate_range(event(**kwargs)) is None
    from yolo_mlops.trends import trend_report

    assert trend_report.candidate_line(event(), "ms").endswith(f"; bisect it: `{target.command()}`")


def test_start_without_the_deployment_is_one_line(prefect_server):
    with pytest.raises(ConfigError, match="no deployment 'bisect/missing' on the Prefect server"):
        trigger.start(a_range(), deployment="bisect/missing")


def test_the_nightly_flow_starts_one_bisection_per_commit_range_and_notes_a_missing_deployment(prefect_server):
    from yolo_mlops.flows.benchmark import _start_bisections
    from yolo_mlops.flows.bisection import bisect
    from yolo_mlops.trends.nightly import JudgedSeries

    def regression(*ranges: BisectRange) -> JudgedSeries:
        """A series judged a regression tonight, with `ranges` to bisect."""
        return JudgedSeries(
            series="s",
            label="l",
            status="regression",
            runs_tonight=["r"],
            history_runs=9,
            new_changes=[],
            plot_run_id="r",
            bisect=list(ranges),
        )

    bisect.to_deployment(name="bisect").apply()
    target = a_range()
    other_metric = a_range(metric=names.IMAGES_PER_S)  # the same range seen in a second metric
    judged = regression(target, other_metric)
    _start_bisections([judged], "bisect/bisect")
    (note,) = judged.notes
    assert note.startswith("auto-bisect: started bisect/bisect run ") and f"{GOOD[:12]}..{BAD[:12]}" in note
    assert note.endswith("on any machine (the series' machine is not recorded)")

    missing = regression(target)
    _start_bisections([missing], "bisect/missing")
    assert missing.notes == [
        "auto-bisect: no deployment 'bisect/missing' on the Prefect server "
        "(deploy/bootstrap.sh creates it from deploy/prefect.yaml)"
    ]
