"""Find the lines worth a closer look in one pass over a large block.

- :mod:`.interface`: the :class:`Prefilter` protocol and the needles searched for a rule pack's
  triggers;
- :mod:`.choose`: :func:`make_prefilter`, hyperscan when installed, else the pure path;
- :mod:`.hyperscan_path`: every needle in one hyperscan database (the ``fast`` extra);
- :mod:`.pure` and :mod:`.gates`: the pure-Python path, a few shared gates and sweeps instead of one
  ``bytes.find`` pass per needle;
- :mod:`.pool`: worker processes that prefilter a big file's chunks ahead of the scanner.
"""

from oomdoctor.prefilter.choose import make_prefilter
from oomdoctor.prefilter.interface import Prefilter, needles
from oomdoctor.prefilter.pure import PurePrefilter

__all__ = ["Prefilter", "PurePrefilter", "make_prefilter", "needles"]
