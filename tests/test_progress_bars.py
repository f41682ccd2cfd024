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

