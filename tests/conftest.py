"""Shared test options.

``--update-goldens`` rewrites ``fixtures/**/*.expected.json`` from the current output, but refuses a
golden that contradicts its label (kind, phase, a figure, the named fix) unless that divergence is
recorded, as it is now, in ``tests/corpus_divergences.json``.

``--update-divergences`` rewrites ``tests/corpus_divergences.json`` (the tool's current value for
every aspect where it differs from a label) before the tests run, and lists what moved at the end.
After a merge that changes detection or advice, run both and review the diffs:

    python -m pytest tests/test_corpus.py --update-divergences
    python -m pytest tests/test_goldens.py --update-goldens
"""

from __future__ import annotations

import os
import shutil
import signal as _signal
import tempfile
from pathlib import Path

import pytest

# tests never touch the network: `fit --model org/name` reads the Hub through huggingface_hub only
# when it is installed and online; offline it fails fast and fit falls back to the catalog
os.environ["HF_HUB_OFFLINE"] = "1"
from hypothesis import HealthCheck, settings

# No wall-clock limits inside the tests: a 2-core CI machine under load takes as long as it takes.
# Hypothesis's per-example deadline and its too-slow health check are timing asserts; off for
# every property test (a test's own @settings overrides only what it names).
settings.register_profile("oomdoctor", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("oomdoctor")

# A test run started in the background of a non-interactive shell (``cmd &``) inherits SIGINT
# ignored, and so would every oomdoctor it starts: the tests that stop one with SIGINT then hang
# or see it finish on its own. Restore Python's handler here; exec gives the children the default.
if _signal.getsignal(_signal.SIGINT) is _signal.SIG_IGN:
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

_MOVED: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="Rewrite fixtures/**/*.expected.json from the current output (review the diff!). "
        "Refuses a golden that contradicts its label unless the divergence is recorded.",
    )
    parser.addoption(
        "--update-divergences",
        action="store_true",
        default=False,
        help="Rewrite tests/corpus_divergences.json (the tool's value wherever it differs from a "
        "corpus label) before running; review the diff!",
    )


_CACHE_DIR: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    # oomdoctor caches parsed rules and tables in $OOMDOCTOR_CACHE_DIR (oomdoctor/cache.py;
    # default ~/.cache/oomdoctor): the tests, and every oomdoctor they start (the environment is
    # inherited), use a temporary one of their own (one per xdist worker), removed at the end.
    if not _CACHE_DIR:
        _CACHE_DIR.append(tempfile.mkdtemp(prefix="oomdoctor-test-cache-"))
        os.environ["OOMDOCTOR_CACHE_DIR"] = _CACHE_DIR[0]
        # and no user's config file (oomdoctor.toml, ~/.config/oomdoctor/config.toml): an empty one
        os.environ["OOMDOCTOR_CONFIG"] = os.devnull
    if config.getoption("--update-divergences", default=False):
        from tests.corpus import rewrite_divergences

        _MOVED[:] = rewrite_divergences()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _CACHE_DIR:
        shutil.rmtree(_CACHE_DIR.pop(), ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if terminalreporter.config.getoption("--update-divergences", default=False):
        terminalreporter.section("corpus divergences rewritten")
        for line in _MOVED or ["nothing moved"]:
            terminalreporter.write_line(line)


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))
