"""What Bridge knows of the agent CLIs installed on this machine, without running a task: the environment an
executor child gets, whether each executor can run (executors), and Hermes' install and skills (hermes_skills).
It imports jobs.core and jobs.processes only: the supervisor, the adapters and the actions all ask it.
"""
