"""The metric registry: registration forms, metadata, errors, NaN-with-reason."""

import math

import numpy as np
import pytest
import torch

from toolkit.errors import DuplicateRegistrationError, ToolkitError, UnknownMetricError
from toolkit.metrics import (
    DegenerateMatrix,
    DuplicateMetricError,
    MetricValue,
    compute_weight_metrics,
    get_metric,
    list_metrics,
    register_metric,
    resolve_metrics,
    unregister_metric,
)

BUILTINS = [
    "frobenius_norm",
    "rms",
    "kurtosis",
    "max_abs_over_rms",
    "spectral_norm",
    "stable_rank",
    "effective_rank",
    "condition_number",
    "alpha",
    "alpha_xmin",
    "alpha_xmax",
    "alpha_ks_distance",
    "alpha_sigma",
    "num_pl_spikes",
    "alpha_weighted",
    "log_alpha_norm",
    "log_norm",
    "log_spectral_norm",
    "matrix_rank",
    "rank_loss",
    "spectral_entropy",
    "alpha_ci_xmin_lower",
    "alpha_ci_xmin_upper",
]
#: Registered but computed only when asked for by name.
OPT_IN = ["mp_softrank", "mp_num_spikes", "mp_bulk_max", "rand_distance", "rand_num_spikes", "alpha_tpl", "tpl_lambda",
          "alpha_ci_lower", "alpha_ci_upper", "alpha_farms", "erg_num_spikes", "erg_gap", "erg_xmin",
          "erg_xmin_rescaled"]


@pytest.fixture
def cleanup():
    names = []
    yield names
    for n in names:
        unregister_metric(n)


def test_builtins_registered_in_order_with_metadata():
    assert list_metrics() == BUILTINS
    everything = list_metrics(opt_in=True)  # in the order of registration: the interval's module comes later
    assert sorted(everything) == sorted(BUILTINS + OPT_IN)
    assert [n for n in everything if n in OPT_IN] == OPT_IN
    assert [m.name for m in resolve_metrics(None)] == BUILTINS  # metrics=None leaves the opt-in ones out
    assert all(get_metric(n).opt_in for n in OPT_IN) and not any(get_metric(n).opt_in for n in BUILTINS)
    for name in BUILTINS:
        m = get_metric(name)
        attrs = m.attrs()
        texts = {k: v for k, v in attrs.items() if k not in ("valid_min", "valid_max")}
        assert set(texts) == {"long_name", "units", "description", "reference"}
        assert all(isinstance(v, str) and v for v in texts.values()), name
        assert (attrs.get("valid_min", -np.inf), attrs.get("valid_max", np.inf)) == m.domain, name
        assert attrs["units"] == "1"
        assert m.kind == "weight"
    spectral = {m.name for m in resolve_metrics(None) if m.needs_singular_values}
    assert spectral == set(BUILTINS[4:])  # all but the four entry-wise statistics read the shared spectrum
    assert "sigma_max^2" in get_metric("spectral_norm").description  # WeightWatcher's convention named


def test_register_call_form(cleanup):
    cleanup.append("max_row_norm")
    m = register_metric(
        "max_row_norm",
        lambda w, s: float(w.norm(dim=1).max()),
        long_name="largest row norm",
        description="max_i ||W_i,:||_2",
    )
    assert m.name == "max_row_norm" and get_metric("max_row_norm") is m
    assert list_metrics()[-1] == "max_row_norm"
    w = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    assert compute_weight_metrics(w, "max_row_norm") == {"max_row_norm": MetricValue(5.0, "")}


def test_register_decorator_form_with_singular_values_and_options(cleanup):
    cleanup.append("top_k_energy")

    @register_metric("top_k_energy", long_name="energy in top k", needs_singular_values=True, options={"k": 1})
    def top_k_energy(w, s, *, k):
        return float((s[:k] ** 2).sum() / (s**2).sum())

    assert callable(top_k_energy)  # decorator returns the function unchanged
    assert top_k_energy.__name__ == "top_k_energy"
    w = torch.diag(torch.tensor([3.0, 4.0]))
    m = get_metric("top_k_energy")
    assert m.options == (("k", 1),)
    assert m.evaluate(w).value == pytest.approx(16 / 25)
    assert m.evaluate(w, k=2).value == pytest.approx(1.0)
    out = compute_weight_metrics(w, ["stable_rank", "top_k_energy"])
    assert out["top_k_energy"].value == pytest.approx(16 / 25)
    assert out["stable_rank"].value == pytest.approx(25 / 16)


def test_duplicate_name_error_message(cleanup):
    cleanup.append("dup_metric")
    register_metric("dup_metric", lambda w, s: 1.0, long_name="first")
    with pytest.raises(DuplicateRegistrationError) as exc:
        register_metric("dup_metric", lambda w, s: 2.0, long_name="second")
    msg = str(exc.value)
    assert msg.startswith("metric 'dup_metric' is already registered")
    assert "'first'" in msg and "test_metrics_registry" in msg and "overwrite=True" in msg
    assert type(exc.value) is DuplicateRegistrationError and isinstance(exc.value, (ToolkitError, ValueError))
    assert (exc.value.kind, exc.value.name, exc.value.existing.long_name) == ("metric", "dup_metric", "first")
    assert get_metric("dup_metric").long_name == "first"  # nothing replaced
    with pytest.raises(DuplicateMetricError):  # the former name is the same class
        register_metric("stable_rank", lambda w, s: 0.0, long_name="mine")
    register_metric("dup_metric", lambda w, s: 2.0, long_name="second", overwrite=True)
    assert get_metric("dup_metric").func(None, None) == 2.0


def test_reregistering_same_function_is_allowed(cleanup):
    cleanup.append("same_fn")

    def same_fn(w, s):
        return 1.0

    register_metric("same_fn", same_fn, long_name="a")
    register_metric("same_fn", same_fn, long_name="b")  # e.g. a module reload
    assert get_metric("same_fn").long_name == "b"


def test_unknown_metric_lists_known_ones():
    with pytest.raises(UnknownMetricError) as exc:
        get_metric("stabel_rank")
    msg = str(exc.value)
    assert "'stabel_rank'" in msg
    for name in BUILTINS:
        assert name in msg
    assert exc.value.known == sorted(exc.value.known) and "stable_rank" in exc.value.known
    with pytest.raises(UnknownMetricError):
        resolve_metrics(["rms", "nope"])
    with pytest.raises(UnknownMetricError):
        resolve_metrics(["rms"], kind="diff")  # exists, but is not a diff metric


def test_unknown_metric_lists_its_kind_and_suggests_close_names():
    diff = list_metrics("diff")
    with pytest.raises(UnknownMetricError) as exc:
        resolve_metrics(["stabel_rank"])
    msg = str(exc.value)
    assert msg.startswith("unknown metric 'stabel_rank'. Did you mean 'stable_rank'? Known weight metrics: ")
    assert exc.value.known == sorted(BUILTINS + OPT_IN) and exc.value.kind == "weight"
    assert exc.value.suggestions == ["stable_rank"] and exc.value.actual_kind is None
    assert not any(name in msg for name in diff)  # only the metrics of the kind asked for
    with pytest.raises(UnknownMetricError) as exc:  # a typo of a metric of the other kind
        resolve_metrics(["relative_chang"])
    msg = str(exc.value)
    assert "Did you mean 'relative_change'? It is a diff metric, computed by toolkit.compare(" in msg
    assert "toolkit.compare_series(" in msg and "Known weight metrics: " in msg
    with pytest.raises(UnknownMetricError) as exc:
        resolve_metrics(["rms", "zzzz"], kind="diff")
    assert "Did you mean" not in str(exc.value) and "Known diff metrics: " in str(exc.value)
    assert exc.value.known == sorted(list_metrics("diff", opt_in=True))  # delta_alpha_xmin is opt-in


def test_metric_of_the_other_kind_says_which_function_computes_it():
    with pytest.raises(UnknownMetricError) as exc:
        resolve_metrics(["relative_change"])
    msg = str(exc.value)
    assert msg.startswith("metric 'relative_change' is a diff metric, not a weight metric: compute it with "
                          "toolkit.compare(base, target, metrics=[...]) or toolkit.compare_series(")
    assert "Known weight metrics: alpha," in msg
    assert exc.value.actual_kind == "diff" and exc.value.name == "relative_change"
    with pytest.raises(UnknownMetricError) as exc:
        resolve_metrics(["stable_rank"], kind="diff")
    msg = str(exc.value)
    assert msg.startswith("metric 'stable_rank' is a weight metric, not a diff metric: compute it with "
                          "toolkit.weight_stats(")
    assert "Known diff metrics: " in msg and exc.value.actual_kind == "weight"
    assert isinstance(exc.value, KeyError) and isinstance(exc.value, ToolkitError)


def test_bad_registrations():
    with pytest.raises(ToolkitError, match="kind"):
        register_metric("x_metric", lambda w, s: 0.0, long_name="x", kind="activation")
    with pytest.raises(ToolkitError, match="identifier"):
        register_metric("not a name", lambda w, s: 0.0, long_name="x")


def test_resolve_metrics():
    assert [m.name for m in resolve_metrics(None)] == BUILTINS
    assert [m.name for m in resolve_metrics("alpha")] == ["alpha"]
    assert [m.name for m in resolve_metrics(["rms", "alpha"])] == ["rms", "alpha"]


def test_degenerate_becomes_nan_with_reason(cleanup):
    cleanup.append("always_degenerate")
    register_metric("always_degenerate", lambda w, s: _raise("no can do"), long_name="d")
    v = get_metric("always_degenerate").evaluate(torch.ones(2, 2))
    assert math.isnan(v.value) and v.reason == "no can do"


def test_other_exceptions_propagate(cleanup):
    cleanup.append("buggy_metric")
    register_metric("buggy_metric", lambda w, s: 1 / 0, long_name="b")
    with pytest.raises(ZeroDivisionError):
        compute_weight_metrics(torch.ones(2, 2), "buggy_metric")


def test_degenerate_matrix_fields():
    e = DegenerateMatrix("all-zero matrix", "stable_rank")
    assert e.reason == "all-zero matrix" and e.metric == "stable_rank"
    assert str(e) == "stable_rank: all-zero matrix"
    assert isinstance(e, ToolkitError) and isinstance(e, ValueError)


def _raise(reason):
    raise DegenerateMatrix(reason)


def test_a_metric_record_carries_its_natural_domain_into_its_attrs():
    """Issue 45, item 2: the domain bounds every colour scale drawn for the metric; the record holds it and the
    Dataset variable gets it as CF valid_min / valid_max."""
    assert get_metric("condition_number").domain == (1.0, np.inf)
    assert get_metric("condition_number").attrs()["valid_min"] == 1.0
    assert "valid_max" not in get_metric("condition_number").attrs()
    assert get_metric("update_sparsity").domain == (0.0, 1.0)
    assert get_metric("stable_rank").attrs()["valid_min"] == 0.0

    def share(w, s):
        return 0.5

    try:
        m = register_metric("test_share_domain", share, long_name="a share", domain=(0.0, 1.0))
        assert m.attrs()["valid_min"] == 0.0 and m.attrs()["valid_max"] == 1.0
        assert register_metric("test_free_domain", share, long_name="free").domain == (-np.inf, np.inf)
        with pytest.raises(ToolkitError, match="domain of metric 'test_bad_domain'.*low < high"):
            register_metric("test_bad_domain", share, long_name="bad", domain=(1.0, 0.0))
    finally:
        for name in ("test_share_domain", "test_free_domain", "test_bad_domain"):
            unregister_metric(name)
