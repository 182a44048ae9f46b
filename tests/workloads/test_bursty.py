"""workloads.bursty: the HYBRIDJOIN appendix's self-similar on/off arrivals."""

import numpy as np
import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.workloads.bursty import bursty_arrivals


def _cv_of_counts(times, bins):
    counts, _ = np.histogram(times, bins=bins, range=(0.0, times[-1]))
    return counts.std() / counts.mean()


def test_arrivals_are_n_non_decreasing_times_from_near_zero():
    times = bursty_arrivals(50_000, mean_rate=2000.0, seed=1)
    assert times.shape == (50_000,) and times.dtype == np.float64
    assert (np.diff(times) >= 0).all()
    assert 0 <= times[0] < 0.05 * times[-1]


@pytest.mark.parametrize("mean_rate", [50.0, 1000.0, 250_000.0])
def test_mean_rate_is_the_one_asked(mean_rate):
    times = bursty_arrivals(100_000, mean_rate=mean_rate, seed=2)
    assert len(times) / times[-1] == pytest.approx(mean_rate, rel=0.10)


def test_unscaled_rate_is_half_the_total_bandwidth_per_step():
    # 4 sources (bandwidths 2, 4, 8, 16) switch often enough to average out over 400k tuples:
    # each is on half of the time, so 15 tuples per step of 0.01 s
    times = bursty_arrivals(400_000, mean_rate=None, sources=4, one_step=0.01, seed=3)
    assert len(times) / times[-1] == pytest.approx(1500.0, rel=0.1)


def test_a_single_source_emits_its_bandwidth_per_step_while_on():
    times = bursty_arrivals(10_000, mean_rate=None, sources=1, one_step=1.0, seed=4)
    per_step = np.bincount(np.floor(times).astype(np.int64))
    assert set(np.unique(per_step[:-1]).tolist()) <= {0, 2}  # off, or on with bandwidth 2^1


@pytest.mark.parametrize("seed", [0, 5, 9])
def test_counts_are_much_burstier_than_a_poisson_stream_at_the_same_rate(seed):
    # a million tuples span ~1000 steps: a few switches of the widest (2^10) source
    n, rate = 1_000_000, 1000.0
    times = bursty_arrivals(n, mean_rate=rate, seed=seed)
    poisson = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n))
    bursty_cv, poisson_cv = _cv_of_counts(times, 200), _cv_of_counts(poisson, 200)
    # 5000 tuples per bin: a Poisson stream's cv is about 1/sqrt(5000) = 0.014
    assert poisson_cv < 0.03
    assert bursty_cv > 5 * poisson_cv


def test_bursts_exist_at_several_time_scales():
    n, rate = 1_000_000, 1000.0
    times = bursty_arrivals(n, mean_rate=rate, seed=6)
    poisson = np.cumsum(np.random.default_rng(6).exponential(1.0 / rate, n))
    # self-similar: coarser bins do not smooth the flow out the way they smooth a Poisson stream
    ratios = [_cv_of_counts(times, bins) / _cv_of_counts(poisson, bins) for bins in (20, 100, 500, 2500)]
    assert all(r > 2 for r in ratios), ratios
    assert ratios[0] > ratios[-1]  # the coarser the bins, the larger the gap


def test_fewer_sources_give_bursts_in_short_streams_too():
    n, rate = 100_000, 1000.0
    times = bursty_arrivals(n, mean_rate=rate, sources=5, seed=1)
    poisson = np.cumsum(np.random.default_rng(1).exponential(1.0 / rate, n))
    assert _cv_of_counts(times, 100) > 3 * _cv_of_counts(poisson, 100)


def test_same_seed_same_times_other_seed_other_times():
    a = bursty_arrivals(20_000, mean_rate=500.0, seed=7)
    assert np.array_equal(a, bursty_arrivals(20_000, mean_rate=500.0, seed=7))
    assert not np.allclose(a, bursty_arrivals(20_000, mean_rate=500.0, seed=8))


def test_the_unscaled_schedule_does_not_depend_on_n():
    def per_step(n):
        return np.bincount(np.floor(bursty_arrivals(n, mean_rate=None, sources=4, seed=9, one_step=1.0)).astype(np.int64))

    short, long = per_step(2_000), per_step(50_000)
    assert len(short) > 50
    assert np.array_equal(short[:-1], long[: len(short) - 1])  # the short one's last step is cut


def test_tiny_streams():
    assert bursty_arrivals(0, mean_rate=10.0).shape == (0,)
    one = bursty_arrivals(1, mean_rate=10.0)
    assert one.tolist() == [pytest.approx(0.1)]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n=-1, mean_rate=1.0), r"^n: -1 must be >= 0"),
        (dict(n=10, mean_rate=0), r"^mean_rate: 0 must be a number > 0 or None"),
        (dict(n=10, mean_rate=float("inf")), r"^mean_rate: inf must be a number > 0"),
        (dict(n=10, mean_rate=1.0, sources=0), r"^sources: 0 must be >= 1"),
        (dict(n=10, mean_rate=1.0, sources=41), r"^sources: 41 must be <= 40"),
        (dict(n=10, mean_rate=1.0, one_step=-0.5), r"^one_step: -0\.5 must be a number > 0"),
        (dict(n=10, mean_rate=1.0, seed=-1), r"^seed: -1 must be >= 0"),
    ],
)
def test_bad_arguments_are_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        bursty_arrivals(**kwargs)


def test_mean_rate_is_required():
    with pytest.raises(TypeError):
        bursty_arrivals(10)
