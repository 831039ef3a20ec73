"""RankSignals: torchrun's SIGTERM ends a rank's script like an exception, and is only noted once
the script has ended (diagnosis and the part's write must finish); the script's end is timed."""

import os
import signal
import time

import pytest

from trainmedic.cli.run_ranks import RankSignals
from trainmedic.run.probe.runner import Terminated

pytestmark = [pytest.mark.torchrun]


def test_sigterm_ends_the_running_script_and_is_only_noted_after_it():
    before = signal.getsignal(signal.SIGTERM)
    with RankSignals() as signals:
        with pytest.raises(Terminated), signals.script():
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("not reached: Python runs the handler, which raises, before this line")
        ended = signals.script_ended_at
        assert ended is not None and abs(ended - time.time()) < 5
        os.kill(os.getpid(), signal.SIGTERM)  # during diagnosis: noted, this process lives on
        assert signals.received == signal.SIGTERM and signals.script_ended_at == ended
    assert signal.getsignal(signal.SIGTERM) == before
