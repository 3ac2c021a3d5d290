"""Debug mode: ``GRAPHNN_DEBUG=1`` in the environment when graphnn is imported turns it on
(``ENABLED``; any value but empty and ``0`` counts: ``enabled_in``). The test suite turns it on
(tests/conftest.py).

In debug mode the pass pipeline verifies the graph after every pass, so an invalid graph is
reported with the pass that made it (otherwise each compiled stage is verified once, at the
end), and the runtime checks every array a kernel returns against its value's IR type
(``runtime.debug.check_outputs``). Readers look ``ENABLED`` up at use, so it can be switched
at run time.
"""
from __future__ import annotations

import os


def enabled_in(environ) -> bool:
    """Whether ``environ`` (a mapping like ``os.environ``) turns debug mode on."""
    return environ.get("GRAPHNN_DEBUG", "") not in ("", "0")


ENABLED = enabled_in(os.environ)
