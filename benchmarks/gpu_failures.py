"""A pytest plugin for ``gpu_session.sh``: each failed test's report is appended to the file
named by ``GPU_FAILURES`` as soon as it arrives (with pytest-xdist, in the controlling
process), so a run cut off by its time limit still leaves every traceback it reached."""
import os


def pytest_runtest_logreport(report):
    if report.failed:
        with open(os.environ["GPU_FAILURES"], "a") as out:
            out.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")
