"""Benchmark: ``fix_fingers="xmin_peak"`` against the ``powerlaw`` package, on the matrices of a bundled model.

WeightWatcher 0.7.7 cannot be the reference here: with its own power-law
package its ``xmin_peak`` fit fails on every matrix (``WWFit`` gets the xmin
range, a pair, where it takes one value), and with ``pl_package="powerlaw"``
it passes ``distribution=`` to ``powerlaw.Fit``, which powerlaw 2.0 refuses
(TypeError), so every row is ``-1``. The fit it means to run is
``powerlaw.Fit(x, xmin=(log10(0.95 p), 1.5 p))`` on the eigenvalues above
1e-5, ``p`` the peak of their 100-bin log10 histogram
(``WeightWatcher.fit_powerlaw``); this script runs exactly that call and
:func:`toolkit.metrics.xmin_peak.fit_xmin_peak` on the same eigenvalues (the
toolkit's stored spectra) and prints how many agree to 1e-6 relative.

Needs the ``powerlaw`` package (the ``test`` extra).

Usage::

    .venv/bin/python benchmarks/bench_xmin_peak.py [--model smollm2|gemma3] [--layers 0,10,20,29]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

RTOL = 1e-6
COLUMNS = ("alpha", "xmin", "D", "sigma")


def main(argv=None) -> int:
    import numpy as np
    import powerlaw

    import toolkit
    from toolkit.bundled import gemma3_path
    from toolkit.metrics.xmin_peak import PEAK_BINS, fit_xmin_peak

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["smollm2", "gemma3"], default="smollm2")
    ap.add_argument("--layers", default=None, help="comma-separated layers (default: all)")
    args = ap.parse_args(argv)
    rec = H.Results(f"xmin_peak_{args.model}")
    print(f"machine: {H.machine()}\n{H.load()} at start; model {args.model}", flush=True)
    ds = toolkit.weight_stats(None if args.model == "smollm2" else gemma3_path(), ["stable_rank"],
                              keep_spectra=True, progress=False)
    layers = [int(v) for v in args.layers.split(",")] if args.layers else [int(v) for v in ds.layer.values]
    devs, secs = {k: [] for k in COLUMNS}, {"toolkit": 0.0, "powerlaw": 0.0}
    for layer in layers:
        for comp in ds.component.values:
            lam = ds.eigenvalues.sel(layer=layer, component=comp).values
            x = np.sort(lam[~np.isnan(lam)])
            x = x[x > 1e-5]
            if x.size == 0:
                continue
            t = time.process_time()
            ours = fit_xmin_peak(x)
            secs["toolkit"] += time.process_time() - t
            counts, edges = np.histogram(np.log10(x), bins=PEAK_BINS)
            peak = 10 ** edges[np.argmax(counts)]
            t = time.process_time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = powerlaw.Fit(x, xmin=(np.log10(0.95 * peak), 1.5 * peak), verbose=False)
            secs["powerlaw"] += time.process_time() - t
            for k, a, b in (("alpha", ours.alpha, ref.alpha), ("xmin", ours.xmin, ref.xmin),
                            ("D", ours.ks_distance, ref.D), ("sigma", ours.sigma, ref.sigma)):
                devs[k].append(abs(a - b) / abs(b))
    rows = [[k, f"{sum(d <= RTOL for d in v)}/{len(v)}", f"{max(v):.2g}"] for k, v in devs.items()]
    print(H.table(rows, ["column", f"agree (<= {RTOL:g} relative)", "max relative deviation"]))
    print(f"layers {layers}; CPU: toolkit {secs['toolkit']:.2f} s, powerlaw {secs['powerlaw']:.1f} s; "
          f"{H.load()} at end")
    rec.save({"model": args.model, "rtol": RTOL, "layers": len(layers), "cpu_s": secs,
              "columns": {k: {"agree": int(sum(d <= RTOL for d in v)), "compared": len(v), "max_rel_dev": max(v)}
                          for k, v in devs.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
