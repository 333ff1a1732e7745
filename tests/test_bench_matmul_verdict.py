"""bench_matmul's verdicts beside the noise of their own sitting: a target the same comparison misses
where nothing differs (two cold arms: 0.953-0.983 at their worst point in three sittings on the 2-core
VM; the bare product in fresh processes: ±13.5-35 % at n=256) is not judged in that sitting, and said so;
the warm median point is judged always."""

from benchmarks.bench_matmul import stability_verdict, warm_verdict


def test_a_worst_point_is_not_judged_where_two_cold_arms_differed_as_much_and_a_low_median_misses() -> None:
    assert warm_verdict(0.981, 0.997, 0.990) == (True, "ok")
    not_judged = "worst point not judged: two cold arms differed beyond the target in this sitting too"
    assert warm_verdict(0.969, 0.995, 0.956) == warm_verdict(0.940, 0.995, 0.956) == (True, not_judged)
    assert warm_verdict(0.950, 0.995, 0.985) == (False, "MISSED")  # only the warm arm moved: a cost there
    assert warm_verdict(0.990, 0.975, 0.990) == (False, "MISSED")  # a cost in every warm run
    assert warm_verdict(0.950, 0.975, 0.940) == (False, "MISSED")


def test_a_spread_is_not_judged_where_the_bare_product_spread_beyond_the_target_too() -> None:
    """The bare NumPy product at n=256 read 113-183 GFLOP/s over six fresh processes here (±35 %)."""
    assert stability_verdict(0.04, 0.30) == "ok"
    not_judged = "not judged: the bare product spread beyond the target in this sitting too"
    assert stability_verdict(0.41, 0.35) == stability_verdict(0.32, 0.135) == not_judged
    assert stability_verdict(0.12, 0.02) == stability_verdict(0.41, 0.10) == "MISSED"
