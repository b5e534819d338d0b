"""cProfile of the serving threads for a window the operator picks, to find the server's hot paths.

With IDXMONGO_PROFILE=<path> in the environment, the first SIGUSR1 starts a window and the second ends it:
each connection thread that serves a request in the window profiles itself (cProfile profiles only the
thread that enables it) from that request on, until its first request after the window ended; a little
after the end the threads' profiles are merged and written to <path> (pstats format; read it with
`python3 -m pstats <path>`), those of threads that served nothing since as they stood then. Times are the
threads' CPU time (time.thread_time), not wall time: a thread waiting for the store lock, the GIL or its
socket counts nothing.
Without the variable nothing is profiled and the serving path pays one attribute test per request.
"""

import cProfile
import logging
import os
import pstats
import signal
import threading
import time

LOG = logging.getLogger("idxmongo")
DUMP_DELAY_S = 1.5  # after the window: time for the busy threads to serve a request and stop profiling


class Profiler:
    """The window's state and the threads' profiles."""

    def __init__(self, path):
        self.path = path
        self.active = False
        self.lock = threading.Lock()
        self.local = threading.local()
        self.profiles = []  # the profiles the threads made in the window
        self.started = self.ended = None

    def toggle(self, *_):
        """SIGUSR1: start the window, or end it and write the profile a little later."""
        if not self.active:
            with self.lock:
                self.profiles = []
            self.started = time.monotonic()
            self.active = True
            LOG.debug("profiling started")
        else:
            self.active = False
            self.ended = time.monotonic()
            threading.Thread(target=self._dump_later, name="profile-dump", daemon=True).start()

    def before_request(self):
        """In a serving thread, before each request: start or stop this thread's profile."""
        prof = getattr(self.local, "prof", None)
        if self.active and prof is None:
            prof = self.local.prof = cProfile.Profile(time.thread_time)
            with self.lock:
                self.profiles.append(prof)
            prof.enable()
        elif not self.active and prof is not None:
            prof.disable()
            self.local.prof = None

    def _dump_later(self):
        """Merge the threads' profiles into self.path."""
        time.sleep(DUMP_DELAY_S)
        with self.lock:
            profiles, self.profiles = self.profiles, []
        if not profiles:
            LOG.debug("profiling: no thread served a request in the window")
            return
        stats = pstats.Stats(_Snapshot(profiles[0]))
        for prof in profiles[1:]:
            stats.add(_Snapshot(prof))
        stats.dump_stats(self.path)
        LOG.debug("profiling: %d threads over %.1f s written to %s", len(profiles), self.ended - self.started,
                  self.path)


class _Snapshot:
    """A profile as pstats reads it, taken without disabling it: a thread that has not stopped its own
    profile yet may still be adding to it (cProfile's disable acts on the calling thread alone)."""

    def __init__(self, prof):
        self.prof = prof
        self.stats = None

    def create_stats(self):
        """What pstats.Stats calls: the profile's entries as they stand (the GIL held)."""
        self.prof.snapshot_stats()
        self.stats = self.prof.stats


def from_environment():
    """The Profiler of IDXMONGO_PROFILE (SIGUSR1 toggles it), or None when the variable is not set."""
    path = os.environ.get("IDXMONGO_PROFILE")
    if not path:
        return None
    profiler = Profiler(path)
    signal.signal(signal.SIGUSR1, profiler.toggle)
    return profiler
