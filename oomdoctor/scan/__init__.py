"""The parts of the streaming scanner (:class:`oomdoctor.scanner.Scanner`), one per seam.

Data flows one way through them:

- :mod:`.lines` — line assembly and windows: blocks of bytes become candidate lines (the
  prefilters say which), recent lines, traceback frames, phase markers and progress lines; a
  line holding a rule trigger is queued;
- :mod:`.evidence` — phase evidence set aside: lines that can only tell a phase or a periodic
  fact are not read where they stand, and what of them a failure needs is read lazily;
- :mod:`.matching` — rule matching: a queued line and its window against its rules;
- :mod:`.folding` — folding retellings across ranks into one finding: a match opens a finding or
  merges into the one it retells;
- :mod:`.lifetime` — open-finding lifetime: a finding stays open while frames and markers of its
  step may still follow, then closes with its phase; the report at the end.

:mod:`.state` holds what they share: the limits, the scan's attributes, an open finding.
"""
