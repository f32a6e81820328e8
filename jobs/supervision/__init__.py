"""Running tasks: the supervisor (claim, spawn, pump, decide, limit, stop, finish), a run's recording, and one
runner per agent (pure protocol). Only the entry points (runbridge, supervise) import it; it changes rows only
through jobs.actions.
"""
