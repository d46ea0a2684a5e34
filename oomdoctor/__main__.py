"""``python -m oomdoctor``."""

from oomdoctor.cli import main

main()
