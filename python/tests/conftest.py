"""Shared fixtures; a skipped test is written to $DROVER_SKIPPED_TESTS (scripts/test lists them)."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")


def pytest_runtest_logreport(report):
    path = os.environ.get("DROVER_SKIPPED_TESTS")
    if path and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        with open(path, "a", encoding="utf-8") as f:
            f.write("python %s\t%s\n" % (report.nodeid, reason.replace("\n", " ")))


@pytest.fixture
def child_env(tmp_path):
    """An environment for a child Python that imports this checkout's drover."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DROVER_", "RANK", "WORLD_SIZE"))}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env["DROVER_CHECKPOINT_DIR"] = str(tmp_path / "ckpt")
    return env


@pytest.fixture
def python():
    return sys.executable
