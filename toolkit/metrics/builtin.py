"""Import the built-in metric modules so that they register themselves.

Registration order (the order of :func:`~toolkit.metrics.list_metrics`):
entry-wise statistics (:mod:`~toolkit.metrics.norms`), spectral ones
(:mod:`~toolkit.metrics.spectral`), the power-law exponent
(:mod:`~toolkit.metrics.powerlaw`); then the diff metrics
(:mod:`~toolkit.metrics.diff`, ``kind="diff"``).
"""

# One import per line, in registration order (do not sort).
from toolkit.metrics import norms  # noqa: F401, I001
from toolkit.metrics import spectral  # noqa: F401, I001
from toolkit.metrics import powerlaw  # noqa: F401, I001
from toolkit.metrics import diff  # noqa: F401, I001
