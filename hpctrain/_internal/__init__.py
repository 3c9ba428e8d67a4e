"""hpctrain's internals: the worker session, the run directory, the supervisor. Not a public API;
it is a regular package so that the docs' API reference can document ``TrainContext``."""
