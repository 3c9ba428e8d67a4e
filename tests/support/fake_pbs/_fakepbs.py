"""A fake PBS server for tests: ``qsub``, ``qstat`` and ``qdel`` over a JSON state file.

No PBS server can be installed on the machines that run hpctrain's tests, so these
commands stand in for OpenPBS 23.06. Their outputs and exit codes reproduce what
``shared/notes/pbs-facts.md`` records from a live server:

* ``qsub`` prints the new job id (``<seq>.<server>``, arrays ``<seq>[].<server>``) on
  stdout; a job with ``-W depend=afterany:<id>`` on an unfinished job is held (``H``);
  a dependency on one subjob (``<seq>[N]``) is refused, as by OpenPBS (PBSE_IVALREQ);
* ``qstat -f -F json [-x] <ids>`` prints ``{"timestamp", "pbs_version", "pbs_server",
  "Jobs": {id: {...}}}`` with integer ``Exit_status``/``substate``/``run_count`` and
  objects ``Resource_List``/``Variable_List``; an unknown id prints the header without
  ``Jobs`` and exits 153 (``qstat: Unknown Job Id <id>``); a finished job asked for
  without ``-x`` exits 35 (``qstat: <id> Job has finished, use -x or -H ...``); with
  ``history`` off finished jobs are purged (so 153); ``reject_x`` makes it refuse
  ``-x`` like a qstat without that option;
* ``qdel`` finishes a queued/held job (``F``, substate 91, no exit status); a job that
  :meth:`FakePbs.run` is running gets SIGTERM, SIGKILL after ``kill_delay``, and stays
  ``R`` until its processes are gone (then ``F``, substate 91, their exit status: 0 for
  a job that stopped cleanly); one only marked running exits 256+15 at once; unknown id
  153, finished 35.

The state lives in ``$FAKE_PBS_STATE/state.json``; scripts qsub received are copied
byte for byte to ``$FAKE_PBS_STATE/scripts/<seq>.sh``. :class:`FakePbs` is the test
side: it reads and edits the state and :meth:`FakePbs.run` executes a job's script the
way MoM would (from ``$HOME``, with the ``PBS_*`` variables of a batch job; only a
queued job, not a held one; and at its ``walltime`` it sends SIGTERM to every process of
the job, SIGKILL after ``kill_delay``, and records ``Exit_status`` -29).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

VERSION = "23.06.06"
PBSE_UNKJOBID = 153  # 15001 & 0xff
PBSE_HISTJOBID = 35  # 15139 & 0xff
PBSE_IVALREQ = 156  # 15004 & 0xff
SUBSTATE = {"Q": 10, "H": 22, "R": 42, "F_OK": 92, "F_FAIL": 93, "F_DELETED": 91}

_WITH_ARG = {"-F", "-W", "-N", "-q", "-A", "-l", "-J", "-o", "-e", "-j", "-r", "-v", "-S", "-a", "-m", "-M", "-P"}


def state_dir() -> Path:
    return Path(os.environ["FAKE_PBS_STATE"])


@contextlib.contextmanager
def _one_mom_at_a_time() -> Iterator[None]:
    """One fake job runs at a time on this machine, whichever test (pytest-xdist worker)
    runs it: every test's fake server numbers its jobs from 1, and hpctrain derives a job's
    rendezvous port from its id, so two ``1.pbshost`` jobs at once would share a port (a
    real server's ids are unique)."""
    with open(os.path.join(tempfile.gettempdir(), "hpctrain-fake-pbs-mom.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[Dict[str, Any]]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "state.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = root / "state.json"
        state = json.loads(path.read_text()) if path.exists() else {}
        state.setdefault("server", "pbshost")
        state.setdefault("history", True)
        state.setdefault("reject_x", False)
        state.setdefault("next_seq", 1)
        state.setdefault("jobs", {})
        state.setdefault("fake", {})
        yield state
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(path)


def _directives(script: bytes) -> List[List[str]]:
    """``#PBS`` options at the top of a script (until the first command line)."""
    out = []
    for raw in script.decode(errors="replace").splitlines()[1:]:
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("#"):
            break
        if line.startswith("#PBS"):
            out.append(shlex.split(line[4:]))
    return out


def _parse_options(args: Sequence[str]) -> Tuple[List[Tuple[str, str]], List[str]]:
    opts: List[Tuple[str, str]] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--" or not a.startswith("-"):
            break
        if a in _WITH_ARG:
            opts.append((a, args[i + 1]))
            i += 2
        else:
            opts.append((a, ""))
            i += 1
    return opts, list(args[i:])


def _finish(state: Dict[str, Any], job_id: str, exit_status: Optional[int], substate: int) -> None:
    job = state["jobs"][job_id]
    job["job_state"] = "F"
    job["substate"] = substate
    job["mtime"] = time.ctime()
    if exit_status is not None:
        job["Exit_status"] = exit_status
    for other in state["jobs"].values():  # afterany: release held successors
        if other.get("depend") == f"afterany:{job_id}@{state['server']}" and other["job_state"] == "H":
            other["job_state"], other["substate"] = "Q", SUBSTATE["Q"]
            del other["depend"]  # a released job shows no depend any more
    if not state["history"]:
        del state["jobs"][job_id]


def qsub(args: Sequence[str]) -> int:
    opts, rest = _parse_options(args)
    if not rest:
        print("usage: qsub [options] script", file=sys.stderr)
        return 2
    path = Path(rest[0])
    try:
        script = path.read_bytes()
    except OSError as e:
        print(f"qsub: script file:: {e.strerror}", file=sys.stderr)
        return 1
    root = state_dir()
    with _locked(root) as state:
        seq = state["next_seq"]
        state["next_seq"] = seq + 1
        (root / "scripts").mkdir(exist_ok=True)
        (root / "scripts" / f"{seq}.sh").write_bytes(script)
        resources: Dict[str, Any] = {}
        attrs: Dict[str, str] = {}
        from_script = [(d[0], d[1] if len(d) > 1 else "") for d in _directives(script) if d]
        for opt, value in from_script + opts:
            if opt == "-l":
                key, _, val = value.partition("=")
                resources[key] = val
            else:
                attrs[opt] = value
        is_array = "-J" in attrs
        job_id = f"{seq}[].{state['server']}" if is_array else f"{seq}.{state['server']}"
        depend = attrs.get("-W", "")[len("depend="):] if attrs.get("-W", "").startswith("depend=") else ""
        if "[" in depend and "[]" not in depend:
            # OpenPBS's qsub refuses a dependency on one subjob itself (live server)
            print("qsub: cannot have dependancy on subjob or range\nqsub: illegal -W value\n"
                  "usage: qsub [-a date_time] [-A account_string] ... [script | -- command [arg1 ...]]",
                  file=sys.stderr)
            state["next_seq"] = seq  # refused before it reached the server
            return 2
        after = [d for d in depend.split(":")[1:]] if depend else []
        unknown = [d for d in after if d not in state["jobs"]
                   or state["jobs"][d].get("job_state") == "F"]
        # a dependency on an unknown, purged or finished job: qsub prints an id and the
        # server drops the job at once (F, substate 92, no Exit_status, no comment)
        dropped = bool(unknown)
        held = bool(after) and not dropped
        cwd = os.getcwd()
        job: Dict[str, Any] = {
            "Job_Name": attrs.get("-N", path.name),
            "Job_Owner": f"{os.environ.get('USER', 'user')}@{socket.gethostname()}",
            "job_state": "H" if held else "Q",
            "queue": attrs.get("-q", "workq"),
            "server": state["server"],
            "ctime": time.ctime(),
            "Rerunable": "True" if attrs.get("-r", "y") == "y" else "False",
            "Resource_List": resources,
            "substate": SUBSTATE["H"] if held else SUBSTATE["Q"],
            "Variable_List": {"PBS_O_HOME": os.environ.get("HOME", ""), "PBS_O_WORKDIR": cwd,
                              "PBS_O_HOST": socket.gethostname(), "PBS_O_QUEUE": attrs.get("-q", "workq")},
            "run_count": 0,
            "Submit_arguments": " ".join(args),
        }
        if "-A" in attrs:
            job["Account_Name"] = attrs["-A"]
        if depend and held:
            job["depend"] = ",".join(f"afterany:{d}@{state['server']}" for d in after)
            for d in after:  # the parent shows who waits for it
                state["jobs"][d]["depend"] = f"beforeany:{job_id}@{state['server']}"
        if is_array:
            job["array"] = "True"
            job["array_indices_submitted"] = attrs["-J"]
        state["jobs"][job_id] = job
        state["fake"][job_id] = {"argv": list(args), "cwd": cwd, "script": f"scripts/{seq}.sh",
                                 "state_at_submit": job["job_state"], "output": attrs.get("-o")}
        if dropped:
            _finish(state, job_id, None, SUBSTATE["F_OK"])
    print(job_id)
    return 0


def qstat(args: Sequence[str]) -> int:
    opts, ids = _parse_options(args)
    flags = {o for o, _ in opts}
    root = state_dir()
    with _locked(root) as state:
        if "-x" in flags and state["reject_x"]:
            print("qstat: invalid option -- 'x'\nusage: qstat [-f] [-F json] job_identifier...", file=sys.stderr)
            return 2
        out: Dict[str, Any] = {"timestamp": int(time.time()), "pbs_version": VERSION,
                               "pbs_server": state["server"]}
        if "-x" in flags and not state["history"]:
            # OpenPBS without job history: no job at all, for queued and running ones too
            for job_id in ids:
                print(f"qstat: PBS is not configured to maintain job history {job_id}", file=sys.stderr)
            print(json.dumps(out, indent=4))
            return 0
        found: Dict[str, Any] = {}
        rc = 0
        for job_id in ids:
            job = state["jobs"].get(job_id)
            if job is None:
                print(f"qstat: Unknown Job Id {job_id}", file=sys.stderr)
                rc = PBSE_UNKJOBID
            elif job["job_state"] == "F" and "-x" not in flags:
                print(f"qstat: {job_id} Job has finished, use -x or -H to obtain historical job information",
                      file=sys.stderr)
                rc = PBSE_HISTJOBID
            else:
                found[job_id] = job
    if found:
        out["Jobs"] = found
    print(json.dumps(out, indent=4))
    return rc


def qdel(args: Sequence[str]) -> int:
    _, ids = _parse_options(args)
    rc = 0
    with _locked(state_dir()) as state:
        for job_id in ids:
            job = state["jobs"].get(job_id)
            if job is None:
                print(f"qdel: Unknown Job Id {job_id}", file=sys.stderr)
                rc = PBSE_UNKJOBID
            elif job["job_state"] == "F":
                print(f"qdel: Job has finished {job_id}", file=sys.stderr)
                rc = PBSE_HISTJOBID
            elif state["fake"].get(job_id, {}).get("running") and job["job_state"] == "R":
                # a job FakePbs.run is running: it signals the job, which stays R until
                # its processes are gone (then F, substate 91, their exit status)
                state["fake"][job_id]["delete_requested"] = True
            else:
                running = job["job_state"] in ("R", "E", "B")
                _finish(state, job_id, 256 + 15 if running else None, SUBSTATE["F_DELETED"])
        with (state_dir() / "qdel.log").open("a") as log:
            log.write(" ".join(ids) + "\n")
    return rc


def main(command: str, args: Sequence[str]) -> int:
    return {"qsub": qsub, "qstat": qstat, "qdel": qdel}[command](args)


class FakePbs:
    """Test-side access to the fake server's state (same file the commands use)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @classmethod
    def install(cls, root: Path, monkeypatch: Any,
                clear: Sequence[str] = ("PBS_", "OMPI_", "PMI_", "PALS_"),
                clear_names: Sequence[str] = ()) -> "FakePbs":
        """A fresh fake server for one test (pytest's ``monkeypatch``): these commands
        first on ``PATH``, ``FAKE_PBS_STATE`` at ``root``, and none of the variables of
        an enclosing batch job (names starting with ``clear``, or in ``clear_names``)."""
        import os

        for name in list(os.environ):
            if name.startswith(tuple(clear)) or name in clear_names:
                monkeypatch.delenv(name)
        here = os.path.dirname(os.path.abspath(__file__))
        monkeypatch.setenv("PATH", f"{here}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_PBS_STATE", str(root))
        server = cls(root)
        server.configure()
        return server

    def configure(self, **settings: Any) -> None:
        """``history`` (bool), ``reject_x`` (bool), ``server`` (str)."""
        with _locked(self.root) as state:
            state.update(settings)

    def jobs(self) -> Dict[str, Any]:
        with _locked(self.root) as state:
            return state["jobs"]

    def submission(self, job_id: str) -> Dict[str, Any]:
        """What qsub received: ``argv``, ``cwd`` and the copied ``script`` bytes."""
        with _locked(self.root) as state:
            info = dict(state["fake"][job_id])
        info["script"] = (self.root / info["script"]).read_bytes()
        return info

    def _mark(self, job_id: str, **marks: Any) -> Dict[str, Any]:
        """The fake's own notes on a job (``running``: a process runs it; ``delete_requested``)."""
        with _locked(self.root) as state:
            state["fake"][job_id].update(marks)
            return dict(state["fake"][job_id])

    def set(self, job_id: str, **attrs: Any) -> None:
        with _locked(self.root) as state:
            state["jobs"][job_id].update(attrs)

    def finish(self, job_id: str, exit_status: Optional[int]) -> None:
        with _locked(self.root) as state:
            ok = exit_status == 0
            _finish(state, job_id, exit_status, SUBSTATE["F_OK" if ok else "F_FAIL"])

    def run(self, job_id: str, hosts: Sequence[str] = ("fakenode1",), mpiprocs: int = 1,
            extra_env: Optional[Dict[str, str]] = None, timeout: float = 120,
            enforce_walltime: bool = True, kill_delay: float = 10.0) -> "subprocess.CompletedProcess[str]":
        """Run the job's script as MoM would: cwd ``$HOME``, batch ``PBS_*`` variables set,
        state R while it runs, then F with its exit status (256+N if killed by signal N).

        Only a queued job runs (a held one waits for its dependency: RuntimeError). With
        ``enforce_walltime`` (and a ``walltime`` resource) the job's processes get SIGTERM
        when the walltime is over and SIGKILL ``kill_delay`` s later, and the job ends with
        ``Exit_status`` -29 (pbs-facts.md; MoM is 1-16 s late in reality, never early).
        ``timeout`` (the test's own limit) kills every process of the job and raises
        :class:`subprocess.TimeoutExpired`."""
        with _one_mom_at_a_time():
            return self._run(job_id, hosts, mpiprocs, extra_env, timeout, enforce_walltime,
                             kill_delay)

    def _run(self, job_id, hosts, mpiprocs, extra_env, timeout, enforce_walltime, kill_delay):
        info = self.submission(job_id)
        with _locked(self.root) as state:
            job = state["jobs"][job_id]
            if job["job_state"] != "Q":
                raise RuntimeError(f"fake MoM: job {job_id} is in state {job['job_state']}, "
                                   "not Q; only a queued job can run")
            job.update(job_state="R", substate=SUBSTATE["R"], run_count=job["run_count"] + 1,
                       stime=time.ctime())
            name, queue = job["Job_Name"], job["queue"]
            walltime = _seconds(job["Resource_List"].get("walltime", "")) if enforce_walltime else None
        home = self.root / "home"
        aux = self.root / "aux"
        home.mkdir(exist_ok=True)
        aux.mkdir(exist_ok=True)
        nodefile = aux / job_id
        nodefile.write_text("".join(f"{h}\n" for h in hosts for _ in range(mpiprocs)))
        env = dict(os.environ)
        env.update({
            "HOME": str(home), "PBS_ENVIRONMENT": "PBS_BATCH", "PBS_JOBID": job_id, "PBS_JOBNAME": name,
            "PBS_QUEUE": queue, "PBS_O_WORKDIR": info["cwd"], "PBS_O_HOME": os.environ.get("HOME", ""),
            "PBS_O_QUEUE": queue, "PBS_NODEFILE": str(nodefile), "PBS_NODENUM": "0", "PBS_TASKNUM": "1",
            "PBS_JOBDIR": str(home), "TMPDIR": str(self.root / f"pbs.{job_id}"), "NCPUS": "1",
        })
        env.update(extra_env or {})
        script = self.root / "scripts" / f"{job_id.split('.')[0].split('[')[0]}.sh"
        # its own session, as under MoM: signals reach every process of the job
        proc = subprocess.Popen(["bash", str(script)], cwd=str(home), env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        self._mark(job_id, running=True)
        started = time.monotonic()
        killed_at_walltime = deleted = False
        limit = timeout if walltime is None else min(timeout, walltime)
        while True:
            left = limit - (time.monotonic() - started)
            try:
                out, err = proc.communicate(timeout=max(0.01, min(0.5, left)))
                break
            except subprocess.TimeoutExpired:
                if self._mark(job_id).get("delete_requested"):
                    # qdel: SIGTERM to the job's processes, SIGKILL after kill_delay; the
                    # job stays R until they are gone (live server: 10-17 s)
                    deleted = True
                    _kill_session(proc, kill_delay)
                    out, err = proc.communicate(timeout=max(1.0, timeout - (time.monotonic() - started)))
                    break
                if left > 0:
                    continue
            if walltime is None or walltime >= timeout:
                _kill_session(proc, 0)
                proc.communicate()
                self.finish(job_id, 256 + 9)
                raise subprocess.TimeoutExpired(proc.args, timeout)
            killed_at_walltime = True
            _kill_session(proc, kill_delay)
            out, err = proc.communicate(timeout=max(1.0, timeout - (time.monotonic() - started)))
            break
        status = proc.returncode if proc.returncode >= 0 else 256 - proc.returncode
        if killed_at_walltime:
            status = -29
        if deleted:
            with _locked(self.root) as state:
                _finish(state, job_id, status, SUBSTATE["F_DELETED"])
        else:
            self.finish(job_id, status)
        _deliver_output(info, name, job_id, out + err)
        return subprocess.CompletedProcess(proc.args, status, out, err)


def _deliver_output(info: Dict[str, Any], name: str, job_id: str, text: str) -> None:
    """PBS's own output file, as MoM copies it at the job's end: ``-o DIR/`` gives
    ``DIR/<job id>.OU``, ``-o FILE`` that file, no ``-o`` ``<name>.o<seq>[.<index>]`` in
    the submission directory (live server, pbs-live-findings.md)."""
    target = info.get("output")
    if target and target.endswith("/"):
        path = Path(target) / f"{job_id}.OU"
    elif target:
        path = Path(target)
    else:
        seq, _, rest = job_id.split(".")[0].partition("[")
        index = f".{rest.rstrip(']')}" if rest.rstrip("]") else ""
        path = Path(info["cwd"]) / f"{name}.o{seq}{index}"
    try:
        path.write_text(text)
    except OSError:
        pass  # MoM would keep it in PBS_HOME/undelivered


def _seconds(walltime: str) -> Optional[float]:
    """``[[HH:]MM:]SS`` → seconds; None for no (or an unreadable) walltime."""
    try:
        parts = [float(p) for p in walltime.split(":")] if walltime else []
    except ValueError:
        return None
    if not parts:
        return None
    seconds = 0.0
    for p in parts:
        seconds = seconds * 60 + p
    return seconds


def _kill_session(proc: "subprocess.Popen[str]", kill_delay: float) -> None:
    """SIGTERM to every process of the job's session, SIGKILL ``kill_delay`` s later."""
    import signal

    for sig, wait in ((signal.SIGTERM, kill_delay), (signal.SIGKILL, 0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        if wait:
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
