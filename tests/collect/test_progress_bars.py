"""Progress bars that move with the work (weights per tensor, activations per layer pass): the counts
a bar or a callback receives."""

import pytest
import torch

from toolkit.activations import activation_stats
from toolkit.activations.progress import LayerProgress, layer_progress
from toolkit.collect.progress import Progress, make_progress
from toolkit.testing import tiny_model


class FakeBar:
    """Records what a tqdm bar is told."""

    def __init__(self):
        self.n, self.updates, self.postfix, self.closed = 0, [], [], False
        self.bar_format, self.total, self.shown = None, None, []

    def refresh(self):
        self.shown.append(self.bar_format)

    def reset(self, total=None):
        self.n, self.total = 0, total
        self.refresh()

    def update(self, n):
        self.updates.append(n)
        self.n += n

    def set_postfix_str(self, text, refresh=True):
        self.postfix.append(text)

    def close(self):
        self.closed = True


def test_progress_moves_the_bar_by_the_units_done_and_never_back():
    bar, heard = FakeBar(), []
    p = Progress(6, callback=lambda *a: heard.append(a), bar=bar)
    p.step("a")
    p(4, "b")  # a jump: the bar moves by 3
    p(2, "stale")  # counts never go back
    p.step("c")
    assert bar.updates == [1, 3, 1] and bar.n == p.done == 5
    assert bar.postfix == ["a", "b", "c"] and heard == [(1, 6, "a"), (4, 6, "b"), (5, 6, "c")]
    p.close()
    assert bar.closed


def test_make_progress_gives_a_bar_a_callback_or_nothing(capsys):
    p = make_progress(True, total=3, desc="activations", unit=" layer")
    for name in "xyz":
        p.step(name)
    p.close()
    assert "activations: 100%" in capsys.readouterr().err and "3/3" in p._bar.__str__()
    heard = []
    make_progress(lambda *a: heard.append(a), total=2, desc="x").step("one")
    assert heard == [(1, 2, "one")]
    silent = make_progress(False, total=2, desc="x")
    silent.step()
    assert silent.done == 1 and silent._bar is None and silent._callback is None


def test_a_bar_made_before_the_plan_says_what_it_opens_then_counts():
    bar, heard = FakeBar(), []
    p = Progress(None, callback=lambda *a: heard.append(a), bar=bar)
    p.status("opening checkpoint 1 of 2 {x}")
    p.status("opening checkpoint 2 of 2")
    p.begin(2)
    p.step("a")
    p.step("b")
    assert bar.shown == ["{desc}: opening checkpoint 1 of 2 {{x}}", "{desc}: opening checkpoint 2 of 2", None]
    assert bar.total == 2 and bar.n == 2 and bar.updates == [1, 1]
    assert heard == [(1, 2, "a"), (2, 2, "b")]  # the callback hears units only, never a total of None


def _frames(err: str) -> list[str]:
    return [f.strip() for f in err.replace("\r", "\n").split("\n") if f.strip()]


def test_weight_stats_bar_opens_the_checkpoint_then_moves_per_tensor(tmp_path, capsys):
    import toolkit
    from toolkit.collect.plan import plan_pieces
    from toolkit.errors import SourceNotFoundError
    from toolkit.testing import write_tiny_checkpoint

    path = write_tiny_checkpoint(tmp_path / "llama", "llama", num_layers=2)
    n = len(plan_pieces(path, cache=False).tensors)
    capsys.readouterr()
    toolkit.weight_stats(path, ["frobenius_norm"], cache=False)
    frames = _frames(capsys.readouterr().err)
    assert frames[0] == "weights: opening the checkpoint \u2026"
    assert f"0/{n} " in frames[1] and f"{n}/{n} " in frames[-1] and "weights: 100%" in frames[-1]
    with pytest.raises(SourceNotFoundError):  # the bar is on screen while the plan is made, and closed after
        toolkit.weight_stats(tmp_path / "missing", ["frobenius_norm"], cache=False)
    assert set(_frames(capsys.readouterr().err)) == {"weights: opening the checkpoint \u2026"}


def test_notebook_bar_shows_the_status_then_the_count():
    """tqdm's notebook bar (what ``tqdm.auto`` gives in Jupyter) with the status format, then begin()."""
    from tqdm.notebook import tqdm as notebook_tqdm

    from toolkit.collect.progress import _status_format

    bar = notebook_tqdm(total=None, desc="weights", unit="tensor", bar_format=_status_format("opening the checkpoint"))
    text = bar.container.children[2]
    p = Progress(None, bar=bar)
    assert text.value.replace("\u2007", " ") == "weights: opening the checkpoint"
    p.begin(3)
    assert bar.container.children[1].max == 3 and " 0/3 " in text.value.replace("\u2007", " ")
    for name in "abc":
        p.step(name)
    p.close()
    assert bar.container.children[1].value == 3 and bar.container.children[1].bar_style == "success"


def test_compare_bar_opens_each_checkpoint_then_moves_per_tensor(tmp_path, capsys):
    import toolkit
    from toolkit.testing import write_tiny_checkpoint

    a = write_tiny_checkpoint(tmp_path / "a", "llama", num_layers=2)
    b = write_tiny_checkpoint(tmp_path / "b", "llama", num_layers=2, seed=1)
    capsys.readouterr()
    toolkit.compare(a, b, ["relative_change"], cache=False)
    frames = _frames(capsys.readouterr().err)
    assert frames[:3] == ["compare: opening the checkpoints \u2026", "compare: opening checkpoint 1 of 2 \u2026",
                          "compare: opening checkpoint 2 of 2 \u2026"]
    assert "compare:   0%" in frames[3] and "compare: 100%" in frames[-1]


def test_layer_progress_counts_each_layer_pass_once_and_completes_each_batch():
    a, b, c = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    heard = []
    with layer_progress(lambda *x: heard.append(x), {0: [a, b], 1: [c]}, num_batches=2, backward=True) as lp:
        assert isinstance(lp, LayerProgress) and lp.per_batch == 4
        lp.start_batch(1, 5)
        x = torch.ones(1, 2)
        out = c(b(a(x)) + a(x))  # a runs twice: layer 0's forward still counts once
        out.sum().backward()
        lp.end_batch()
        lp.start_batch(2, 3)
        a(x)  # b and c never run: end_batch completes the count
        lp.end_batch()
    assert [h[:2] for h in heard] == [(1, 8), (2, 8), (3, 8), (4, 8), (8, 8)]
    assert [h[2] for h in heard[:4]] == ["batch 1/2 (5 texts): layer 0 forward", "batch 1/2 (5 texts): layer 1 forward",
                                         "batch 1/2 (5 texts): layer 1 backward",
                                         "batch 1/2 (5 texts): layer 0 backward"]
    assert heard[4][2] == "batch 2/2 (3 texts): done"
    a(x).sum().backward()  # the hooks are gone after the run
    assert len(heard) == 5


@pytest.mark.parametrize("gradients", [True, False])
def test_activation_stats_bar_moves_inside_a_batch(gradients):
    """One batch holding every text (as notebook 03's first batch holds 16 of 17): the count still moves."""
    heard = []
    texts = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]]
    activation_stats(tiny_model("llama", num_layers=3), texts, batch_size=8, gradients=gradients,
                     progress=lambda d, t, name: heard.append((d, t, name)))
    total = 3 * (2 if gradients else 1)
    assert [h[:2] for h in heard] == [(i, total) for i in range(1, total + 1)]
    assert heard[0][2] == "batch 1/1 (3 texts): layer 0 forward"
    assert heard[-1][2] == ("batch 1/1 (3 texts): layer 0 backward" if gradients else
                            "batch 1/1 (3 texts): layer 2 forward")

