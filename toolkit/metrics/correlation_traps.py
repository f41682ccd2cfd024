r"""Correlation traps: the spectrum of the element-shuffled matrix, ``rand_distance`` and ``rand_num_spikes``.

Shuffling the entries of :math:`W` keeps their distribution (and
:math:`\|W\|_F`) but destroys every correlation, so its ESD is close to a
Marchenko-Pastur bulk; eigenvalues of the shuffled matrix far beyond the
bulk ("correlation traps") come from a few very large entries. Follows
WeightWatcher 0.7.7's ``analyze(randomize=True)`` (``apply_random_esd``,
``random_eigenvalues``, ``jensen_shannon_distance`` there):

- ``rand_distance``: Jensen-Shannon distance (natural log) between the
  sorted eigenvalue vector of :math:`W` and that of its shuffle, each
  normalised to sum 1 and compared index by index:
  :math:`\sqrt{(\mathrm{KL}(p\|m) + \mathrm{KL}(q\|m))/2}`,
  :math:`p = \lambda^{\uparrow}/\sum\lambda`, :math:`q` likewise for the shuffle,
  :math:`m = (\lambda^{\uparrow} + \lambda_{rand}^{\uparrow}) / \sum(\ldots)`.
- ``rand_num_spikes``: the spikes of the Marchenko-Pastur fit
  (:mod:`~toolkit.metrics.marchenko_pastur`) of the shuffled spectrum; as in
  WeightWatcher, a matrix with :math:`\min(m, n) < 100` pools 5 shuffles.

The shuffle is a seeded permutation (``seed`` option, default 0;
``numpy.random.default_rng(seed)``, replica :math:`r` uses seed
``(seed, r)``), so a value is reproducible; WeightWatcher draws from
NumPy's global generator, so its value is one sample of the same
distribution. The shuffled spectrum (one extra factorisation per replica)
is memoised per matrix and shared by the two metrics.

Opt-in metrics: ``weight_stats(metrics=None)`` does not compute them.

References
----------
Martin, C. H. & Mahoney, M. W. (2021). *JMLR* 22(165), sec. 5.5 (randomized ESD).
Martin, C. H. & Mahoney, M. W. (2021). Post-mortem on a deep learning contest:
a Simpson's paradox and the complementary roles of scale metrics versus shape
metrics. arXiv:2106.00734 (correlation traps).
Lin, J. (1991). Divergence measures based on the Shannon entropy. *IEEE Trans.
Inf. Theory* 37(1), 145-151.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from toolkit.metrics.marchenko_pastur import fit_marchenko_pastur, register_opt_in
from toolkit.metrics.registry import DegenerateMatrix
from toolkit.metrics.tensor_memo import TensorMemo

SMALL_SIDE = 100  # WeightWatcher apply_random_esd: n_comp < 100 -> 5 replicas
SMALL_REPLICAS = 5

_SPECTRA = TensorMemo()


def shuffled_eigenvalues(w: torch.Tensor, *, seed: int = 0, replicas: int = 1) -> np.ndarray:
    r"""Eigenvalues of :math:`W_\pi^\top W_\pi` for ``replicas`` seeded shuffles :math:`W_\pi` of the entries.

    Parameters
    ----------
    w : torch.Tensor, shape (m, n)
    seed : int
        Replica ``r`` permutes with ``numpy.random.default_rng((seed, r))``.
    replicas : int

    Returns
    -------
    numpy.ndarray, shape (replicas, min(m, n))
        Each row ascending.
    """
    from toolkit.metrics.spectral import singular_values

    flat = w.detach().reshape(-1)
    rows = []
    for r in range(replicas):
        perm = np.random.default_rng((int(seed), r)).permutation(flat.numel())
        shuffled = flat[torch.from_numpy(perm).to(flat.device)].reshape(w.shape)
        sv = singular_values(shuffled, device=w.device).numpy()
        rows.append(np.sort(sv * sv))
    return np.stack(rows)


def _shared(w, seed: int, name: str) -> np.ndarray:
    if w is None or w.ndim != 2 or w.numel() == 0:
        raise DegenerateMatrix("not a non-empty matrix", name)
    replicas = SMALL_REPLICAS if min(w.shape) < SMALL_SIDE else 1
    return _SPECTRA.get(w, ("shuffled", int(seed), replicas),
                        lambda: shuffled_eigenvalues(w, seed=seed, replicas=replicas))


def jensen_shannon_distance(p, q) -> float:
    r"""Jensen-Shannon distance :math:`\sqrt{(\mathrm{KL}(\hat p\|\hat m) + \mathrm{KL}(\hat q\|\hat m))/2}`
    (natural log) of two non-negative vectors of one length, :math:`\hat p, \hat q` each normalised
    to sum 1, :math:`\hat m = (p + q) / \sum (p + q)`; between 0 and :math:`\sqrt{\ln 2}`.

    The midpoint is of the raw vectors (WeightWatcher's ``jensen_shannon_distance``), so this equals
    ``scipy.spatial.distance.jensenshannon(p, q)`` when ``p`` and ``q`` have the same sum, as the
    spectra of a matrix and of its shuffle do (both sum to :math:`\|W\|_F^2`).
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    pn, qn = p / p.sum(), q / q.sum()
    m = (p + q) / (p.sum() + q.sum())

    def kl(a):
        nz = a > 0
        return float(np.sum(a[nz] * np.log(a[nz] / m[nz])))

    return math.sqrt(max(0.0, (kl(pn) + kl(qn)) / 2.0))


def rand_distance(w, s, *, seed: int = 0) -> float:
    r"""Jensen-Shannon distance between the sorted spectra of :math:`W` and of its element shuffle
    (WeightWatcher's ``rand_distance``; 0 for a matrix with no structure beyond its entry distribution).

    Raises
    ------
    DegenerateMatrix
        All-zero matrix.
    """
    if s is None or s.numel() == 0:
        raise DegenerateMatrix("no singular values", "rand_distance")
    lam = np.sort(s.detach().to("cpu", torch.float64).numpy() ** 2)
    if not lam[-1] > 0.0:
        raise DegenerateMatrix("all-zero matrix", "rand_distance")
    return jensen_shannon_distance(lam, _shared(w, seed, "rand_distance")[0])


def rand_num_spikes(w, s, *, seed: int = 0) -> float:
    r"""Spikes of the Marchenko-Pastur fit of the shuffled matrix's spectrum: correlation traps
    (WeightWatcher's ``rand_num_spikes``; 5 shuffles pooled when :math:`\min(m, n) < 100`).

    Raises
    ------
    DegenerateMatrix
        All-zero matrix.
    """
    spectra = _shared(w, seed, "rand_num_spikes")
    return float(fit_marchenko_pastur(spectra.ravel(), int(w.shape[0]), int(w.shape[1])).num_spikes)


_REF = ("Martin & Mahoney (2021) JMLR 22(165), sec. 5.5; Martin & Mahoney (2021) arXiv:2106.00734; "
        "WeightWatcher 0.7.7 analyze(randomize=True) column ")

RAND_METRICS = [
    dict(name="rand_distance", func=rand_distance, long_name="distance to the shuffled spectrum",
         description="rand_distance = Jensen-Shannon distance (ln) between sorted lambda_i = sigma_i^2 of W and of "
                     "W with its entries shuffled (seeded permutation, option seed = 0), each normalised to sum 1",
         reference=_REF + "rand_distance", options={"seed": 0}),
    dict(name="rand_num_spikes", func=rand_num_spikes, long_name="correlation traps",
         description="rand_num_spikes = eigenvalues of the entry-shuffled W beyond the MP bulk edge + Tracy-Widom "
                     "margin (Marchenko-Pastur fit as mp_num_spikes; 5 shuffles pooled when min(m, n) < 100; "
                     "seeded permutation, option seed = 0)",
         reference=_REF + "rand_num_spikes", options={"seed": 0}, needs_singular_values=False),
]

register_opt_in(RAND_METRICS)
