"""The simulated job: progress at wall speed, checkpoints from the resume point, losses."""

from __future__ import annotations

from scheduler_app.core.types import JobSpec
from scheduler_app.sim.jobmodel import FAILURE, PREEMPTION, SimJob
from scheduler_app.sim.scenario import JobDef


def sim_job(runtime_s: int = 1000, *, checkpointable: bool = True, interval: int | None = 300,
            ckpt_time: int | None = 40, restart_s: int = 60, gpus: int = 8) -> SimJob:
    spec = JobSpec(
        id="j", seq=0, tenant="t", gpus=gpus, submit_s=0, checkpointable=checkpointable,
        checkpoint_interval_s=interval if checkpointable else None,
        checkpoint_time_s=ckpt_time if checkpointable else None, restart_s=restart_s,
    )
    return SimJob(job=JobDef(spec=spec, runtime_s=runtime_s))


def test_a_first_run_progresses_at_wall_speed_and_completes_at_its_runtime() -> None:
    j = sim_job()
    j.start_run(100, 8)
    assert j.progress(350) == 250
    assert j.completion_s() == 1100
    assert j.next_checkpoint_s(100) == 400
    assert j.next_checkpoint_s(400) == 700
    assert j.next_checkpoint_s(1000) is None  # the next one would be at completion


def test_a_restarted_job_reloads_then_resumes_from_its_pointer() -> None:
    j = sim_job()
    j.start_run(0, 8)
    j.checkpoint(300)
    j.end_run(350, PREEMPTION)
    assert j.pointer == 300
    j.start_run(500, 8)
    assert j.progress(530) == 300  # still reloading (restart_s = 60)
    assert j.progress(600) == 340
    assert j.completion_s() == 500 + 60 + 700
    # checkpoints count from where the run resumed: 300 s of progress after the reload
    assert j.next_checkpoint_s(500) == 500 + 60 + 300


def test_a_graceful_preemption_loses_the_checkpoint_write_and_the_reload() -> None:
    j = sim_job()
    j.start_run(0, 8)
    j.checkpoint(300)
    j.freeze(420)  # asked to stop: progress stops at 420
    assert j.progress(460) == 420
    j.checkpoint(460)  # checkpoint written 40 s later
    j.end_run(460, PREEMPTION)
    assert j.pointer == 420
    assert j.lost_preemption == 40 * 8
    j.start_run(500, 8)
    j.end_run(1200, None)  # completes: only the reload is charged
    assert j.lost_preemption == 40 * 8 + 60 * 8
    assert j.lost_failure == 0


def test_a_job_killed_at_grace_expiry_falls_back_to_its_last_checkpoint() -> None:
    j = sim_job()
    j.start_run(0, 8)
    j.checkpoint(300)
    j.end_run(420, PREEMPTION)  # ignored the request, killed: no checkpoint at 420
    assert j.pointer == 300
    assert j.lost_preemption == 120 * 8


def test_a_job_that_cannot_checkpoint_restarts_from_zero_after_a_node_failure() -> None:
    j = sim_job(checkpointable=False, restart_s=0)
    j.start_run(0, 8)
    assert j.next_checkpoint_s(0) is None
    j.checkpoint(200)  # a non-checkpointable job has no resume pointer
    j.end_run(250, FAILURE)
    assert j.pointer == 0
    assert (j.lost_failure, j.lost_preemption) == (250 * 8, 0)


def test_reload_time_is_charged_to_the_interruption_that_caused_it() -> None:
    j = sim_job()
    j.start_run(0, 8)
    j.end_run(100, FAILURE)  # node failure before any checkpoint: 100 s redone
    j.start_run(200, 8)
    j.end_run(230, PREEMPTION)  # preempted while still reloading
    assert j.lost_failure == 100 * 8 + 30 * 8
    assert j.lost_preemption == 0
    j.start_run(300, 8)  # reloads again, this time because of the preemption
    j.charge_reload(1000)
    assert j.lost_preemption == 60 * 8


def test_an_elastic_shrink_keeps_progress_and_loses_nothing() -> None:
    j = sim_job(restart_s=0, gpus=16)
    j.start_run(0, 16)
    j.shrink(100, 8)
    assert j.progress(150) == 150
    assert j.gpus == 8
    assert j.completion_s() == 1000
    j.end_run(1000, None)
    assert j.lost_failure == 0 and j.lost_preemption == 0


def test_a_declared_checkpoint_time_is_used_else_half_the_grace() -> None:
    assert sim_job(ckpt_time=40).checkpoint_write_s(120) == 40
    assert sim_job(ckpt_time=None).checkpoint_write_s(120) == 60
