"""The containers every stage reads: the Analysis, the event contract, the stats and configuration
schemas, the findings, frame helpers. Imports nothing above inputs/, outputs/ and clock/."""

VERSION = "0.1.0"  # preemptlog's version, stamped on every output (preemptlog.__version__)
