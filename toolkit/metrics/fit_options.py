r"""The options of the spectral fits, in one frozen record: :class:`FitOptions`.

``weight_stats(..., fit=FitOptions(...))`` (and the CLI's ``--fix-fingers``,
``--xmax``, ``--min-evals``, ``--max-evals``, ``--max-n``, ``--seed``) hands
them to every metric that declares them:

- the power-law fit (``alpha`` and its columns, ``alpha_tpl``, ``tpl_lambda``):
  ``fix_fingers``, ``xmax``, ``xmin_max``, ``max_fingers``, ``finger_thresh``;
- the randomized metrics (``rand_distance``, ``rand_num_spikes``): ``seed``.

A metric declares an option by registering its default (``register_metric(...,
options={...})``); :meth:`FitOptions.apply` gives the metric records with
those defaults replaced, so each option is part of the metric's cache key
(:func:`toolkit.collect.cache.metric_key` hashes the options) and one
eigen-decomposition per matrix still feeds every spectral metric.

``min_evals``, ``max_evals`` and ``max_N`` are WeightWatcher's rules for
skipping a matrix; the toolkit measures every matrix, and with them set the
cells WeightWatcher would skip are NaN with the reason
(:func:`toolkit.metrics.esd_fit.ww_skip_reason`). They change which cells are
shown, not what is computed or cached.

Every option goes into the Dataset attrs as ``fit_<name>`` (NetCDF-safe:
strings and numbers; ``"none"`` / 0 for an option that is off).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from toolkit import options as _check

FIX_FINGERS = ("xmin_peak", "clip_xmax")
#: Options the power-law fit takes (registered defaults of the fit metrics).
FIT_KEYS = ("fix_fingers", "xmax", "xmin_max", "max_fingers", "finger_thresh")
#: WeightWatcher 0.7.7's skip rules (``analyze(min_evals=8, max_evals=15000, max_N=50000)``).
WW_SKIP_DEFAULTS = {"min_evals": 8, "max_evals": 15000, "max_N": 50000}


@dataclass(frozen=True)
class FitOptions:
    r"""Options of the spectral fits of ``weight_stats``; the defaults are WeightWatcher 0.7.7's ``analyze()``.

    Parameters
    ----------
    fix_fingers : {None, "xmin_peak", "clip_xmax"}, default None
        WeightWatcher's fixes for "fingers" (a few outlying largest
        eigenvalues that pull the fit): ``"xmin_peak"`` searches xmin only
        below ``xmin_max`` (default 1.5 × the peak of the log-spaced ESD
        histogram), ``"clip_xmax"`` refits without the largest eigenvalues
        (:func:`toolkit.metrics.powerlaw.fit_power_law`).
    xmax : int or None, default None
        Leave the ``xmax`` largest eigenvalues out of the fit (WeightWatcher's
        ``xmax=-k``); None: none. Not with ``fix_fingers`` (WeightWatcher
        refuses the two together).
    xmin_max : float or None, default None
        ``fix_fingers="xmin_peak"``: the top of the xmin range, an eigenvalue
        of WᵀW (WeightWatcher's ``xmin_max``); None: 1.5 × the peak.
    max_fingers : int, default 10
        ``fix_fingers="clip_xmax"``: most eigenvalues clipped.
    finger_thresh : float, default 1.0
        ``fix_fingers="clip_xmax"``: drop in alpha that makes a clip a finger.
    min_evals, max_evals, max_N : int or None, default None
        WeightWatcher's skip rules: with them set, a matrix with
        min(m, n) < ``min_evals``, min(m, n) > ``max_evals`` or
        max(m, n) > ``max_N`` is NaN with the reason (still measured:
        :data:`WW_SKIP_DEFAULTS` are WeightWatcher's values,
        :meth:`like_weightwatcher` sets them).
    seed : int, default 0
        Seed of the randomized metrics (``rand_distance``, ``rand_num_spikes``).

    Raises
    ------
    InvalidOptionError
        A value an option cannot take (an unknown ``fix_fingers``, a
        ``xmax`` below 1, ``xmax`` with ``fix_fingers``, ...).

    Examples
    --------
    >>> FitOptions(fix_fingers="clip_xmax").attrs()["fit_fix_fingers"]
    'clip_xmax'
    >>> FitOptions.like_weightwatcher().skip_reason(262144, 640)
    'N = 262144 > max_N = 50000 (WeightWatcher skips it)'
    """

    fix_fingers: str | None = None
    xmax: int | None = None
    xmin_max: float | None = None
    max_fingers: int = 10
    finger_thresh: float = 1.0
    min_evals: int | None = None
    max_evals: int | None = None
    max_N: int | None = None  # noqa: N815  (WeightWatcher's name)
    seed: int = 0

    def __post_init__(self):
        where = "toolkit.FitOptions"
        if self.fix_fingers is False:  # WeightWatcher's spelling of "off"
            object.__setattr__(self, "fix_fingers", None)
        if self.fix_fingers is not None:
            _check.choice(self.fix_fingers, "fix_fingers", where, FIX_FINGERS)
        for name in ("xmax", "min_evals", "max_evals", "max_N"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _check.whole_number(value, name, where, minimum=1,
                                                                   meaning="None turns it off"))
        if self.xmin_max is not None:
            object.__setattr__(self, "xmin_max", _check.real_number(self.xmin_max, "xmin_max", where, above=0.0))
        object.__setattr__(self, "max_fingers", _check.whole_number(self.max_fingers, "max_fingers", where,
                                                                    minimum=1))
        object.__setattr__(self, "finger_thresh", _check.real_number(self.finger_thresh, "finger_thresh", where,
                                                                     minimum=0.0))
        object.__setattr__(self, "seed", _check.seed(self.seed, where))
        if self.xmax is not None and self.fix_fingers is not None:
            from toolkit.errors import InvalidOptionError

            raise InvalidOptionError("xmax", self.xmax, f"None with fix_fingers={self.fix_fingers!r} (WeightWatcher "
                                     "refuses the two together: clip_xmax chooses the clipping itself)", where)

    @classmethod
    def coerce(cls, value, where: str = "toolkit.weight_stats") -> FitOptions:
        """``value`` as a FitOptions: None (the defaults), a FitOptions or a dict of its fields.

        Raises
        ------
        InvalidOptionError
            Anything else, or a dict with a key that is not a field.
        """
        from toolkit.errors import InvalidOptionError

        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            known = [f.name for f in fields(cls)]
            unknown = sorted(set(value) - set(known), key=str)
            if unknown:
                raise InvalidOptionError("fit", value, f"a toolkit.FitOptions or a dict of its fields {known} "
                                         f"(unknown: {unknown})", where)
            try:
                return cls(**value)
            except InvalidOptionError as e:  # a field's own rule: named as fit's, on the front door
                raise InvalidOptionError("fit", value, f"a dict of valid FitOptions fields, but {e.option} must be "
                                         f"{e.expected}", where) from None
        raise InvalidOptionError("fit", value, "None, a toolkit.FitOptions(...) or a dict of its fields", where)

    @classmethod
    def like_weightwatcher(cls, **changes) -> FitOptions:
        """The defaults with WeightWatcher's skip rules on (:data:`WW_SKIP_DEFAULTS`), then ``changes``."""
        return cls(**{**WW_SKIP_DEFAULTS, **changes})

    @classmethod
    def from_attrs(cls, attrs: dict) -> FitOptions:
        """The options a Dataset's ``fit_<name>`` attrs record (:meth:`attrs`); the defaults for absent ones."""
        got = {}
        for f in fields(cls):
            if f"fit_{f.name}" not in attrs:
                continue
            value = attrs[f"fit_{f.name}"]
            if hasattr(value, "item"):
                value = value.item()  # NetCDF gives NumPy scalars back
            off = value in ("none", 0, 0.0) and f.name in ("fix_fingers", "xmax", "xmin_max", "min_evals",
                                                           "max_evals", "max_N")
            got[f.name] = None if off else value
        return cls(**got)

    def fit_keywords(self) -> dict:
        """Keywords of :func:`toolkit.metrics.powerlaw.fit_power_law` (the fit options)."""
        return {k: getattr(self, k) for k in FIT_KEYS}

    def metric_options(self) -> dict:
        """``{option: value}`` that metrics may declare: the fit's and ``seed``."""
        return {**self.fit_keywords(), "seed": self.seed}

    def apply(self, metrics) -> tuple:
        """The metric records with the options each one declares set from here (others unchanged).

        Only fields set away from their defaults are applied: a field left at its
        default keeps whatever value a metric declares itself (a metric registered
        with ``options={"seed": 3}`` keeps seed 3 under ``FitOptions()``).

        Parameters
        ----------
        metrics : sequence of toolkit.metrics.Metric

        Returns
        -------
        tuple of Metric
            Same names and functions; ``options`` updated, so the cache key follows them.
        """
        defaults = type(self)().metric_options()
        mine = {k: v for k, v in self.metric_options().items() if v != defaults[k]}
        out = []
        for m in metrics:
            declared = dict(m.options)
            new = {**declared, **{k: v for k, v in mine.items() if k in declared}}
            out.append(m if new == declared else replace(m, options=tuple(sorted(new.items()))))
        return tuple(out)

    def skip_reason(self, n_rows: int, n_cols: int) -> str:
        """Why WeightWatcher would skip an (n_rows, n_cols) matrix under these rules ("" if not, or if off)."""
        from toolkit.metrics.esd_fit import ww_skip_reason

        if self.min_evals is None and self.max_evals is None and self.max_N is None:
            return ""
        return ww_skip_reason(n_rows, n_cols, min_evals=self.min_evals or 0, max_evals=self.max_evals or 0,
                              max_n=self.max_N or float("inf"))

    def attrs(self) -> dict:
        """NetCDF-safe Dataset attrs ``fit_<field>``: "none" for an unset choice, 0 for an unset count."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                value = "none" if f.name in ("fix_fingers",) else 0
            out[f"fit_{f.name}"] = value
        out["fit_xmin_max"] = float(self.xmin_max) if self.xmin_max is not None else 0.0
        return out
