"""A joint embedding of several point sets through their transport plans
(TorchGW's ``joint_embedding``): host linear algebra with SciPy on the
plans ``sampled_gw`` returns and the k-NN graphs ``knn_graph`` builds."""

from __future__ import annotations

import numbers

import numpy as np


def _host(name, a):
    """A float64 NumPy copy of an array or tensor (moved off its device)."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.number):
        raise TypeError(f"softwave: {name} must be numeric (got dtype {a.dtype})")
    return a.astype(np.float64)


def _laplacian(name, graph, count):
    """L = D − W of a graph of distances, W = 1/(distance + 1e-10) made
    symmetric by the larger weight of each pair."""
    from scipy import sparse

    if hasattr(graph, "to_scipy"):
        graph = graph.to_scipy()
    if not sparse.issparse(graph):
        raise TypeError(f"softwave: graphs_by_name[{name!r}] must be a graph from "
                        f"softwave.ot.knn_graph or a SciPy sparse matrix "
                        f"(got {type(graph).__name__})")
    graph = sparse.csr_matrix(graph, dtype=np.float64)
    if graph.shape != (count, count):
        raise ValueError(f"softwave: graphs_by_name[{name!r}] has shape {graph.shape}; "
                         f"its data set has {count} points")
    if graph.nnz and not (np.all(np.isfinite(graph.data)) and graph.data.min() >= 0):
        raise ValueError(f"softwave: graphs_by_name[{name!r}] must hold finite, "
                         f"non-negative distances")
    weights = graph.copy()
    weights.data = 1.0 / (weights.data + 1e-10)
    weights = weights.maximum(weights.T)
    degrees = np.asarray(weights.sum(axis=1)).ravel()
    return (sparse.diags(degrees) - weights).tocsc()


def joint_embedding(anchor_name, data_by_name, graphs_by_name, transport_plans,
                    lambda_reg: float = 1.0, out_dim: int = 30):
    """TorchGW's joint embedding of several data sets into one space: each
    query set q (every name in data_by_name but anchor_name) is tied to the
    anchor set a by its plan T_q = transport_plans[(q, a)] (N_q, N_a), and
    each set's k-NN graph by its Laplacian L (edge weights 1/distance).
    With S_q = L_q + λ diag(T_q 1) and S_a = L_a + λ Σ_q diag(T_qᵀ 1), the
    embeddings are the leading out_dim singular vectors of
        H = diag(S_q)⁻¹ [T_q; ...] S_a⁻¹
    (left: the queries', stacked in data_by_name's order; right: the
    anchor's), largest singular value first. Each S is factorised once
    (sparse LU) where TorchGW runs conjugate gradients to 1e-4 a product;
    the singular vectors come from ARPACK (scipy.sparse.linalg.svds) on H as
    an operator, never formed. Returns {name: (N, out_dim) float32 array}
    (out_dim lowered to min(N_q total, N_a) − 2 where that is smaller; a
    singular vector's sign is arbitrary). data_by_name's arrays give the
    sets' sizes; graphs_by_name holds softwave.ot.knn_graph results or SciPy
    sparse distance matrices; plans are NumPy arrays or tensors. Runs on the
    host, with SciPy."""
    try:
        from scipy import sparse
        from scipy.sparse.csgraph import connected_components
        from scipy.sparse.linalg import LinearOperator, splu, svds
    except ImportError as e:  # pragma: no cover - SciPy comes with scikit-learn
        raise ImportError("softwave: joint_embedding needs SciPy") from e

    if not isinstance(data_by_name, dict) or anchor_name not in data_by_name:
        raise ValueError(f"softwave: anchor_name {anchor_name!r} must be a key of data_by_name")
    queries = [name for name in data_by_name if name != anchor_name]
    if not queries:
        raise ValueError("softwave: data_by_name needs a data set besides the anchor")
    if isinstance(out_dim, bool) or not isinstance(out_dim, numbers.Integral) or out_dim < 1:
        raise ValueError(f"softwave: out_dim must be an integer >= 1 (got {out_dim!r})")
    lambda_reg = float(lambda_reg)
    if not (lambda_reg > 0 and np.isfinite(lambda_reg)):
        raise ValueError(f"softwave: lambda_reg must be positive and finite (got {lambda_reg})")
    sizes = {}
    for name, data in data_by_name.items():
        shape = getattr(data, "shape", None)
        if shape is None or len(shape) < 1 or shape[0] < 1:
            raise ValueError(f"softwave: data_by_name[{name!r}] must be an array of points "
                             f"(got shape {shape})")
        sizes[name] = int(shape[0])
        if name not in graphs_by_name:
            raise ValueError(f"softwave: graphs_by_name has no graph for {name!r}")
    plans = []
    for name in queries:
        key = (name, anchor_name)
        if key not in transport_plans:
            raise ValueError(f"softwave: transport_plans has no plan for {key!r}")
        plan = _host(f"transport_plans[{key!r}]", transport_plans[key])
        if plan.shape != (sizes[name], sizes[anchor_name]):
            raise ValueError(f"softwave: transport_plans[{key!r}] has shape {plan.shape}; "
                             f"expected ({sizes[name]}, {sizes[anchor_name]})")
        if not (np.all(np.isfinite(plan)) and plan.min() >= 0):
            raise ValueError(f"softwave: transport_plans[{key!r}] must be finite and "
                             f"non-negative")
        plans.append(plan)

    def solver(name, mass):
        """x ↦ S⁻¹x, S = L + λ diag(mass), by a sparse LU; S is singular
        where a component of the graph gets no plan mass."""
        laplacian = _laplacian(name, graphs_by_name[name], sizes[name])
        components, labels = connected_components(laplacian, directed=False)
        reached = np.bincount(labels, weights=mass, minlength=components)
        if not np.all(reached > 0):
            raise ValueError(f"softwave: {np.sum(reached <= 0)} component(s) of the graph of "
                             f"{name!r} get no transport plan mass: its system is singular "
                             f"(join the graph, as softwave.ot.knn_graph does)")
        return splu((laplacian + lambda_reg * sparse.diags(mass)).tocsc()).solve

    query_solvers = [solver(name, plan.sum(axis=1)) for name, plan in zip(queries, plans)]
    anchor_solver = solver(anchor_name, sum(plan.sum(axis=0) for plan in plans))

    bounds = np.cumsum([0] + [sizes[name] for name in queries])
    n_queries, n_anchor = int(bounds[-1]), sizes[anchor_name]

    def queries_solve(v):
        return np.concatenate([solve(v[bounds[i]:bounds[i + 1]])
                               for i, solve in enumerate(query_solvers)])

    def matvec(v):  # H v
        w = anchor_solver(np.asarray(v, dtype=np.float64).ravel())
        return queries_solve(np.concatenate([plan @ w for plan in plans]))

    def rmatvec(v):  # Hᵀ v (every S is symmetric)
        w = queries_solve(np.asarray(v, dtype=np.float64).ravel())
        return anchor_solver(sum(plan.T @ w[bounds[i]:bounds[i + 1]]
                                 for i, plan in enumerate(plans)))

    operator = LinearOperator((n_queries, n_anchor), matvec=matvec, rmatvec=rmatvec,
                              dtype=np.float64)
    count = min(int(out_dim), min(n_queries, n_anchor) - 2)
    if count < 1:
        raise ValueError(f"softwave: the data sets are too small for an embedding "
                         f"({n_queries} query and {n_anchor} anchor points)")
    # A fixed start vector: the same embedding on every call.
    start = np.ones(min(n_queries, n_anchor))
    left, values, right_t = svds(operator, k=count, tol=1e-10, v0=start)
    order = np.argsort(values)[::-1]
    left, right = left[:, order], right_t.T[:, order]
    out = {anchor_name: right.astype(np.float32)}
    for i, name in enumerate(queries):
        out[name] = left[bounds[i]:bounds[i + 1]].astype(np.float32)
    return out

