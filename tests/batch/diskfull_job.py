"""kill_job.py's job on a disk that is full: RLIMIT_FSIZE with SIGXFSZ ignored makes a write past
the limit fail with EFBIG, as a full disk fails with ENOSPC. ``diskfull_job.py OUT LIMIT``."""

import resource
import signal
import sys

from generators import params, tone

from trainmedic import batch
from trainmedic.errors import BatchError

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
_soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), hard))
try:
    batch.generate(tone, params(300), out=sys.argv[1], batch_size=20, shard_size=40, seed=4, progress=False)
except BatchError as exc:
    print(exc)
    sys.exit(3)
