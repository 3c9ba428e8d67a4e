"""The login-node trap: a run with no site, on a machine with a batch system and outside
any allocation, would train on the login node without a word. :func:`warn_if_login_node`
says so once per process, with the fix."""
from __future__ import annotations

import logging
import os
import shutil
import warnings
from typing import Mapping, Optional

from hpctrain.common.registry import detect_scheduler, scheduler_class, scheduler_names
from hpctrain.errors import LoginNodeWarning
from hpctrain.common.log import progress_line

_warned = False


def login_node_message(env: Optional[Mapping[str, str]] = None, *, cli: bool = False
                       ) -> Optional[str]:
    """The warning for a run with no site here: a batch system's submit command
    (``sbatch``, ``qsub``, ``bsub``) is on PATH and this process is in no allocation
    (no ``SLURM_JOB_ID``, ``PBS_JOBID``, ``LSB_JOBID``); None otherwise."""
    env = os.environ if env is None else env
    if detect_scheduler(env) != "local":
        return None  # inside an allocation: its nodes are the place to train
    path = env.get("PATH", os.defpath)
    found = [(n, c.submit_command) for n in scheduler_names(batch_only=True)
             for c in [scheduler_class(n)] if c.submit_command
             and shutil.which(c.submit_command, path=path)]
    if not found:
        return None
    kind, command = found[0]
    if cli:
        fix = ("`hpctrain submit` it with --site NAME (`hpctrain sites` lists them), or "
               "run it inside an allocation (salloc, qsub -I); site = \"local\" in the job "
               "file (or --set site=local) runs here on purpose")
    else:
        fix = ('name a site (site="NAME", `hpctrain sites` lists them) or a scheduler '
               f'(scheduler="{kind}"); site="local" runs here on purpose')
    return (f"no site was named and this process is in no batch allocation, although "
            f"{command!r} is on PATH: training runs on this machine, probably a login node. "
            f"To use the cluster, {fix}")


def warn_if_login_node(*, cli: bool = False) -> Optional[str]:
    """Warn once per process (a :class:`~hpctrain.errors.LoginNodeWarning`) when
    :func:`login_node_message` has something to say; returns the message, or None."""
    global _warned
    if _warned:
        return None
    message = login_node_message(cli=cli)
    if message is None:
        return None
    _warned = True
    if cli:
        progress_line(f"[hpctrain] warning: {message}", level=logging.WARNING)
    else:
        warnings.warn(message, LoginNodeWarning, stacklevel=3)
    return message
