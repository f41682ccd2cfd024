"""Every measurement ``run_pass`` drives has the declared ``Measurement`` protocol's steps."""

from __future__ import annotations

import inspect

import toolkit
from toolkit.collect.execute import Measurement
from toolkit.collect.measure import LowRankMeasurement, PairMeasurement, WeightMeasurement


def test_each_measurement_has_the_protocols_steps_with_its_arguments():
    steps = {name: list(inspect.signature(getattr(Measurement, name)).parameters)
             for name in ("lookup", "reader", "read_bytes", "measure", "finish")}
    for cls in (WeightMeasurement, LowRankMeasurement, PairMeasurement):
        for name, params in steps.items():
            assert len(inspect.signature(getattr(cls, name)).parameters) == len(params), (cls, name)
    m = WeightMeasurement.make(["stable_rank"], "cpu")
    assert isinstance(m, Measurement) and m.kind and isinstance(m.float32, bool)
    p = PairMeasurement.make(["relative_change"], 0.0, 16, "cpu")
    assert isinstance(p, Measurement) and p.kind != m.kind


def test_register_format_is_public_beside_the_other_registries():
    assert {"register_format", "register_metric", "register_architecture"} <= set(toolkit.__all__)
    assert toolkit.register_format is toolkit.sources.register_format
