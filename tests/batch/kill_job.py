"""A generation job run as its own process by the kill tests: ``kill_job.py OUT STOP_AFTER SIGNAL [FORMAT]``.

It sends itself SIGNAL once STOP_AFTER samples are made (0: never), mid-shard, so the signal
lands while a shard is being computed: SIGKILL leaves what a crash leaves, SIGINT/SIGTERM asks
generate() to finish the shard and stop.
"""

import os
import signal
import sys

from generators import params, tone, tone_global, tone_global_loop

from trainmedic import batch


class KillAfter:
    def __init__(self, samples: int, signum: int) -> None:
        self.samples, self.signum, self.done = samples, signum, 0

    def start(self, description, total):
        pass

    def advance(self, n):
        self.done += n
        if self.samples and self.done >= self.samples:
            self.samples = 0
            os.kill(os.getpid(), self.signum)

    def stop(self):
        pass


out, stop_after, signame = sys.argv[1], int(sys.argv[2]), sys.argv[3]
storage = sys.argv[4] if len(sys.argv) > 4 else "npy"
fn = {"": tone, "global": tone_global, "global_loop": tone_global_loop}[os.environ.get("GENERATOR", "")]
batch.generate(
    fn,
    params(300),
    out=out,
    batch_size=20,
    shard_size=40,
    seed=4,
    format=storage,
    progress=KillAfter(stop_after, getattr(signal, signame)),
)
print("finished")
