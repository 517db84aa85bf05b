"""softwave.ot.sampled_gw: TorchGW's spiral → Swiss roll task in every
distance mode, the objective, marginals and matching of the returned plan
against float64 NumPy, torch against NumPy, restarts and seeds, fused GW
(a linear cost as a matrix or as features), warm starts, and errors naming
the argument."""

import math

import numpy as np
import pytest

import softwave.ot as ot


def spiral(n, seed, roll):
    """TorchGW's benchmark data: a noisy spiral, or a Swiss roll (x, z, y)."""
    rng = np.random.default_rng(seed)
    theta, r = np.linspace(0, 9, n), np.linspace(0.3, 1, n)
    x = (r + rng.normal(0, 0.05, n)) * np.cos(theta)
    y = (r + rng.normal(0, 0.05, n)) * np.sin(theta)
    if roll:
        return np.stack([x, rng.uniform(0, 1, n), y], axis=1)
    return np.stack([x, y], axis=1)


def signed_spearman(matching):
    ranks = np.argsort(np.argsort(matching, kind="stable"), kind="stable").astype(float)
    order = np.arange(len(matching), dtype=float)
    return float(np.corrcoef(ranks, order)[0, 1])


def euclidean(x):
    return np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))


def gw_objective(dx, dy, plan):
    """Σ_ijkl (D_X(i,j) − D_Y(k,l))² T_ik T_jl in float64."""
    p, q = plan.sum(1), plan.sum(0)
    return float(p @ (dx ** 2) @ p + q @ (dy ** 2) @ q - 2 * np.sum(dx @ plan @ dy * plan))


@pytest.mark.parametrize("mode", ["landmark", "dijkstra"])
def test_spiral_to_swiss_roll(mode):
    x, y = spiral(300, 0, False), spiral(360, 1, True)
    r = ot.sampled_gw(x, y, distance_mode=mode, k=5, n_landmarks=20, M=80, alpha=0.8,
                      epsilon=0.005, max_iter=40, restarts=2, seed=3)
    assert r.matching.shape == (300,) and r.plan.shape == (300, 360)
    assert signed_spearman(r.matching) >= 0.99, (r.seed, r.objective)
    assert np.array_equal(r.matching, r.plan.argmax(1))
    # The last anchors reported are the polishing iteration's (8·M on the
    # CPU, 128 where CUDA's specialised solves take the float32 ones).
    assert r.iterations == 40 and len(r.source_anchors) == r.polish_anchors
    assert r.polish_anchors in (640, 128)
    assert math.isfinite(r.objective) and r.objective > 0


def test_dense_and_low_rank_solves_find_the_same_matching():
    """dense_cost_entries chooses how each solve holds the sampled cost (an
    N×K array, or its rank M + 2 factors); the cost is the same, so both
    runs find the forward matching with objectives within 1 % (on the CPU
    the same plan; CUDA's low-rank products round to TF32)."""
    x, y = spiral(300, 0, False), spiral(360, 1, True)
    kw = dict(distance_mode="landmark", k=5, n_landmarks=20, M=80, alpha=0.8, epsilon=0.005,
              max_iter=40, seed=0, plan=False)
    dense = ot.sampled_gw(x, y, **kw)
    low_rank = ot.sampled_gw(x, y, dense_cost_entries=0, **kw)
    assert dense.dense_solves and not low_rank.dense_solves
    assert signed_spearman(dense.matching) >= 0.99
    assert signed_spearman(low_rank.matching) >= 0.99
    assert abs(low_rank.objective - dense.objective) <= 0.01 * dense.objective


@pytest.mark.parametrize("n, k", [(400, 500), (600, 700)])
def test_solves_on_cuda_are_low_rank_by_default(n, k):
    """On CUDA float tensors with 200 points a side or more (mixed
    precision, the default), the solves take the specialised low-rank
    passes by default (faster there than dense solves on the portable
    passes); below 512 points a side, without mixed precision, and with
    dense_cost_entries they form the cost densely. Both find the forward
    matching with objectives within 5 %: the low-rank products round to
    TF32, so later iterations may draw other anchors, and runs that differ
    so differ by a few per cent."""
    torch = pytest.importorskip("torch")
    import softwave

    if not (softwave.has_cuda() and torch.cuda.is_available()):
        pytest.skip("no CUDA build or GPU")
    x, y = (torch.tensor(spiral(m, s, roll), dtype=torch.float32, device="cuda")
            for m, s, roll in ((n, 0, False), (k, 1, True)))
    kw = dict(distance_mode="landmark", k=5, n_landmarks=20, M=80, alpha=0.8, epsilon=0.005,
              max_iter=40, seed=0, plan=False)
    default = ot.sampled_gw(x, y, **kw)
    dense = ot.sampled_gw(x, y, dense_cost_entries=2 ** 24, **kw)
    assert not default.dense_solves and dense.dense_solves
    for r in (default, dense):
        assert signed_spearman(torch.as_tensor(r.matching).cpu().numpy()) >= 0.99
    assert abs(default.objective - dense.objective) <= 0.05 * dense.objective
    single = ot.sampled_gw(x, y, mixed_precision=False, **dict(kw, max_iter=1))
    assert single.dense_solves == (min(n, k) < 512)


@pytest.mark.parametrize("n, k, alpha", [(300, 1100, 0.8), (1500, 1700, 0.9)])
def test_matching_without_the_plan_is_its_argmax(n, k, alpha):
    """The matching is the argmax of the plan in every row: of the plan
    returned where there is one (exactly), else of the plan's terms as kept
    (on CUDA float tensors the specialised kernel, with tensor-core products
    of split FP16 operands): the same run without the plan matches each row
    to a column whose entry is the row's largest to 2e-3. Neither is exact
    beyond that in float: an entry's exponent is a sum of parts of a few
    thousand (potentials and products over ε), each rounded to 2⁻²⁴ of its
    size (the CUDA kernel's choices were within 3.9e-4 at 1500 × 1700)."""
    torch = pytest.importorskip("torch")
    import softwave

    device = "cuda" if softwave.has_cuda() and torch.cuda.is_available() else "cpu"
    x, y = (torch.tensor(spiral(m, s, roll), dtype=torch.float32, device=device)
            for m, s, roll in ((n, 0, False), (k, 1, True)))
    kw = dict(distance_mode="landmark", k=5, n_landmarks=20, M=80, alpha=alpha, epsilon=0.005,
              max_iter=15, seed=1, objective=False)
    with_plan = ot.sampled_gw(x, y, **kw)
    without = ot.sampled_gw(x, y, plan=False, **kw)
    plan = torch.as_tensor(with_plan.plan).double().cpu().numpy()
    assert np.array_equal(torch.as_tensor(with_plan.matching).cpu().numpy(), plan.argmax(1))
    chosen = torch.as_tensor(without.matching).cpu().numpy()
    assert chosen.min() >= 0 and chosen.max() < k
    best = plan.max(1)
    assert np.all(plan[np.arange(n), chosen] >= best * (1 - 2e-3)), \
        np.max(1 - plan[np.arange(n), chosen] / best)


@pytest.mark.parametrize("mode", ["landmark", "dijkstra", "precomputed"])
def test_device_shortest_paths_give_the_same_plan(mode):
    """shortest_paths="device" finds the k-NN graphs' distances where the
    arrays are; they are Dijkstra's to the last bit, so the plan is too."""
    x, y = spiral(120, 0, False), spiral(150, 1, True)
    kw = dict(distance_mode=mode, k=5, n_landmarks=12, M=20, epsilon=0.01, max_iter=8, seed=2)
    host = ot.sampled_gw(x, y, shortest_paths="host", **kw)
    device = ot.sampled_gw(x, y, shortest_paths="device", **kw)
    assert np.array_equal(device.plan, host.plan)
    assert device.objective == host.objective
    with pytest.raises(ValueError, match="shortest_paths"):
        ot.sampled_gw(x, y, shortest_paths="gpu", **kw)


def knn_geodesics(x, k):
    """Shortest paths on the symmetrised k-NN graph of x (Floyd–Warshall)."""
    d = euclidean(x)
    n = len(x)
    g = np.full((n, n), np.inf)
    np.fill_diagonal(g, 0)
    for i in range(n):
        for j in np.argsort(d[i], kind="stable")[1:k + 1]:
            g[i, j] = g[j, i] = d[i, j]
    for m in range(n):
        g = np.minimum(g, g[:, m:m + 1] + g[m:m + 1, :])
    return g


def test_precomputed_from_points_takes_the_graphs_shortest_paths():
    """TorchGW's "precomputed" mode given points: all shortest paths of the
    k-NN graphs, the same plan as those matrices given."""
    x, y = spiral(40, 0, False), spiral(50, 1, True)
    dx, dy = knn_geodesics(x, 4), knn_geodesics(y, 4)
    assert np.isfinite(dx).all() and np.isfinite(dy).all()  # connected: none joined
    kw = dict(distance_mode="precomputed", M=6, max_iter=5, epsilon=0.02, seed=5)
    from_points = ot.sampled_gw(x, y, k=4, **kw)
    given = ot.sampled_gw(dist_source=dx, dist_target=dy, **kw)
    assert np.allclose(from_points.plan, given.plan, rtol=1e-9, atol=1e-15)
    assert from_points.objective == pytest.approx(given.objective, rel=1e-9)
    with pytest.raises(ValueError, match="dist_source and dist_target"):
        ot.sampled_gw(distance_mode="precomputed")


def test_knn_graph_is_the_symmetrised_neighbour_graph():
    rng = np.random.default_rng(11)
    x = rng.uniform(-1, 1, (60, 3))
    d = euclidean(x)
    for k in (1, 4, 9):
        g = ot.knn_graph(x, k=k)
        assert g.shape == (60, 60) and g.indptr[0] == 0 and g.indptr[-1] == len(g.indices)
        want = np.zeros((60, 60), bool)
        for i in range(60):
            want[i, np.argsort(d[i], kind="stable")[1:k + 1]] = True
        want |= want.T
        got = np.zeros((60, 60), bool)
        for i in range(60):
            row = g.indices[g.indptr[i]:g.indptr[i + 1]]
            got[i, row] = True
            assert np.allclose(g.data[g.indptr[i]:g.indptr[i + 1]], d[i, row], rtol=1e-12)
        if g.joined_components == 0:
            assert np.array_equal(got, want)
        else:  # the joining edges are added to the neighbour edges
            assert np.array_equal(got & want, want)
            assert (got & ~want).sum() == 2 * g.joined_components
    # Two clusters far apart: one joining edge, between their closest points.
    two = np.concatenate([x, x + 100])
    g = ot.knn_graph(two, k=3)
    assert g.joined_components == 1
    for name, bad in (("k", dict(k=0)), ("k", dict(k=120))):
        with pytest.raises(ValueError, match=name):
            ot.knn_graph(two, **bad)
    with pytest.raises(ValueError, match="X"):
        ot.knn_graph(np.zeros(5))
    torch = pytest.importorskip("torch")
    from_torch = ot.knn_graph(torch.from_numpy(x), k=4)
    from_numpy = ot.knn_graph(x, k=4)
    assert np.array_equal(from_torch.indptr, from_numpy.indptr)
    assert np.array_equal(from_torch.indices, from_numpy.indices)
    assert np.array_equal(from_torch.data, from_numpy.data)
    scipy = pytest.importorskip("scipy.sparse")
    m = ot.knn_graph(x, k=4).to_scipy()
    assert isinstance(m, scipy.csr_matrix) and m.shape == (60, 60)
    assert np.allclose(m.toarray(), m.toarray().T)
    # Each edge once, at its distance (a mutual neighbour is listed twice
    # in the graph's own rows).
    edges = m.toarray() > 0
    assert m.nnz == edges.sum()
    assert np.allclose(m.toarray()[edges], d[edges], rtol=1e-12)


def test_multiscale_starts_from_the_coarse_plan_spread_and_scaled():
    """multiscale = the problem between farthest points, its plan spread over
    nearest chosen points and scaled to the marginals, as T_init: rebuilt
    here step by step, the same plan; and TorchGW's task still matched."""
    x, y = spiral(200, 0, False), spiral(240, 1, True)
    rng = np.random.default_rng(4)
    p = rng.uniform(0.5, 1, 200)
    p /= p.sum()
    kw = dict(distance_mode="landmark", k=5, n_landmarks=20, M=30, epsilon=0.01, max_iter=12,
              min_iter_before_converge=0, seed=7)
    got = ot.sampled_gw(x, y, p=p, multiscale=True, n_coarse=25, **kw)

    def farthest(z, count):
        chosen, nearest = [0], np.linalg.norm(z - z[0], axis=1)
        while len(chosen) < count:
            chosen.append(int(np.argmax(nearest)))
            nearest = np.minimum(nearest, np.linalg.norm(z - z[chosen[-1]], axis=1))
        d = np.linalg.norm(z[:, None, :] - z[None, chosen, :], axis=2)
        return np.array(chosen), d.argmin(1)

    sx, ax = farthest(x, 25)
    sy, ay = farthest(y, 25)
    coarse = ot.sampled_gw(x[sx], y[sy], **{**kw, "M": 12, "k": 5, "restarts": 4}).plan
    start = np.maximum(coarse[ax][:, ay], 1e-30)
    for _ in range(10):
        start *= (p / start.sum(1))[:, None]
        start *= (1 / 240 / start.sum(0))[None, :]
    want = ot.sampled_gw(x, y, p=p, T_init=start, **kw)
    assert np.allclose(got.plan, want.plan, rtol=1e-10, atol=1e-300)
    assert got.objective == pytest.approx(want.objective, rel=1e-10)
    task = ot.sampled_gw(spiral(300, 0, False), spiral(360, 1, True), distance_mode="landmark",
                         k=5, n_landmarks=20, M=80, alpha=0.8, epsilon=0.005, max_iter=40,
                         multiscale=True, seed=3)
    assert abs(signed_spearman(task.matching)) >= 0.99
    torch = pytest.importorskip("torch")
    from_torch = ot.sampled_gw(torch.from_numpy(x), torch.from_numpy(y), p=torch.from_numpy(p),
                               multiscale=True, n_coarse=25, **kw)
    assert np.allclose(from_torch.plan.numpy(), got.plan, rtol=1e-10, atol=1e-300)
    with pytest.raises(ValueError, match="T_init or multiscale"):
        ot.sampled_gw(x, y, multiscale=True, T_init=start)
    with pytest.raises(ValueError, match="n_coarse"):
        ot.sampled_gw(x, y, n_coarse=20)
    with pytest.raises(ValueError, match="n_coarse"):
        ot.sampled_gw(x, y, multiscale=True, n_coarse=200)


def small_problem(rng, n, k):
    x, y = rng.uniform(-1, 1, (n, 2)), rng.uniform(-1, 1, (k, 3))
    p, q = rng.uniform(0.2, 1, n), rng.uniform(0.2, 1, k)
    return euclidean(x), euclidean(y), p / p.sum(), q / q.sum()


def test_objective_marginals_and_matching_match_float64():
    rng = np.random.default_rng(11)
    dx, dy, p, q = small_problem(rng, 7, 9)
    r = ot.sampled_gw(dist_source=dx, dist_target=dy, p=p, q=q, distance_mode="precomputed",
                      M=5, max_iter=4, min_iter_before_converge=0, epsilon=0.5,
                      sinkhorn_iterations=2000, sinkhorn_tolerance=1e-12, seed=5)
    assert r.plan.dtype == np.float64
    np.testing.assert_allclose(r.plan.sum(1), p, rtol=1e-8)
    np.testing.assert_allclose(r.plan.sum(0), q, rtol=1e-8)
    assert r.objective == pytest.approx(gw_objective(dx, dy, r.plan), rel=1e-9)
    assert np.array_equal(r.matching, r.plan.argmax(1))


def test_exact_iterations_lower_the_objective_of_the_sampled_plan():
    rng = np.random.default_rng(21)
    dx, dy, p, q = small_problem(rng, 40, 50)
    kw = dict(dist_source=dx, dist_target=dy, p=p, q=q, distance_mode="precomputed", M=5,
              max_iter=30, epsilon=0.01, seed=3)
    sampled = ot.sampled_gw(**kw)
    refined = ot.sampled_gw(exact_iterations=20, **kw)
    # Exact steps descend from the sampled plan: a lower objective, the
    # marginals kept, the matching and objective the refined plan's.
    assert refined.objective < 0.9 * sampled.objective, (refined.objective, sampled.objective)
    np.testing.assert_allclose(refined.plan.sum(1), p, rtol=0, atol=1e-3)
    assert refined.objective == pytest.approx(gw_objective(dx, dy, refined.plan), rel=1e-9)
    assert np.array_equal(refined.matching, refined.plan.argmax(1))
    with pytest.raises(ValueError, match="exact_iterations"):
        ot.sampled_gw(exact_iterations=1, exact_objective_entries=40 * 50 - 1, **kw)


def test_polishing_iteration_is_reported_and_is_the_plan_returned():
    rng = np.random.default_rng(23)
    dx, dy, p, q = small_problem(rng, 30, 40)
    # Solves long enough to meet the marginals (ten warm-started iterations,
    # the default, leave these rows 17 % of the mass off, polished or not).
    kw = dict(dist_source=dx, dist_target=dy, p=p, q=q, distance_mode="precomputed", M=6,
              max_iter=12, min_iter_before_converge=0, epsilon=0.02, seed=4,
              sinkhorn_iterations=1000, sinkhorn_tolerance=1e-6)
    automatic = ot.sampled_gw(**kw)
    given = ot.sampled_gw(polish_anchors=9, **kw)
    none = ot.sampled_gw(polish_anchors=0, **kw)
    # 8·M by default (float64: the portable solves); the count given; none.
    assert (automatic.polish_anchors, given.polish_anchors, none.polish_anchors) == (48, 9, 0)
    assert len(given.source_anchors) == len(given.target_anchors) == 9
    assert len(none.source_anchors) == 6
    # The same sampled iterations, then a solve of its own: a plan of the
    # marginals whose objective is reported.
    assert given.iterations == none.iterations
    assert not np.allclose(given.plan, none.plan)
    np.testing.assert_allclose(given.plan.sum(1), p, rtol=0, atol=1e-3)
    assert given.objective == pytest.approx(gw_objective(dx, dy, given.plan), rel=1e-9)
    assert np.array_equal(given.matching, given.plan.argmax(1))
    # Exact iterations leave it out unless it is asked for.
    assert ot.sampled_gw(exact_iterations=1, **kw).polish_anchors == 0
    assert ot.sampled_gw(exact_iterations=1, polish_anchors=5, **kw).polish_anchors == 5


def test_objective_estimated_from_drawn_pairs_above_the_exact_size():
    rng = np.random.default_rng(19)
    dx, dy, p, q = small_problem(rng, 40, 50)
    kw = dict(dist_source=dx, dist_target=dy, p=p, q=q, distance_mode="precomputed", M=5,
              max_iter=6, epsilon=0.05, seed=8)
    exact = ot.sampled_gw(**kw)
    estimate = ot.sampled_gw(exact_objective_entries=0, objective_samples=1500, plan=False, **kw)
    assert exact.objective_error == 0 and estimate.objective_error > 0
    assert abs(estimate.objective - exact.objective) <= 5 * estimate.objective_error
    np.testing.assert_array_equal(estimate.matching, exact.matching)


def test_relaxed_source_and_target_keep_the_mass_the_kl_terms_allow():
    rng = np.random.default_rng(20)
    dx, dy, p, q = small_problem(rng, 12, 15)
    kw = dict(dist_source=dx, dist_target=dy, p=p, q=q * 3, distance_mode="precomputed", M=4,
              max_iter=5, epsilon=0.05, semi_relaxed=True, rho=0.5, seed=3,
              sinkhorn_iterations=3000, sinkhorn_tolerance=1e-12)
    with pytest.raises(ValueError, match="masses"):
        ot.sampled_gw(**{**kw, "semi_relaxed": False})
    target_only = ot.sampled_gw(**kw)
    both = ot.sampled_gw(rho_a=0.5, **kw)
    # The target relaxed alone keeps the rows at p; relaxing the source too
    # moves the row sums towards the target's mass.
    np.testing.assert_allclose(target_only.plan.sum(1), p, rtol=1e-6)
    assert both.plan.sum() > 1.05 and not np.allclose(both.plan.sum(1), p, rtol=1e-2)


def test_euclidean_mode_is_the_precomputed_one():
    rng = np.random.default_rng(12)
    x, y = rng.uniform(-1, 1, (20, 2)), rng.uniform(-1, 1, (25, 3))
    kw = dict(M=6, max_iter=5, epsilon=0.05, seed=9)
    a = ot.sampled_gw(x, y, distance_mode="euclidean", **kw)
    b = ot.sampled_gw(dist_source=euclidean(x), dist_target=euclidean(y),
                      distance_mode="precomputed", **kw)
    np.testing.assert_allclose(a.plan, b.plan, rtol=1e-9, atol=1e-15)


def rotated_embeddings(rng, n, dim, rank, noise):
    """Points with a rank-`rank` structure, and a shuffled, rotated, noisy
    copy: the target row that holds each source point's counterpart."""
    z = rng.normal(size=(n, rank)) @ rng.normal(size=(rank, dim)) + 0.3 * rng.normal(size=(n, dim))
    rotation, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    order = rng.permutation(n)
    y = (z @ rotation + noise * z.std() * rng.normal(size=(n, dim)))[order]
    return z, np.ascontiguousarray(y), np.argsort(order)


def cosine(x):
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    return 1.0 - unit @ unit.T


def test_cosine_mode_matches_embeddings_with_the_exact_cost():
    # Dense cosine distances, every pair near 1: each solve's exact cost
    # (no sampled anchors) finds the counterparts, the objective is that of
    # the 1 − cos matrices, and cosine mode is sqeuclidean mode of the rows
    # scaled to length 1/√2.
    rng = np.random.default_rng(17)
    x, y, truth = rotated_embeddings(rng, 150, 16, 4, 0.1)
    r = ot.sampled_gw(x, y, distance_mode="cosine", epsilon=5e-3, seed=3)
    assert np.mean(r.matching == truth) >= 0.99
    assert r.objective == pytest.approx(gw_objective(cosine(x), cosine(y), r.plan), rel=1e-8)
    unit = lambda z: z / (math.sqrt(2) * np.linalg.norm(z, axis=1, keepdims=True))
    same = ot.sampled_gw(unit(x), unit(y), distance_mode="sqeuclidean", epsilon=5e-3, seed=3)
    np.testing.assert_allclose(same.plan, r.plan, rtol=1e-7, atol=1e-15)
    with pytest.raises(ValueError, match="zero vectors"):
        ot.sampled_gw(np.vstack([x[:-1], np.zeros(16)]), y, distance_mode="cosine", max_iter=2)


def test_sqeuclidean_mode_reports_its_distances_objective():
    rng = np.random.default_rng(18)
    x, y = rng.uniform(-1, 1, (20, 2)), rng.uniform(-1, 1, (25, 3))
    r = ot.sampled_gw(x, y, distance_mode="sqeuclidean", max_iter=20, epsilon=0.02, seed=1,
                      sinkhorn_iterations=1000, sinkhorn_tolerance=1e-6)
    assert r.objective == pytest.approx(gw_objective(euclidean(x) ** 2, euclidean(y) ** 2, r.plan),
                                        rel=1e-9)
    assert np.abs(r.plan.sum(1) - 1 / 20).sum() <= 1e-5
    assert np.abs(r.plan.sum(0) - 1 / 25).sum() <= 1e-5


def test_restarts_keep_the_lowest_objective_and_seeds_repeat():
    rng = np.random.default_rng(13)
    dx, dy, _, _ = small_problem(rng, 12, 10)
    kw = dict(dist_source=dx, dist_target=dy, distance_mode="precomputed", M=4, max_iter=6,
              epsilon=0.02)
    best = ot.sampled_gw(restarts=4, seed=20, **kw)
    singles = [ot.sampled_gw(seed=20 + s, **kw) for s in range(4)]
    lowest = min(singles, key=lambda r: r.objective)
    assert best.objective == lowest.objective and best.seed == lowest.seed
    np.testing.assert_array_equal(best.plan, lowest.plan)
    np.testing.assert_array_equal(ot.sampled_gw(seed=21, **kw).plan, singles[1].plan)
    assert best.restart_objectives == [r.objective for r in singles]
    assert singles[0].restart_objectives == []


def test_a_race_runs_the_lowest_seed_to_the_end():
    # ε <= 5e-4 is not annealed, so a run of max_iter=3 is the first three
    # iterations of the run of max_iter=6.
    rng = np.random.default_rng(23)
    dx, dy, _, _ = small_problem(rng, 12, 10)
    kw = dict(dist_source=dx, dist_target=dy, distance_mode="precomputed", M=4, epsilon=5e-4,
              min_iter_before_converge=0, tol=0)
    race = ot.sampled_gw(restarts=4, restart_iterations=3, seed=30, max_iter=6, **kw)
    # The race compares the seeds' plans after their first iterations, not
    # polished.
    early = [ot.sampled_gw(seed=30 + s, max_iter=3, polish_anchors=0, **kw).objective
             for s in range(4)]
    assert race.restart_objectives == early
    winner = int(np.argmin(early))
    whole = ot.sampled_gw(seed=30 + winner, max_iter=6, **kw)
    assert race.seed == 30 + winner and race.objective == whole.objective
    np.testing.assert_array_equal(race.plan, whole.plan)
    with pytest.raises(ValueError, match="restart_iterations"):
        ot.sampled_gw(restarts=2, restart_iterations=-1, max_iter=6, **kw)


def test_torch_tensors_match_numpy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(14)
    dx, dy, p, q = small_problem(rng, 10, 11)
    kw = dict(distance_mode="precomputed", M=5, max_iter=5, epsilon=0.05, seed=2)
    want = ot.sampled_gw(dist_source=dx, dist_target=dy, p=p, q=q, **kw)
    got = ot.sampled_gw(dist_source=torch.tensor(dx), dist_target=torch.tensor(dy),
                        p=torch.tensor(p), q=torch.tensor(q), **kw)
    assert isinstance(got.plan, torch.Tensor) and got.matching.dtype == torch.int32
    np.testing.assert_allclose(got.plan.numpy(), want.plan, rtol=1e-12, atol=1e-18)
    assert got.objective == want.objective


def test_fused_gw_follows_features_as_matrix_or_factors():
    x, y = spiral(300, 0, False), spiral(360, 1, True)
    f = np.linspace(0, 1, 300)[:, None]
    g = np.linspace(0, 1, 360)[:, None]
    kw = dict(distance_mode="landmark", k=5, n_landmarks=20, M=40, alpha=0.8, epsilon=0.005,
              max_iter=25, fgw_alpha=0.3, seed=4)
    by_features = ot.sampled_gw(x, y, features_source=f, features_target=g, **kw)
    by_matrix = ot.sampled_gw(x, y, C_linear=(f - g.T) ** 2, **kw)
    assert signed_spearman(by_features.matching) >= 0.99
    np.testing.assert_allclose(by_features.plan, by_matrix.plan, rtol=1e-7,
                               atol=1e-9 * by_matrix.plan.max())
    inner = float(np.sum((f - g.T) ** 2 * by_features.plan))
    assert by_features.linear_objective == pytest.approx(inner, rel=1e-9)
    assert by_matrix.linear_objective == pytest.approx(inner, rel=1e-6)
    plain = ot.sampled_gw(x, y, **{**kw, "fgw_alpha": 0.0})
    assert math.isnan(plain.linear_objective) and math.isnan(plain.linear_objective_error)


def test_fused_gw_at_one_is_entropic_ot_of_the_linear_cost():
    rng = np.random.default_rng(17)
    dx, dy, p, q = small_problem(rng, 6, 8)
    c = rng.uniform(0, 1, (6, 8))
    r = ot.sampled_gw(dist_source=dx, dist_target=dy, p=p, q=q, distance_mode="precomputed",
                      C_linear=c, fgw_alpha=1.0, M=3, alpha=1.0, max_iter=1,
                      min_iter_before_converge=0, epsilon=0.1, sinkhorn_iterations=5000,
                      sinkhorn_tolerance=1e-13)
    want = ot.sinkhorn(cost_matrix=c, a=p, b=q, epsilon=0.1, epsilon_relative=False,
                       tolerance=1e-13, max_iterations=5000).plan()
    np.testing.assert_allclose(r.plan, want, rtol=1e-7, atol=1e-12)


def test_cost_average_steadies_the_plan_and_finds_the_matching():
    x, y = spiral(300, 0, False), spiral(360, 1, True)
    kw = dict(distance_mode="landmark", k=5, n_landmarks=20, M=40, alpha=0.8, epsilon=0.005,
              max_iter=30, min_iter_before_converge=10, check_every=1, tol=0.0, seed=6)
    plain = ot.sampled_gw(x, y, **kw)
    averaged = ot.sampled_gw(x, y, lambda_ema_beta=0.5, **kw)
    assert signed_spearman(averaged.matching) >= 0.99
    # The averaged cost moves less between iterations, and so does the plan.
    assert np.mean(averaged.changes) < 0.8 * np.mean(plain.changes), (
        averaged.changes, plain.changes)
    # β = 1 (each solve its own cost) and None are the plain algorithm.
    for beta in (None, 0.0, 1.0):
        same = ot.sampled_gw(x, y, lambda_ema_beta=beta, **kw)
        np.testing.assert_array_equal(same.plan, plain.plan)


@pytest.mark.parametrize("reversed_start", [False, True])
def test_warm_start_keeps_the_matching_it_starts_from(reversed_start):
    x, y = spiral(300, 0, False), spiral(360, 1, True)
    start = np.zeros((300, 360))
    columns = np.rint(np.arange(300) * 359 / 299).astype(int)
    start[np.arange(300), 359 - columns if reversed_start else columns] = 1.0
    kw = dict(distance_mode="landmark", k=5, n_landmarks=20, M=80, alpha=0.8, epsilon=0.005,
              max_iter=10, seed=5)
    r = ot.sampled_gw(x, y, T_init=start, plan=False, **kw)
    assert r.plan is None and start.sum() == 300  # the caller's plan is not written
    rho = signed_spearman(r.matching)
    assert (rho <= -0.99) if reversed_start else (rho >= 0.99)


@pytest.mark.parametrize(
    "change, name",
    [
        (dict(distance_mode="geodesic"), "distance_mode"),
        (dict(dist_source=None), "dist_source"),
        (dict(dist_source=np.ones((3, 4))), "dist_source"),
        (dict(epsilon=0.0), "epsilon"),
        (dict(M=0), "M"),
        (dict(p=np.ones(4)), "p"),
        (dict(max_iter=0), "max_iter"),
        (dict(fgw_alpha=1.5, C_linear=np.ones((5, 6))), "fgw_alpha"),
        (dict(fgw_alpha=0.5), "fgw_alpha"),
        (dict(C_linear=np.ones((5, 6))), "fgw_alpha"),
        (dict(fgw_alpha=0.5, C_linear=np.ones((6, 5))), "C_linear"),
        (dict(fgw_alpha=0.5, features_source=np.ones((5, 2))), "features_target"),
        (dict(fgw_alpha=0.5, features_source=np.ones(5), features_target=np.ones(6)),
         "features_source"),
        (dict(fgw_alpha=0.5, features_source=np.ones((5, 2)), features_target=np.ones((6, 3))),
         "features"),
        (dict(fgw_alpha=0.5, C_linear=np.full((5, 6), np.nan)), "linear"),
        (dict(T_init=np.ones((6, 5))), "T_init"),
        (dict(objective_samples=1), "objective_samples"),
        (dict(semi_relaxed=True, rho_a=0.0), "rho_a"),
        (dict(T_init=-np.ones((5, 6))), "warm start"),
        (dict(lambda_ema_beta=1.5), "lambda_ema_beta"),
        (dict(exact_iterations=-1), "exact_iterations"),
        (dict(polish_anchors=-1), "polish_anchors"),
        (dict(dense_cost_entries=-1), "dense_cost_entries"),
        (dict(early_sinkhorn_iterations=-1), "early_sinkhorn_iterations"),
        (dict(lambda_ema_beta="0.5"), "lambda_ema_beta"),
    ],
)
def test_bad_input_names_the_argument(change, name):
    rng = np.random.default_rng(15)
    dx, dy, _, _ = small_problem(rng, 5, 6)
    kw = dict(dist_source=dx, dist_target=dy, distance_mode="precomputed", max_iter=3)
    kw.update(change)
    with pytest.raises((ValueError, TypeError), match=name):
        ot.sampled_gw(**kw)


def test_non_finite_distances_are_refused():
    rng = np.random.default_rng(16)
    dx, dy, _, _ = small_problem(rng, 5, 6)
    dx[1, 2] = math.nan
    with pytest.raises(ValueError, match="non-finite"):
        ot.sampled_gw(dist_source=dx, dist_target=dy, distance_mode="precomputed", max_iter=3)


def dense_laplacian(graph):
    """D − W of a softwave.ot.knn_graph, W = 1/(distance + 1e-10) made
    symmetric by the larger weight, in dense float64."""
    n = graph.shape[0]
    w = np.zeros((n, n))
    for i in range(n):
        for q in range(graph.indptr[i], graph.indptr[i + 1]):
            j = graph.indices[q]
            w[i, j] = max(w[i, j], 1.0 / (graph.data[q] + 1e-10))
    w = np.maximum(w, w.T)
    return np.diag(w.sum(1)) - w


def test_joint_embedding_is_the_svd_of_the_coupled_systems():
    rng = np.random.default_rng(18)
    sets = {"a": rng.normal(size=(40, 2)), "b": rng.normal(size=(30, 3)),
            "anchor": rng.normal(size=(35, 2))}
    graphs = {name: ot.knn_graph(x, k=4) for name, x in sets.items()}
    plans = {(name, "anchor"): rng.uniform(0, 1, (len(sets[name]), 35)) / 1000
             for name in ("a", "b")}
    lam = 0.7
    got = ot.joint_embedding("anchor", sets, graphs, plans, lambda_reg=lam, out_dim=4)
    # H = diag(S_a, S_b)⁻¹ [T_a; T_b] S_anchor⁻¹ formed densely.
    t = [plans[("a", "anchor")], plans[("b", "anchor")]]
    s_anchor = dense_laplacian(graphs["anchor"]) + lam * np.diag(t[0].sum(0) + t[1].sum(0))
    inverses = [np.linalg.inv(dense_laplacian(graphs[n]) + lam * np.diag(p.sum(1)))
                for n, p in zip(("a", "b"), t)]
    h = np.vstack([inv @ p for inv, p in zip(inverses, t)]) @ np.linalg.inv(s_anchor)
    u, values, vt = np.linalg.svd(h)
    assert np.all(values[:4] > values[1:5] * (1 + 1e-3))  # distinct: vectors up to sign
    left = np.vstack([got["a"], got["b"]]).astype(np.float64)
    right = got["anchor"].astype(np.float64)
    assert left.shape == (70, 4) and right.shape == (35, 4)
    for c in range(4):
        sign = np.sign(left[:, c] @ u[:, c])
        np.testing.assert_allclose(sign * left[:, c], u[:, c], atol=2e-6)
        np.testing.assert_allclose(sign * right[:, c], vt[c], atol=2e-6)
    again = ot.joint_embedding("anchor", sets, graphs, plans, lambda_reg=lam, out_dim=4)
    np.testing.assert_array_equal(again["a"], got["a"])


def test_joint_embedding_places_matched_points_together():
    x, y = spiral(300, 0, False), spiral(360, 1, True)
    r = ot.sampled_gw(x, y, distance_mode="landmark", k=5, n_landmarks=20, M=80, alpha=0.8,
                      epsilon=0.005, max_iter=40, seed=3)
    e = ot.joint_embedding("roll", {"spiral": x, "roll": y},
                           {"spiral": ot.knn_graph(x, 10), "roll": ot.knn_graph(y, 10)},
                           {("spiral", "roll"): r.plan}, out_dim=5)
    a, b = e["spiral"], e["roll"]
    a, b = a / np.linalg.norm(a, axis=0), b / np.linalg.norm(b, axis=0)
    nearest = (((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)).argmin(1)
    assert np.corrcoef(nearest, r.matching)[0, 1] >= 0.99


def test_joint_embedding_refuses_bad_input():
    rng = np.random.default_rng(19)
    x, y = rng.normal(size=(12, 2)), rng.normal(size=(10, 2))
    sets, graphs = {"x": x, "y": y}, {"x": ot.knn_graph(x, 3), "y": ot.knn_graph(y, 3)}
    plan = np.full((12, 10), 1 / 120)
    call = lambda **kw: ot.joint_embedding(**{**dict(anchor_name="y", data_by_name=sets,
                                                     graphs_by_name=graphs,
                                                     transport_plans={("x", "y"): plan},
                                                     out_dim=3), **kw})
    assert call()["x"].shape == (12, 3)
    for kw, name in [(dict(anchor_name="z"), "anchor_name"),
                     (dict(transport_plans={}), "transport_plans"),
                     (dict(transport_plans={("x", "y"): plan.T}), "transport_plans"),
                     (dict(transport_plans={("x", "y"): -plan}), "non-negative"),
                     (dict(graphs_by_name={"x": graphs["x"]}), "graphs_by_name"),
                     (dict(out_dim=0), "out_dim"), (dict(lambda_reg=0.0), "lambda_reg")]:
        with pytest.raises(ValueError, match=name):
            call(**kw)
    # A point no edge and no plan mass reaches makes its system singular.
    lonely = graphs["x"].to_scipy().tolil()
    lonely[0, :] = 0
    lonely[:, 0] = 0
    lonely = lonely.tocsr()
    lonely.eliminate_zeros()
    gap = plan.copy()
    gap[0] = 0
    with pytest.raises(ValueError, match="no transport plan mass"):
        call(graphs_by_name={"x": lonely, "y": graphs["y"]}, transport_plans={("x", "y"): gap})


def _differentiable_problem(seed, n=6, k=5):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    dx, dy, p, q = small_problem(rng, n, k)
    as_tensor = lambda a: torch.tensor(a, dtype=torch.float64)
    return (torch, rng, dict(dist_source=as_tensor(dx), dist_target=as_tensor(dy), p=as_tensor(p),
                             q=as_tensor(q), distance_mode="precomputed", M=4, alpha=0.6,
                             max_iter=1, min_iter_before_converge=0, epsilon=0.2,
                             sinkhorn_iterations=100000, sinkhorn_tolerance=1e-13, seed=3))


def _central_differences(loss, x, h=1e-5):
    out = np.zeros(tuple(x.shape))
    for index in np.ndindex(*x.shape):
        up, down = x.clone(), x.clone()
        up[index] += h
        down[index] -= h
        out[index] = (loss(up) - loss(down)) / (2 * h)
    return out


@pytest.mark.parametrize("semi_relaxed", [False, True])
def test_differentiable_plan_matches_finite_differences_in_the_linear_cost(semi_relaxed):
    # One iteration: T = (1 − α) p⊗q + α π(C), the first anchors drawn from
    # p⊗q, so the whole run is a smooth function of C_linear.
    torch, rng, kw = _differentiable_problem(21)
    kw.update(fgw_alpha=0.4, semi_relaxed=semi_relaxed, rho=0.7)
    c = torch.tensor(rng.uniform(0, 1, (6, 5)), requires_grad=True)
    weights = torch.tensor(rng.uniform(-1, 1, (6, 5)))

    def loss(cost):
        with torch.no_grad():
            return float((ot.sampled_gw(C_linear=cost, **kw).plan * weights).sum())

    want = _central_differences(loss, c.detach())
    r = ot.sampled_gw(C_linear=c, differentiable=True, **kw)
    assert r.plan.requires_grad
    (r.plan * weights).sum().backward()
    np.testing.assert_allclose(c.grad.numpy(), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # Unrolled through the solve's (many) updates it is the implicit one.
    c.grad = None
    r = ot.sampled_gw(C_linear=c, differentiable=True, grad_mode="unrolled",
                      **{**kw, "sinkhorn_iterations": 3000})
    (r.plan * weights).sum().backward()
    np.testing.assert_allclose(c.grad.numpy(), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_differentiable_plan_reaches_the_features_and_unrolls_few_updates():
    torch, rng, kw = _differentiable_problem(22)
    kw.update(fgw_alpha=0.5)
    f = torch.tensor(rng.uniform(-1, 1, (6, 2)), requires_grad=True)
    g = torch.tensor(rng.uniform(-1, 1, (5, 2)), requires_grad=True)
    weights = torch.tensor(rng.uniform(-1, 1, (6, 5)))

    def loss_of(features_source, features_target):
        with torch.no_grad():
            plan = ot.sampled_gw(features_source=features_source, features_target=features_target,
                                 **kw).plan
            return float((plan * weights).sum())

    r = ot.sampled_gw(features_source=f, features_target=g, differentiable=True, **kw)
    (r.plan * weights).sum().backward()
    want_f = _central_differences(lambda x: loss_of(x, g.detach()), f.detach())
    want_g = _central_differences(lambda y: loss_of(f.detach(), y), g.detach())
    np.testing.assert_allclose(f.grad.numpy(), want_f, rtol=1e-5, atol=1e-5 * np.abs(want_f).max())
    np.testing.assert_allclose(g.grad.numpy(), want_g, rtol=1e-5, atol=1e-5 * np.abs(want_g).max())
    # Two unrolled updates are not yet the fixed point's derivative.
    implicit = f.grad.clone()
    f.grad = None
    r = ot.sampled_gw(features_source=f, features_target=g.detach(), differentiable=True,
                      grad_mode="unrolled", **{**kw, "sinkhorn_iterations": 2})
    (r.plan * weights).sum().backward()
    assert not torch.allclose(f.grad, implicit, rtol=1e-3)


def test_differentiable_refuses_what_it_cannot_differentiate():
    torch, rng, kw = _differentiable_problem(23)
    c = torch.tensor(rng.uniform(0, 1, (6, 5)), requires_grad=True)
    with pytest.raises(ValueError, match="linear cost"):
        ot.sampled_gw(differentiable=True, **kw)
    with pytest.raises(ValueError, match="grad_mode"):
        ot.sampled_gw(C_linear=c, fgw_alpha=0.5, differentiable=True, grad_mode="approximate", **kw)
    with pytest.raises(ValueError, match="plan"):
        ot.sampled_gw(C_linear=c, fgw_alpha=0.5, differentiable=True, plan=False, **kw)
    numpy_kw = {key: (v.numpy() if isinstance(v, torch.Tensor) else v) for key, v in kw.items()}
    with pytest.raises(TypeError, match="torch"):
        ot.sampled_gw(C_linear=c.detach().numpy(), fgw_alpha=0.5, differentiable=True, **numpy_kw)


def test_lowrank_couplings_match_the_spiral_and_keep_the_marginals():
    x, y = spiral(300, 0, False), spiral(360, 1, True)
    p = np.random.default_rng(5).uniform(0.5, 1, 300)
    p /= p.sum()
    kw = dict(p=p, rank=20, distance_mode="landmark", k=5, n_landmarks=20, M=80, alpha=0.8,
              epsilon=0.005, max_iter=40, restarts=2, seed=3)
    r = ot.sampled_lowrank_gw(x, y, **kw)
    assert signed_spearman(r.matching) >= 0.99, (r.seed, r.objective)
    # TorchGW's 50 Dykstra iterations leave a few per cent on the marginals
    # here; more close them.
    assert np.abs(r.plan.sum(1) - p).max() < 0.05 * p.max()
    r = ot.sampled_lowrank_gw(x, y, lr_dykstra_max_iter=500, **{**kw, "restarts": 1})
    np.testing.assert_allclose(r.plan.sum(1), p, rtol=3e-3)
    np.testing.assert_allclose(r.plan.sum(0), np.full(360, 1 / 360), rtol=3e-3)
    # Each term has rank 20; the mixture of the last few is far below 300.
    assert np.linalg.matrix_rank(r.plan, tol=1e-9 * np.abs(r.plan).max()) < 300
    plain = ot.sampled_gw(x, y, p=p, distance_mode="landmark", k=5, n_landmarks=20, M=80,
                          alpha=0.8, epsilon=0.005, max_iter=40, restarts=2, seed=3)
    assert np.linalg.matrix_rank(plain.plan, tol=1e-9 * np.abs(plain.plan).max()) == 300


def test_lowrank_couplings_refuse_what_they_do_not_do():
    x, y = spiral(60, 0, False), spiral(70, 1, True)
    with pytest.raises(ValueError, match="semi_relaxed"):
        ot.sampled_lowrank_gw(x, y, semi_relaxed=True)
    with pytest.raises(ValueError, match="differentiable"):
        ot.sampled_lowrank_gw(x, y, differentiable=True)
    with pytest.raises(ValueError, match="exact costs"):
        ot.sampled_lowrank_gw(x, y, distance_mode="cosine")
    with pytest.raises(ValueError, match="rank"):
        ot.sampled_lowrank_gw(x, y, rank=0)
    with pytest.raises(ValueError, match="lr_step"):
        ot.sampled_lowrank_gw(x, y, lr_step=0.0)


def test_differentiable_plan_takes_numpy_features_beside_torch_distances():
    # NumPy features beside torch distances: the core reads them as tensors,
    # autograd has no input to reach, and the plan is the plain run's. Low-rank
    # couplings take semi_relaxed=False and a zero Dykstra tolerance.
    torch, rng, kw = _differentiable_problem(24)
    f, g = rng.uniform(-1, 1, (6, 2)), rng.uniform(-1, 1, (5, 2))
    r = ot.sampled_gw(features_source=f, features_target=g, fgw_alpha=0.5, differentiable=True,
                      **kw)
    plain = ot.sampled_gw(features_source=f, features_target=g, fgw_alpha=0.5, **kw)
    assert torch.equal(r.plan, plain.plan) and not r.plan.requires_grad
    low_rank = ot.sampled_lowrank_gw(semi_relaxed=False, lr_dykstra_tol=0.0, rank=2, **kw)
    assert low_rank.plan.shape == (6, 5)
