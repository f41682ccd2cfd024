"""Run a piece of drawing in the Jupyter kernel's main thread, whatever thread asks for it.

matplotlib is not thread-safe: its mathtext parser (pyparsing, with a shared packrat cache) and its
font cache are module state. A live pass ends in its own thread; when that thread drew the results a
notebook asked for (``live.when_done(f)``, the explorer's PNG for a saved notebook) while the kernel ran
the next cell, which draws too, one of them failed at random with ``ParseException: exception raised in
parse action`` (seen in Voilà on a loaded machine). In a kernel, :func:`in_main_thread` hands the call to
the kernel's event loop (``kernel.io_loop``, a tornado ``IOLoop`` whose ``add_callback`` may be called
from any thread), which runs it between cells, never beside one. Outside a kernel (plain Python, a test)
there is no loop to hand it to, and the call runs at once in the calling thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def kernel_loop():
    """The running Jupyter kernel's event loop (``get_ipython().kernel.io_loop``), or None outside one."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with ipywidgets
        return None
    kernel = getattr(get_ipython(), "kernel", None)
    return getattr(kernel, "io_loop", None)


def in_main_thread(fn: Callable, *args, loop=None) -> None:
    """Call ``fn(*args)`` in the main thread: now when called there, else through the kernel's loop.

    Parameters
    ----------
    fn : callable
        What to run; its result is dropped, and what it raises is reported by the loop (log), so it
        should catch what it can show.
    *args
        Its arguments.
    loop : tornado.ioloop.IOLoop, optional
        The loop to hand the call to (default :func:`kernel_loop`). Without one the call runs at once in
        the calling thread.
    """
    if threading.current_thread() is threading.main_thread():
        fn(*args)
        return
    loop = kernel_loop() if loop is None else loop
    if loop is None:
        fn(*args)
        return
    loop.add_callback(fn, *args)
