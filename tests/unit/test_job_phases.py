"""Each scheduler's words for a job's state map to one closed set, JobPhase, by a table of
the scheduler's own (its ``phases``): a time limit and a preemption are phases apart from
a failure, and ``done`` follows from the phase."""
import gzip
import os
import re

import pytest

from hpctrain.schedulers import JobPhase, JobState
from hpctrain.schedulers.lsf import STATES, LsfScheduler, parse_bjobs
from hpctrain.schedulers.pbs import PbsScheduler
from hpctrain.schedulers.pbs_submitit import pbs_state
from hpctrain.schedulers.slurm import SlurmScheduler

#: squeue(1), "JOB STATE CODES" (Slurm 22.05 to 24.x)
SLURM_WORDS = ["BOOT_FAIL", "CANCELLED", "COMPLETED", "CONFIGURING", "COMPLETING",
               "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PENDING", "PREEMPTED",
               "RUNNING", "RESV_DEL_HOLD", "REQUEUE_FED", "REQUEUE_HOLD", "REQUEUED",
               "RESIZING", "REVOKED", "SIGNALING", "SPECIAL_EXIT", "STAGE_OUT", "STOPPED",
               "SUSPENDED", "TIMEOUT"]
#: the states in which a Slurm job holds or waits for its allocation (hpctrain's list
#: before the phases; UNKNOWN: squeue could not tell)
SLURM_ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED",
                "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED",
                "STAGE_OUT", "SIGNALING", "RESV_DEL_HOLD", "UNKNOWN"}


def test_every_slurm_state_has_its_phase_and_done_is_what_it_was():
    for word in SLURM_WORDS + ["UNKNOWN", "ENDED"]:
        assert word in SlurmScheduler.phases, word
        js = SlurmScheduler.job_state("7", word)
        assert js.done == (word not in SLURM_ACTIVE), word
    phase = {w: SlurmScheduler.job_state("7", w).phase for w in SLURM_WORDS}
    assert phase["TIMEOUT"] is phase["DEADLINE"] is JobPhase.TIMEOUT
    assert phase["PREEMPTED"] is JobPhase.PREEMPTED
    assert phase["NODE_FAIL"] is phase["OUT_OF_MEMORY"] is JobPhase.FAILED
    assert phase["REQUEUE_HOLD"] is JobPhase.REQUEUED and phase["SUSPENDED"] is JobPhase.RUNNING
    # a word a later Slurm adds: not one that holds an allocation, as before
    assert SlurmScheduler.job_state("7", "SOMETHING_NEW").phase is JobPhase.ENDED


def test_the_installed_slurm_lists_the_same_states():
    """squeue(1) of the Slurm the test cluster runs (scripts/slurm-cluster.sh installs it)
    names no state the table lacks."""
    page = "/usr/share/man/man1/squeue.1.gz"
    if not os.path.exists(page):
        pytest.skip("no squeue(1) man page on this machine")
    with gzip.open(page, "rt", errors="replace") as f:
        text = f.read()
    codes = text.split('.SH "JOB STATE CODES"', 1)[1].split(".SH", 1)[0]
    listed = set(re.findall(r"\\fB[A-Z]{1,2}\s+([A-Z_]{4,})\\fR", codes))
    assert listed and listed <= set(SLURM_WORDS), sorted(listed - set(SLURM_WORDS))


@pytest.mark.parametrize("job, word, phase", [
    ({"job_state": "Q"}, "PENDING", JobPhase.PENDING),
    ({"job_state": "H"}, "PENDING", JobPhase.PENDING),
    ({"job_state": "R"}, "RUNNING", JobPhase.RUNNING),
    ({"job_state": "E"}, "COMPLETING", JobPhase.RUNNING),
    ({"job_state": "M"}, "UNKNOWN", JobPhase.UNKNOWN),
    ({"job_state": "F", "Exit_status": -29}, "TIMEOUT", JobPhase.TIMEOUT),
    ({"job_state": "F", "Exit_status": 0}, "COMPLETED", JobPhase.COMPLETED),
    ({"job_state": "F", "Exit_status": 271}, "CANCELLED", JobPhase.CANCELLED),
    ({"job_state": "F", "Exit_status": -27}, "OUT_OF_MEMORY", JobPhase.FAILED),
    ({"job_state": "F", "Exit_status": 1}, "FAILED", JobPhase.FAILED),
])
def test_every_pbs_state_has_its_phase(job, word, phase):
    assert pbs_state(job) == word
    assert word in PbsScheduler.phases
    assert PbsScheduler.job_state("7.pbs", word).phase is phase


def test_every_lsf_state_has_its_phase():
    for stat, word in STATES.items():
        assert word in LsfScheduler.phases, (stat, word)
    assert parse_bjobs("7", "EXIT|h1\n").phase is JobPhase.FAILED
    assert parse_bjobs("7", "USUSP|h1\n").phase is JobPhase.RUNNING
    assert parse_bjobs("7", "", "Job <7> is not found\n").done
    assert not parse_bjobs("7", "").done  # bjobs said nothing: not taken as ended


def test_a_plugin_written_before_the_phases_still_works():
    """JobState(job_id, word, done), as plugins wrote it: the phase from the word."""
    assert JobState("1", "TIMEOUT", True).phase is JobPhase.TIMEOUT
    assert JobState("1", "RUNNING", False).phase is JobPhase.RUNNING
    assert JobState("1", "GONE", True).phase is JobPhase.ENDED
    weird = JobState("1", "RUNNING", True)  # a word and a flag that disagree: the flag
    assert weird.done and weird.phase is JobPhase.ENDED
