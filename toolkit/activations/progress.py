"""Progress of ``activation_stats`` layer by layer, so the bar moves inside a batch.

One batch of 16 texts is one forward and one backward pass that take most of a
run; a bar counting batches sits at 0/2 for nearly all of it. Here a unit is a
*layer pass*: the forward pass of a layer ends when every hooked module of the
layer has run, its backward pass when every component weight of the layer
holds its gradient (``register_post_accumulate_grad_hook``). A run has
``batches x layers x passes`` units (passes: 2 with gradients, else 1).
"""

from __future__ import annotations

from collections import defaultdict

from toolkit.collect.progress import Progress, make_progress


def layer_progress(progress, modules: dict, *, num_batches: int, backward: bool) -> LayerProgress:
    """A :class:`LayerProgress` over a tqdm bar, a callback, or nothing.

    Parameters
    ----------
    progress : bool or callable
        As :func:`toolkit.collect.progress.make_progress` takes it.
    modules : dict
        ``{layer: [module, ...]}``: the component modules of each layer; with
        ``backward``, their ``.weight`` mark the layer's backward pass.
    num_batches : int
    backward : bool
        Whether each batch has a backward pass.
    """
    weights = {layer: [m.weight for m in mods] for layer, mods in modules.items()} if backward else {}
    total = num_batches * (len(modules) + len(weights))
    report = make_progress(progress, total=total, desc="activations", unit=" layer")
    return LayerProgress(report, modules, weights, num_batches=num_batches)


class LayerProgress:
    """Counts the layer passes of each batch as the hooks see them end, and reports them.

    Parameters
    ----------
    report : Progress
        Hears one unit per finished layer pass, named
        ``"batch 1/2 (16 texts): layer 3 forward"``.
    modules : dict
        ``{layer: [module, ...]}``, the modules whose forward hooks mark a
        layer's forward pass (each counted once per batch).
    weights : dict
        ``{layer: [weight, ...]}``, the parameters whose accumulated gradient
        marks a layer's backward pass; empty without a backward pass.
    num_batches : int

    Use as a context manager around the batch loop (the hooks live inside
    it) and call :meth:`start_batch` / :meth:`end_batch` around each batch.
    ``end_batch`` completes the batch's count even when a hook did not fire
    (a module that never ran), so the bar ends at its total.
    """

    def __init__(self, report: Progress, modules: dict, weights: dict, *, num_batches: int):
        self.report = report
        self.modules = {layer: list(dict.fromkeys(mods)) for layer, mods in modules.items()}
        self.weights = {layer: list({id(w): w for w in ws}.values()) for layer, ws in weights.items()}
        self.num_batches = num_batches
        self.per_batch = len(self.modules) + len(self.weights)
        self._seen: dict = defaultdict(set)
        self._batch, self._texts, self._handles = 0, 0, []

    def __enter__(self):
        for layer, mods in self.modules.items():
            for m in mods:
                self._handles.append(m.register_forward_hook(self._forward_hook(layer, m)))
        for layer, ws in self.weights.items():
            for w in ws:
                self._handles.append(w.register_post_accumulate_grad_hook(self._grad_hook(layer, w)))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        self.report.close()
        return False

    def start_batch(self, index: int, num_texts: int) -> None:
        """Batch ``index`` (from 1) of ``num_texts`` texts begins."""
        self._batch, self._texts = index, num_texts
        self._seen.clear()

    def end_batch(self) -> None:
        """The batch is over: its count is complete."""
        self.report(self._batch * self.per_batch, self._name("done"))

    def _name(self, what: str) -> str:
        texts = f"{self._texts} text" + ("" if self._texts == 1 else "s")
        return f"batch {self._batch}/{self.num_batches} ({texts}): {what}"

    def _mark(self, key, layer: int, part, expected: int) -> None:
        seen = self._seen[key]
        if part in seen:
            return
        seen.add(part)
        if len(seen) == expected:
            self.report.step(self._name(f"layer {layer} {key[0]}"))

    def _forward_hook(self, layer: int, module):
        expected = len(self.modules[layer])

        def hook(_module, _args, _output):
            self._mark(("forward", layer), layer, id(module), expected)

        return hook

    def _grad_hook(self, layer: int, weight):
        expected = len(self.weights[layer])

        def hook(_param):
            self._mark(("backward", layer), layer, id(weight), expected)

        return hook
