"""Which top-level packages a front door imports: each door in a fork of one fresh interpreter.

Run as a script, ``python tests/_import_probe.py DOORS``, where ``DOORS`` is a
JSON object ``{name: {"setup": code, "code": code}}``: the interpreter imports
what every door needs anyway (numpy, torch, xarray, and builds xarray's first
Dataset, which imports ``dask`` where it is installed: xarray's doing, not the
toolkit's), then forks once per door. The fork runs ``setup`` (what a library
the door uses does on its own, e.g. xarray's ``to_netcdf`` asking dask for its
scheduler), notes the top-level packages loaded, runs ``code`` (``toolkit`` not
imported yet; ``code`` sets ``result`` to something JSON can write) and sends
back the top-level packages it loaded beyond those noted, and ``result``. One
interpreter start for all doors, and each door sees the same untouched
interpreter. Prints one JSON object: ``{"baseline": [...], name: {"new": [...],
"result": ..., "error": "..."}}``.

Only the standard library is imported here before the baseline.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def top_level() -> set[str]:
    """The top-level package of every module loaded so far."""
    return {name.partition(".")[0] for name in list(sys.modules)}


def run_door(door: dict) -> dict:
    """Run ``door["setup"]``, then ``door["code"]`` here, and report what the code imported beyond what was
    loaded before it."""
    scope: dict = {}
    before = top_level()
    try:
        exec(compile(door.get("setup", ""), "<setup>", "exec"), {})
        before = top_level()
        exec(compile(door["code"], "<door>", "exec"), scope)
        return {"new": sorted(top_level() - before), "result": scope.get("result")}
    except BaseException:  # noqa: BLE001 - reported to the test, which fails with it
        return {"new": sorted(top_level() - before), "error": traceback.format_exc()}


def main(doors: dict[str, dict]) -> dict:
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import xarray

    xarray.Dataset({"x": ("a", [1.0])})
    report: dict = {"baseline": sorted(top_level())}
    for name, door in doors.items():
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the door's own copy of the interpreter
            os.close(read)
            try:
                payload = json.dumps(run_door(door), default=repr).encode()
                with os.fdopen(write, "wb") as out:
                    out.write(payload)
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as inp:
            data = inp.read()
        os.waitpid(pid, 0)
        report[name] = json.loads(data) if data else {"new": [], "error": "the fork sent nothing back"}
    return report


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
