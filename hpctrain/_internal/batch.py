"""``python -m hpctrain._internal.batch``: the batch step's command line before the move to
:mod:`hpctrain._internal.allocation.batch`. A job script rendered by an older hpctrain and
still queued (or requeued) runs it after an upgrade; it runs the batch step unchanged."""
import runpy

if __name__ == "__main__":
    runpy.run_module("hpctrain._internal.allocation.batch", run_name="__main__", alter_sys=True)
