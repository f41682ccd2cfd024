"""The natural domain of each built-in statistic: the values it can take (a leaf: imports nothing of toolkit).

A domain bounds every colour scale drawn for the metric (its limits, the padding of a constant panel, the
low end of a diverging bar): a fraction never gets a colour for 1.1, a condition number none for 0.5. The
metric record (:class:`toolkit.metrics.Metric`) carries it as ``domain`` and writes it to its variable's attrs
as the CF ``valid_min`` / ``valid_max``; :func:`toolkit.plot.scale_rules.domain` reads those attrs, and this
table for a variable stored before the attrs existed.
"""

from __future__ import annotations

import math

#: Any real number (the default of a metric that declares nothing).
UNBOUNDED = (-math.inf, math.inf)
#: A fraction or a cosine-like overlap.
FRACTION = (0.0, 1.0)
#: Norms, counts, ranks of a matrix that may be zero.
NON_NEGATIVE = (0.0, math.inf)
#: Condition numbers and ratios of a largest to a smaller value.
AT_LEAST_ONE = (1.0, math.inf)

#: The domains of the built-in statistics (weight, diff and fit metrics), by variable name.
NATURAL_DOMAINS: dict[str, tuple[float, float]] = {
    **dict.fromkeys(("update_sparsity", "update_density", "subspace_overlap", "spectral_entropy"), FRACTION),
    "cosine_similarity": (-1.0, 1.0),
    **dict.fromkeys(("frobenius_norm", "spectral_norm", "rms", "relative_change", "matrix_rank",
                     "stable_rank", "effective_rank",
                     "rank_loss", "alpha_xmin", "alpha_xmax", "alpha_ks_distance", "alpha_sigma",
                     "num_pl_spikes", "subspace_overlap_sensitivity"), NON_NEGATIVE),
    # sigma_max / sigma_min. (A stable or effective rank is >= 1 too, but synthetic grids of them often are
    # not: a domain the data break is set aside, panel by panel, which panels on one scale must not differ in.)
    "condition_number": AT_LEAST_ONE,
}


def natural_domain(name: str) -> tuple[float, float]:
    """The domain of the built-in statistic ``name`` (:data:`NATURAL_DOMAINS`), else :data:`UNBOUNDED`."""
    return NATURAL_DOMAINS.get(str(name), UNBOUNDED)
