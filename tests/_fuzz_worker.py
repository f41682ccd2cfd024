"""The memory-limited worker process the fuzzers run each mutated input in, and its parent side.

A fuzz test module runs itself as the worker script: its ``__main__`` calls
:func:`serve` with the function that turns one request into an outcome
(``{"kind": "ok" | "typed" | "wrong" | "other", ...}``). The first requests
(``op`` ``"warm"``: the unmutated originals) run unlimited; after them the
worker limits its address space (``RLIMIT_AS``) to what it holds then plus
``SLACK`` and ``TIMES_THE_FILE`` times the largest original, so an input
that makes the toolkit allocate beyond its matrices crashes the worker (a
``"crash"`` outcome) instead of passing. The parent side, :class:`Worker`,
restarts the worker after a hang (``TIMEOUT`` seconds) or a crash.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

#: Seconds a worker may take over one input before it counts as a hang.
TIMEOUT = 30
#: Extra address space the worker may take for an input, on top of what it held after the originals.
SLACK = 256 * 2**20
#: ... and so many times the largest original file's size.
TIMES_THE_FILE = 4


def log(path: Path, reply: dict, what) -> None:
    """Append the outcome of one input to ``$FUZZ_LOG`` (a JSON line), when that is set."""
    if os.environ.get("FUZZ_LOG"):
        with open(os.environ["FUZZ_LOG"], "a") as fh:
            fh.write(json.dumps({"input": path.name, "reply": {k: v for k, v in reply.items() if k != "traceback"},
                                 "edits": repr(what)[:300]}) + "\n")


def vm_size() -> int:
    """This process's address space (``VmSize``), bytes."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def serve(outcome: Callable[[dict], dict]) -> None:
    """The worker's loop: one JSON request a line on stdin, one JSON outcome a line on stdout (with its
    ``seconds``); after each ``"warm"`` request the address space is limited (see the module docstring)."""
    import resource

    for line in sys.stdin:
        request = json.loads(line)
        start = time.perf_counter()
        reply = outcome(request)
        reply["seconds"] = round(time.perf_counter() - start, 3)
        if request["op"] == "warm":
            budget = vm_size() + TIMES_THE_FILE * request["largest"] + SLACK
            resource.setrlimit(resource.RLIMIT_AS, (budget, resource.getrlimit(resource.RLIMIT_AS)[1]))
            reply["budget"] = budget
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


class Worker:
    """One worker process running ``script`` (a fuzz test module), restarted after a hang or a crash.

    Attributes
    ----------
    originals : list of dict
        The warm requests (without ``op``), asked again after each restart; each must come back ``"ok"``.
    """

    def __init__(self, script: str | os.PathLike):
        self.script = str(script)
        self.originals: list[dict] = []
        self.proc = None
        self.warm = False
        self._spawn()

    def _spawn(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                           str(Path(__file__).resolve().parent)]),
                   PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false", TOOLKIT_CACHE_DIR="off")
        self.proc = subprocess.Popen([sys.executable, "-u", self.script], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.warm = False

    def _start(self) -> None:
        if self.proc is None:
            self._spawn()
        self.warm = True
        largest = max((Path(r["path"]).stat().st_size if Path(r["path"]).is_file() else
                       sum(p.stat().st_size for p in Path(r["path"]).iterdir()) for r in self.originals), default=0)
        for request in self.originals:
            reply = self.ask({**request, "op": "warm", "largest": largest}, timeout=300)
            assert reply["kind"] == "ok", (request, reply)

    def ask(self, request: dict, timeout: float) -> dict:
        """Send one request; its outcome, ``{"kind": "timeout"}`` after ``timeout`` s, ``{"kind": "crash"}``."""
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.close()
            return {"kind": "timeout", "detail": f"no answer within {timeout} s"}
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.proc = None
            return {"kind": "crash", "detail": f"the worker died (exit status {code}): memory limit or a signal"}
        return json.loads(line)

    def run(self, request: dict) -> dict:
        """The outcome of ``request`` (``op`` ``"open"``), warming a fresh worker first."""
        if self.proc is None or not self.warm:
            self._start()
        return self.ask({**request, "op": "open"}, TIMEOUT)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
