"""Sealing a process's environment (jobs/processes/private_env.py): the whole environment arrives, exactly, and only
the visible part stays readable in /proc. What an agent finds of a running Bridge: tests/integration/."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.processes import private_env

REPO = Path(__file__).resolve().parents[2]
names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF, blacklist_characters="="), min_size=1)
values = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"))
environments = st.dictionaries(names, values, max_size=12)

SEALED_CHILD = """
import ctypes, json, os, sys
sys.path.insert(0, sys.argv[1])
from jobs.processes.private_env import seal
seal()
shown = open("/proc/self/environ", "rb").read().split(b"\\0")
dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)
print(json.dumps({"whole": dict(os.environ), "shown": [v.decode(errors="replace") for v in shown if v],
                  "dumpable": dumpable}))
"""


@given(environments)
def test_a_handoff_carries_any_environment_exactly(env):
    shown, fd = private_env.handoff(env)
    with os.fdopen(fd, "rb") as carrier:
        assert json.loads(carrier.read()) == env
    assert shown.keys() - {private_env.FD_VARIABLE} <= env.keys()
    assert all(private_env.visible({name: ""}) for name in shown if name != private_env.FD_VARIABLE)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/environ and prctl, which Linux has")
@settings(max_examples=15, deadline=None)
@given(environments)
def test_a_sealed_process_keeps_everything_and_shows_only_the_visible_part(extra):
    env = {
        "PATH": os.environ["PATH"],
        "HOME": "/nowhere",
        "LANG": "C.UTF-8",
        **{f"SECRET_{k}": v for k, v in extra.items()},
    }
    done = subprocess.run(
        [sys.executable, "-c", SEALED_CHILD, str(REPO)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["whole"] == env, "os.environ holds the whole environment, exactly as started"
    assert not [line for line in seen["shown"] if line.startswith("SECRET_")], "/proc shows none of it"
    assert seen["dumpable"] == 0
