"""Drawing asked for from another thread runs in the main thread: through a real kernel's loop, or a
real tornado loop; at once where there is no loop."""

import asyncio
import threading

from toolkit.widgets.main_thread import in_main_thread, kernel_loop


def _from_a_thread(fn, *args, **kws):
    t = threading.Thread(target=in_main_thread, args=(fn, *args), kwargs=kws)
    t.start()
    t.join()


def test_without_a_loop_the_call_runs_at_once_in_the_calling_thread():
    seen = []
    assert kernel_loop() is None  # pytest is no kernel
    _from_a_thread(lambda x: seen.append((x, threading.current_thread().name)), 7)
    assert len(seen) == 1 and seen[0][0] == 7 and seen[0][1] != threading.main_thread().name


def test_in_the_main_thread_the_call_runs_at_once():
    seen = []
    in_main_thread(seen.append, 3, loop=object())  # a loop is never used from the main thread
    assert seen == [3]


def test_a_call_from_a_thread_runs_in_the_loops_thread_after_the_code_running_there():
    from tornado.ioloop import IOLoop

    seen, order = [], []

    async def main():
        loop = IOLoop.current()
        _from_a_thread(lambda: seen.append(threading.current_thread().name), loop=loop)
        order.append("the running code went on")  # the call waits for the loop to be free
        assert seen == []
        for _ in range(100):
            await asyncio.sleep(0.01)
            if seen:
                break

    asyncio.run(main())
    assert seen == [threading.main_thread().name] and order == ["the running code went on"]


def test_in_a_real_kernel_a_threads_call_runs_in_the_kernels_main_thread_between_cells():
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        def run(code):
            out = []
            reply = kc.execute_interactive(code, timeout=60, output_hook=lambda m: out.append(m))
            assert reply["content"]["status"] == "ok", reply["content"]
            return "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")

        assert run("import threading\n"
            "from toolkit.widgets.main_thread import in_main_thread, kernel_loop\n"
            "seen = []\n"
            "t = threading.Thread(target=in_main_thread, args=(lambda: seen.append("
            "threading.current_thread() is threading.main_thread()),))\n"
            "t.start(); t.join()\n"
            "print(kernel_loop() is not None, seen)").strip() == "True []"  # not beside the cell
        assert run("import time\n"
                   "for _ in range(100):\n"
                   "    if seen: break\n"
                   "    time.sleep(0.01)\n"
                   "print(seen)").strip() == "[True]"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
