"""Poisson sampling in O(q n) (dpreg.access.poisson_rows): the same law as n
independent Bernoulli(q) draws; dp-sgd's plan charged once, before the first release."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpreg.access import Resample, SinglePass, poisson_rows


@pytest.mark.parametrize("n,q", [(12, 0.3), (7, 0.85), (40, 0.02)])
def test_poisson_rows_has_the_bernoulli_law(n, q):
    rng = np.random.default_rng(20261123)
    draws = 30_000
    inc = np.zeros(n)
    pair = np.zeros((n, n))
    counts = np.zeros(n + 1)
    for _ in range(draws):
        idx = poisson_rows(rng, n, q)
        assert idx.dtype == np.int64 and np.all(np.diff(idx) > 0) and (idx.size == 0 or 0 <= idx[0] <= idx[-1] < n)
        m = np.zeros(n)
        m[idx] = 1.0
        inc += m
        pair += np.outer(m, m)
        counts[idx.size] += 1
    # every row with probability q (first and last rows included: an off-by-one fails here)
    sd = np.sqrt(q * (1 - q) / draws)
    assert np.all(np.abs(inc / draws - q) < 5 * sd), inc / draws
    # pairwise independence: joint inclusion q^2
    off = pair[~np.eye(n, dtype=bool)] / draws
    sd2 = np.sqrt(q * q * (1 - q * q) / draws)
    assert np.all(np.abs(off - q * q) < 5.5 * sd2)
    # the batch size is Binomial(n, q) (chi-square over sizes with expected count >= 5)
    expect = stats.binom.pmf(np.arange(n + 1), n, q) * draws
    keep = expect >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expect[keep], expect[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-4


class _Ones:
    """Stub generator whose exponentials are all 0, so every geometric gap is 1
    (every row selected)."""

    def standard_exponential(self, size):
        return np.zeros(size)


def test_poisson_rows_keeps_drawing_past_the_first_block():
    # q n = 10 -> blocks of ~45 gaps, 1000 rows: many blocks; every row selected once
    idx = poisson_rows(_Ones(), 1000, 0.01)
    np.testing.assert_array_equal(idx, np.arange(1000))


@pytest.mark.parametrize("q", [0.3, 0.02, 1e-12])
def test_geometric_gaps_have_the_geometric_law(q):
    from dpreg.access import geometric_gaps

    rng = np.random.default_rng(7)
    cap = 10**9
    g = geometric_gaps(rng, q, 200_000, cap)
    assert g.dtype == np.int64 and g.min() >= 1 and g.max() <= cap + 1
    if q < 1e-6:  # E / lam reaches ~4e13 > int64-safe range of the cap: capped, never overflowed
        assert np.mean(g == cap + 1) > 0.99
        return
    ks = np.arange(1, 8)
    for k in ks:  # P(gap > k) = (1 - q)^k
        p = (1 - q) ** k
        assert abs(np.mean(g > k) - p) < 5 * np.sqrt(p * (1 - p) / g.size), k


def test_poisson_rows_many_is_k_independent_samples():
    """Per sample the Bernoulli law (inclusion q per row, pairwise q^2 across
    samples and within one), offsets that partition the rows, sorted rows."""
    from dpreg.access import poisson_rows_many

    rng = np.random.default_rng(3)
    n, q, k = 30, 0.2, 4
    reps = 6000
    inc = np.zeros((k, n))
    cross = 0.0
    for _ in range(reps):
        rows, off = poisson_rows_many(rng, n, q, k)
        assert off[0] == 0 and off[-1] == len(rows) and np.all(np.diff(off) >= 0) and len(off) == k + 1
        m = np.zeros((k, n))
        for i in range(k):
            r = rows[off[i]:off[i + 1]]
            assert np.all(np.diff(r) > 0) and (r.size == 0 or (r[0] >= 0 and r[-1] < n))
            m[i, r] = 1.0
        inc += m
        cross += m[0, 5] * m[3, 5]       # the same row in two samples: independent
    sd = np.sqrt(q * (1 - q) / reps)
    assert np.all(np.abs(inc / reps - q) < 5 * sd)
    assert abs(cross / reps - q * q) < 5 * np.sqrt(q * q * (1 - q * q) / reps)


def test_poisson_rows_many_draws_past_the_block():
    from dpreg.access import poisson_rows_many

    rows, off = poisson_rows_many(_Ones(), 200, 0.01, 3)
    np.testing.assert_array_equal(off, [0, 200, 400, 600])
    np.testing.assert_array_equal(rows, np.tile(np.arange(200), 3))


def test_resample_poisson_counts_use_and_full_batch():
    acc = Resample(500, np.random.default_rng(1))
    idx, part = acc.poisson(0.1)
    assert part.kind == "poisson" and part.q == 0.1 and acc.used == len(idx)
    idx, part = acc.poisson(1.0)
    assert part.kind == "all" and len(idx) == 500


@pytest.mark.parametrize("n,q,k", [(49_990, 0.1, 8), (300, 0.02, 5), (9, 0.9, 6)])
def test_gaps_to_rows_is_the_numpy_arithmetic(n, q, k):
    """The compiled pass against the plain-numpy reference on the same draws:
    gaps floor(min(E / lam, n)) + 1 (geometric_gaps), partial sums, positions
    <= n minus one, per sample in order; and the block-ran-out flag."""
    import math

    from dpreg_kernels.sampling import gaps_to_rows

    rng = np.random.default_rng(11)
    m = int(q * n + 6 * math.sqrt(q * n) + 16)
    E = rng.standard_exponential((k, m))
    E[0, : m // 2] = 0.0  # gaps of exactly 1 (every row): this sample's block ends before n
    lam = -math.log1p(-q)
    rows, counts, last = np.empty(k * m, dtype=np.int64), np.empty(k, dtype=np.int64), np.empty(k, dtype=np.int64)
    gaps_to_rows(E, 1.0 / lam, n, rows, counts, last)
    pos = np.cumsum(np.minimum(E * (1.0 / lam), float(n)).astype(np.int64) + 1, axis=1)
    want = [p[p <= n] - 1 for p in pos]
    np.testing.assert_array_equal(counts, [len(r) for r in want])
    np.testing.assert_array_equal(rows[: counts.sum()], np.concatenate(want))
    for i in range(k):
        assert (last[i] <= n) == (pos[i, -1] <= n)
        if pos[i, -1] <= n:
            assert last[i] == pos[i, -1]


def test_poisson_stream_is_total_independent_samples_and_never_overdraws():
    """Resample.poisson_stream: chunked draws with the per-sample Bernoulli law
    (inclusion q, independence across samples, also across a chunk boundary),
    Resample.used = the rows of the samples drawn, an error past the plan, and
    the full batch for q >= 1."""
    n, q, reps, total = 25, 0.3, 3000, 5
    inc = np.zeros((total, n))
    cross = 0.0
    for r in range(reps):
        acc = Resample(n, np.random.default_rng(r))
        st = acc.poisson_stream(q, total, chunk=2)  # chunks of 2, 2, 1
        m = np.zeros((total, n))
        size = 0
        for i in range(total):
            rows, part = st.next()
            assert part.kind == "poisson" and part.q == q and np.all(np.diff(rows) > 0)
            m[i, rows] = 1.0
            size += len(rows)
        assert acc.used == size
        with pytest.raises(RuntimeError, match="more samples than planned"):
            st.next()
        inc += m
        cross += m[1, 7] * m[2, 7]  # samples 1 and 2 lie in different chunks
    sd = np.sqrt(q * (1 - q) / reps)
    assert np.all(np.abs(inc / reps - q) < 5 * sd)
    assert abs(cross / reps - q * q) < 5 * np.sqrt(q * q * (1 - q * q) / reps)
    acc = Resample(40, np.random.default_rng(0))
    st = acc.poisson_stream(1.0, 2)
    for _ in range(2):
        rows, part = st.next()
        assert part.kind == "all" and len(rows) == 40
    assert acc.used == 80
    with pytest.raises(RuntimeError):
        st.next()


def test_dp_sgd_charges_its_plan_once_before_releasing(registry):
    import dp_accounting as dpa

    from dpreg.params import bind
    from dpreg.problem import Problem

    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 5))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(rng.random(400) < 0.5, -1.0, 1.0)
    cls = registry.get("algorithm", "dp-sgd")
    acc = registry.get("accountant", "rdp")(1.0, 1e-5, cls.relation)
    out = cls(Problem(registry.get("loss", "logistic"), X, y),
              bind(cls.params, {"steps": 40, "batch": 20}, "dp-sgd"), noise=None, accountant=acc, seed=4).run()
    z = out.info["noise_multiplier"]
    assert acc.n_charges == 1
    plan = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(20 / 400, dpa.GaussianDpEvent(z)), 40)
    ref = registry.get("accountant", "rdp")(1.0, 1e-5, cls.relation)
    assert acc.epsilon_spent == pytest.approx(ref.epsilon_if(plan), rel=1e-12)
    assert acc.epsilon_spent <= 1.0 * (1 + 1e-9)


def test_default_passes_rule():
    """The single-pass algorithms' practical passes: a given value wins, the
    papers' one pass under preset=theory and below PASSES_MIN_RECORDS."""
    from dpreg.access import PASSES_MIN_RECORDS, default_passes

    assert default_passes(5, "theory", 10, 3) == 5
    assert default_passes(None, "practical", PASSES_MIN_RECORDS, 3) == 3
    assert default_passes(None, "practical", PASSES_MIN_RECORDS - 1, 3) == 1
    assert default_passes(None, "theory", 10 ** 9, 3) == 1


def test_passes_make_fresh_partitions_under_their_own_pass_ids():
    """Passes: each pass a SinglePass drawn from the same stream in order (the
    permutations a caller would draw itself), its own pass id, uses summed;
    no pass beyond the plan; a SinglePass is one pass."""
    from dpreg.access import Passes

    p = Passes(10, np.random.default_rng(3), 2)
    ref = np.random.default_rng(3)
    first = [SinglePass(10, ref)._perm for _ in range(2)]
    idx, part = p.take(10)
    assert np.array_equal(idx, np.sort(first[0])) and p.remaining == 0 and p.number == 1
    assert p.next_pass() and p.number == 2 and p.remaining == 10
    idx2, part2 = p.take(4)
    assert np.array_equal(idx2, np.sort(first[1][:4])) and part2.pass_id != part.pass_id
    assert p.used == 14 and p.pass_id == part2.pass_id
    assert not p.next_pass() and p.number == 2 and p.used == 14
    assert not SinglePass(5, np.random.default_rng(0)).next_pass()
    with pytest.raises(ValueError, match="passes"):
        Passes(5, np.random.default_rng(0), 0)


def test_stream_chunk_bounds_the_draws_of_a_chunk():
    """The default chunk of a Poisson stream: as many samples as fit in
    STREAM_DRAW_FLOATS exponential draws, at least 1, at most STREAM_MAX_CHUNK;
    a stream at the default chunk gives the same samples as one drawn one
    sample per chunk from the same generator state (the chunk changes when the
    draws are made, not what they are)."""
    from dpreg.access import STREAM_DRAW_FLOATS, STREAM_MAX_CHUNK, Resample, stream_chunk

    assert stream_chunk(49_990, 16 / 49_990) == STREAM_MAX_CHUNK
    c = stream_chunk(49_990, 0.1)
    block = 4999 + 6 * 4999 ** 0.5 + 16
    assert c * block <= STREAM_DRAW_FLOATS < (c + 1) * block
    assert stream_chunk(10 ** 9, 0.5) == 1
    n, q, total = 5000, 0.3, 100
    a = Resample(n, np.random.default_rng(5)).poisson_stream(q, total)
    assert a.chunk == stream_chunk(n, q) < total
    b = Resample(n, np.random.default_rng(5)).poisson_stream(q, total, chunk=1)
    for _ in range(total):
        np.testing.assert_array_equal(a.next()[0], b.next()[0])
