"""bench_matmul's warm-start verdict: its worst point is judged against what two cold arms differed by in
the same sitting (three sittings on the 2-core VM put that at 0.953-0.983), its median point is not."""

from benchmarks.bench_matmul import warm_verdict


def test_a_worst_point_within_the_sittings_noise_is_said_so_and_a_low_median_always_misses() -> None:
    assert warm_verdict(0.981, 0.997, 0.990) == (True, "ok")
    assert warm_verdict(0.969, 0.995, 0.956) == (True, "ok: the worst point is within this sitting's noise")
    assert warm_verdict(0.940, 0.995, 0.956) == (False, "MISSED")  # beyond the noise: a cost at that point
    assert warm_verdict(0.990, 0.975, 0.990) == (False, "MISSED")  # a cost in every warm run
    assert warm_verdict(0.950, 0.975, 0.940) == (False, "MISSED")
