"""Imported by the trial forkservers (:data:`suite.executors.local.FORKSERVER_PRELOAD`) for its effect: the
provenance caches are filled once, in the server (:func:`suite.provenance.warm`), so every trial process it forks is
born with them instead of running git and reading package metadata when it records its provenance."""

from suite.provenance import warm

warm()
