"""The train-your-own panel: a click trains in the background, the bar moves, the curves are the run's."""

import threading

import numpy as np
import pytest

from toolkit.errors import InvalidOptionError, UnknownActivationError
from toolkit.lab import run_experiment
from toolkit.widgets.lab_train import WARNING, train_your_own

#: A tiny run: 2 layers of width 16 on 64 images, 16 test images measured.
TINY = dict(depth=2, train_subset=64, eval_batch=16)


def test_a_click_trains_in_the_background_and_draws_the_runs_numbers():
    panel = train_your_own("x³/16", epochs=2, **TINY)
    c = panel.controls
    assert [w.disabled for w in c.values()] == [False, False, False] and panel.result is None
    seen = []
    panel.progress.observe(lambda ch: seen.append((ch["new"], threading.current_thread().name)), names="value")
    c["epochs"].value = 3
    c["run"].click()
    assert c["run"].disabled and c["run"].description == "Training\u2026"  # the click returned while it trains
    ds = panel.wait(timeout=120)
    assert [v for v, _ in seen] == [1, 2, 3, 4, 5, 6]  # one step per epoch of each activation
    assert {name for _, name in seen} == {"toolkit-lab-train"}  # the epochs ran in the thread
    assert panel.progress.max == 6 and panel.progress.bar_style == "success"
    assert list(ds.activation.values) == ["softmax", "x³/16"] and list(ds.epoch.values) == [0, 1, 2, 3]
    # the same numbers as the run called directly (same seed, same settings)
    direct = run_experiment(["softmax", "x³/16"], epochs=3, preset="fast", checkpoints=False, **TINY)
    np.testing.assert_allclose(ds.attention_norm.values, direct.attention_norm.values, rtol=1e-6)
    # the chart holds each layer's attention norm, one line per activation
    spec = panel.chart.spec
    assert len(spec["panels"]) == 2
    for layer, p in enumerate(spec["panels"]):
        assert [s["label"] for s in p["series"][:2]] == ["softmax", "x³/16"]
        np.testing.assert_allclose(p["series"][1]["y"], ds.attention_norm.sel(activation="x³/16", layer=layer))
    # the accuracies are printed with the warning, as the Dataset has them
    acc = ds.test_accuracy.isel(epoch=-1)
    want = f"softmax {100 * float(acc[0]):.1f} %, x³/16 {100 * float(acc[1]):.1f} %"
    assert panel.accuracy_text() == want and want in panel.status.value
    assert "means nothing yet" in WARNING and "means nothing yet" in panel.status.value
    assert not c["run"].disabled and c["run"].description == "Run"
    assert panel.figure_png()[:4] == b"\x89PNG"  # drawn by wait in this (the main) thread
    assert "image/png" in panel._repr_mimebundle_()


def test_a_second_click_while_training_starts_nothing_and_a_failure_is_shown():
    panel = train_your_own("x/1", epochs=1, background=False, **TINY)
    assert panel.run().runs == 1 and panel.result is not None
    broken = train_your_own("x/1", epochs=1, dim=15, **TINY)  # 15 is not divisible by the 2 heads
    broken.run()
    broken.run()  # ignored if the first is still going
    with pytest.raises(InvalidOptionError, match="heads"):
        broken.wait(timeout=60)
    assert broken.runs in (1, 2) and broken.result is None and broken.progress.bar_style == "danger"
    assert "a divisor of dim 15" in broken.status.value and not broken.controls["run"].disabled


def test_options_are_checked_before_any_work():
    with pytest.raises(InvalidOptionError, match=r"toolkit.widgets.train_your_own: bogus=1 is not valid"):
        train_your_own(bogus=1)
    with pytest.raises(InvalidOptionError, match="epochs=0"):
        train_your_own(epochs=0)
    with pytest.raises(UnknownActivationError):
        train_your_own("x^^2")
    panel = train_your_own("x^5/7")  # not in the menu: added to it
    assert panel.controls["activation"].options[-1] == "x^5/7"
    from toolkit.lab.attention import parse_activation
    from toolkit.widgets.lab_train import CHOICES

    assert [parse_activation(a).label for a in CHOICES] == list(CHOICES)  # every menu entry is a label it reads


def test_the_static_figure_is_drawn_in_the_kernels_thread_never_in_the_training_thread(monkeypatch):
    """matplotlib is not thread-safe: the run ends by scheduling the PNG on the kernel's io_loop."""
    import IPython

    import toolkit.widgets.lab as lab

    drawn, scheduled = [], []
    real = lab.grid_png
    monkeypatch.setattr(lab, "grid_png", lambda *a, **k: (drawn.append(threading.current_thread().name),
                                                           real(*a, **k))[1])

    class Loop:
        def add_callback(self, fn, *args):
            scheduled.append((fn, args, threading.current_thread().name))

    class Shell:
        kernel = type("Kernel", (), {"io_loop": Loop()})()

    monkeypatch.setattr(IPython, "get_ipython", lambda: Shell())
    panel = train_your_own("x/16", epochs=1, **TINY).run()
    panel._done.wait(120)
    assert drawn == [] and panel._png == b""  # nothing drawn by the training thread
    ((fn, args, where),) = scheduled
    assert where == "toolkit-lab-train"
    fn(*args)  # what the kernel's loop does, in its own (here: this) thread
    assert drawn == [threading.current_thread().name] and panel._png[:4] == b"\x89PNG"
