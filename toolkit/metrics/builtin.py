"""Import the built-in metric modules so that they register themselves.

Registration order (the order of :func:`~toolkit.metrics.list_metrics`):
entry-wise statistics (:mod:`~toolkit.metrics.norms`), spectral ones
(:mod:`~toolkit.metrics.spectral`), the power-law exponent
(:mod:`~toolkit.metrics.powerlaw`), the rest of WeightWatcher's columns
(:mod:`~toolkit.metrics.esd_fit`: fit, norms, rank, entropy), the opt-in
Marchenko-Pastur and shuffled-matrix ones (:mod:`~toolkit.metrics.marchenko_pastur`,
:mod:`~toolkit.metrics.correlation_traps`, the truncated power law
:mod:`~toolkit.metrics.truncated_powerlaw`, alpha's bootstrap interval holding xmin (opt-in)
:mod:`~toolkit.metrics.alpha_interval` and the default one, choosing xmin again,
:mod:`~toolkit.metrics.alpha_interval_xmin`, the aspect-ratio-free FARMS alpha :mod:`~toolkit.metrics.farms`,
the ERG / det X = 1 tail :mod:`~toolkit.metrics.erg`;
``opt_in=True``: computed only when
named); then the diff metrics
(:mod:`~toolkit.metrics.diff`, ``kind="diff"``).
"""

# One import per line, in registration order (do not sort).
from toolkit.metrics import norms  # noqa: F401, I001
from toolkit.metrics import spectral  # noqa: F401, I001
from toolkit.metrics import powerlaw  # noqa: F401, I001
from toolkit.metrics import esd_fit  # noqa: F401, I001
from toolkit.metrics import marchenko_pastur  # noqa: F401, I001
from toolkit.metrics import correlation_traps  # noqa: F401, I001
from toolkit.metrics import truncated_powerlaw  # noqa: F401, I001
from toolkit.metrics import alpha_interval  # noqa: F401, I001
from toolkit.metrics import alpha_interval_xmin  # noqa: F401, I001
from toolkit.metrics import farms  # noqa: F401, I001
from toolkit.metrics import erg  # noqa: F401, I001
from toolkit.metrics import diff  # noqa: F401, I001
