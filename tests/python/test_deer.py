"""softwave.deer against torch.nn.RNN / GRU / LSTM with the same weights:
outputs and gradients (x, h0, every weight) in float64, every method and
Jacobian mode, variable lengths, the drop-in modules loading torch's state
dicts, NumPy = torch, and errors naming the argument."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import softwave.deer as deer  # noqa: E402

TORCH_CELLS = {"elman": torch.nn.RNN, "gru": torch.nn.GRU, "lstm": torch.nn.LSTM}
MODES = [("deer", "full"), ("deer", "diagonal"), ("sequential", "full"), ("auto", "full")]


def torch_module(cell, m, H, seed):
    torch.manual_seed(seed)
    return TORCH_CELLS[cell](m, H, batch_first=True).double()


def weights(module):
    return (module.weight_ih_l0, module.weight_hh_l0, module.bias_ih_l0, module.bias_hh_l0)


@pytest.mark.parametrize("cell", ["elman", "gru", "lstm"])
@pytest.mark.parametrize("method,jacobian", MODES)
@pytest.mark.parametrize("B,T,m,H", [(1, 1, 1, 1), (3, 40, 2, 4), (2, 300, 3, 8)])
def test_matches_torch_values_and_gradients(cell, method, jacobian, B, T, m, H):
    module = torch_module(cell, m, H, B * 1000 + T)
    g = torch.Generator().manual_seed(T)
    x = torch.randn(B, T, m, dtype=torch.float64, generator=g, requires_grad=True)
    h = torch.randn(B, H, dtype=torch.float64, generator=g, requires_grad=True)
    c = torch.randn(B, H, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(B, T, H, dtype=torch.float64, generator=g)
    if cell == "lstm":
        expected, _ = module(x, (h[None], c[None]))
        got, _, report = deer.lstm(x, (h, c), *weights(module), method=method, jacobian=jacobian,
                                   atol=1e-12, rtol=1e-12, max_iter=1000)
    else:
        expected, _ = module(x, h[None])
        got, report = deer.rnn(x, h, *weights(module), cell=cell, method=method, jacobian=jacobian,
                               atol=1e-12, rtol=1e-12, max_iter=1000)
    assert torch.allclose(got, expected, atol=1e-10, rtol=0)
    if method == "deer":
        assert report.path == ["deer"] * B
    if method == "sequential":
        assert report.path == ["sequential"] * B
    inputs = [x, h] + ([c] if cell == "lstm" else []) + list(weights(module))
    want = torch.autograd.grad((expected * w).sum(), inputs)
    have = torch.autograd.grad((got * w).sum(), inputs)
    for a, b in zip(have, want):
        assert torch.allclose(a, b, atol=1e-9, rtol=1e-7)


def test_lengths_match_separate_runs():
    module = torch_module("gru", 2, 3, 7)
    x = torch.randn(3, 50, 2, dtype=torch.float64)
    lengths = [50, 17, 1]
    y, report = deer.gru(x, None, *weights(module), lengths=lengths, method="deer")
    for b, L in enumerate(lengths):
        expected, _ = module(x[b:b + 1, :L])
        assert torch.allclose(y[b, :L], expected[0], atol=1e-10)
        assert torch.all(y[b, L:] == 0)
    assert report.path == ["deer"] * 3


@pytest.mark.parametrize("Module,cell", [("GRU", "gru"), ("LSTM", "lstm")])
def test_modules_load_torch_state_dicts(Module, cell):
    reference = torch_module(cell, 3, 5, 11)
    ours = getattr(deer, Module)(3, 5, method="deer", dtype=torch.float64)
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(4, 60, 3, dtype=torch.float64, requires_grad=True)
    want, want_last = reference(x)
    got, got_last = ours(x)
    assert torch.allclose(got, want, atol=1e-10)
    if cell == "lstm":
        assert torch.allclose(got_last[0], want_last[0], atol=1e-10)
        assert torch.allclose(got_last[1], want_last[1], atol=1e-10)
    else:
        assert torch.allclose(got_last, want_last, atol=1e-10)
    got.sum().backward()
    want.sum().backward()
    for (name, p), q in zip(ours.named_parameters(), reference.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-9), name
    assert ours.last_report.path == ["deer"] * 4


def test_float32_and_numpy_agree_with_torch():
    module = torch_module("gru", 2, 4, 3).float()
    x = torch.randn(2, 500, 2)
    expected, _ = module(x)
    got, report = deer.gru(x, None, *weights(module), method="deer", start_warm_up=0)
    assert torch.allclose(got, expected, atol=2e-5)
    assert max(report.iterations) > 1
    w = [p.detach().numpy() for p in weights(module)]
    y_np, report_np = deer.gru(x.numpy(), None, *w, method="deer", start_warm_up=0)
    assert isinstance(y_np, np.ndarray) and y_np.dtype == np.float32
    assert np.allclose(y_np, got.detach().numpy(), atol=1e-6)
    assert report_np.iterations == report.iterations


def test_errors_name_the_argument():
    module = torch_module("gru", 2, 3, 5)
    x = torch.randn(2, 10, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="cell"):
        deer.rnn(x, None, *weights(module), cell="transformer")
    with pytest.raises(ValueError, match="atol"):
        deer.gru(x, None, *weights(module), atol=0)
    with pytest.raises(ValueError, match="y0"):
        deer.gru(x, torch.zeros(2, 4, dtype=torch.float64), *weights(module))
    with pytest.raises(ValueError, match="weight_ih"):
        deer.gru(torch.randn(2, 10, 3, dtype=torch.float64), None, *weights(module))
    with pytest.raises(ValueError, match="lengths"):
        deer.gru(x, None, *weights(module), lengths=[3, 11])
    with pytest.raises(ValueError, match="method"):
        deer.gru(x, None, *weights(module), method="fast")
    bad = x.clone()
    bad[0, 3, 1] = float("nan")
    with pytest.raises(ValueError, match="x"):
        deer.gru(bad, None, *weights(module))
    with pytest.raises(ValueError, match="kernel"):
        deer.gru(x, None, *weights(module), kernel="fast")
    with pytest.raises(ValueError, match="damping"):
        deer.gru(x, None, *weights(module), jacobian="diagonal", damping=-1)
    with pytest.raises(ValueError, match="jacobian"):
        deer.gru(x, None, *weights(module), jacobian="block", damping=1)
    with pytest.raises(ValueError, match="start_warm_up"):
        deer.gru(x, None, *weights(module), start_warm_up=-1)


@pytest.mark.parametrize("Module,cell", [(deer.GRU, "gru"), (deer.LSTM, "lstm")])
def test_start_from_chunks_matches_torch_in_fewer_iterations(Module, cell):
    """The default start (each chunk evaluated from zeros start_warm_up
    steps before it; chunks of 16 steps here, so that it is not the answer)
    and the start from zeros give torch's states and gradients; the first
    takes fewer Newton iterations, and one where its warm-up reaches the
    first step."""
    torch.manual_seed(3)
    x = torch.randn(2, 400, 3, dtype=torch.float64, requires_grad=True)
    module = TORCH_CELLS[cell](3, 4, batch_first=True).double()
    iterations = {}
    for warm_up in (0, 8, 400):
        got = deer.rnn(x, None, *weights(module), cell=cell, method="deer", chunk=16, start_warm_up=warm_up)
        run_against_torch(cell, module, x, method="deer", chunk=16, start_warm_up=warm_up)
        iterations[warm_up] = got[-1].iterations
    assert all(a < b for a, b in zip(iterations[8], iterations[0])), iterations
    assert iterations[400] == [1, 1], iterations
    layer = Module(3, 4, method="deer", start_warm_up=0).double()
    layer.load_state_dict(module.state_dict())
    layer(x)
    assert layer.last_report.iterations == iterations[0]


def run_against_torch(cell, module, x, **options):
    """softwave.deer's cell against torch's module with the same weights:
    states and every gradient (x and the weights) in float64; the report."""
    expected, _ = module(x)
    if cell == "lstm":
        got, _, report = deer.lstm(x, None, *weights(module), **options)
    else:
        got, report = deer.rnn(x, None, *weights(module), cell=cell, **options)
    assert torch.allclose(got, expected, atol=1e-10, rtol=0)
    w = torch.randn_like(expected)
    want = torch.autograd.grad((expected * w).sum(), [x] + list(weights(module)))
    have = torch.autograd.grad((got * w).sum(), [x] + list(weights(module)))
    for a, b in zip(have, want):
        assert torch.allclose(a, b, atol=1e-9, rtol=1e-7)
    return expected.detach(), report


@pytest.mark.parametrize("cell,jacobian", [("gru", "diagonal"), ("lstm", "diagonal"), ("gru", "full"),
                                           ("lstm", "full")])
def test_damped_matches_torch(cell, jacobian):
    # Levenberg-Marquardt steps (quasi-ELK, ELK): torch's states and
    # gradients, the report says "damped", the drop-in module takes damping too.
    m, H, B, T = 3, 5, 2, 200
    module = torch_module(cell, m, H, 11)
    x = torch.randn(B, T, m, dtype=torch.float64, requires_grad=True)
    options = dict(method="deer", jacobian=jacobian, damping=0.5, atol=1e-13, rtol=1e-12,
                   max_iter=5000)
    expected, report = run_against_torch(cell, module, x, **options)
    assert report.path == ["damped"] * B
    assert min(report.iterations) >= 1
    drop_in = getattr(deer, cell.upper())(m, H, **options).double()
    drop_in.load_state_dict(module.state_dict())
    y, _ = drop_in(x.detach())
    assert torch.allclose(y, expected, atol=1e-10, rtol=0)
    assert drop_in.last_report.path == ["damped"] * B


@pytest.mark.parametrize("cell,H,block", [("gru", 4, 2), ("lstm", 3, 3), ("elman", 6, 3)])
def test_block_jacobians_match_torch(cell, H, block):
    # The Jacobians' diagonal blocks (ParaRNN's 2x2 / 3x3): torch's states
    # and gradients.
    m, B, T = 2, 2, 150
    module = torch_module(cell, m, H, 13)
    x = torch.randn(B, T, m, dtype=torch.float64, requires_grad=True)
    _, report = run_against_torch(cell, module, x, method="deer", jacobian="block", block_size=block,
                                  atol=1e-13, rtol=1e-12, max_iter=5000)
    assert report.path == ["deer"] * B
    with pytest.raises(ValueError, match="block_size"):
        deer.rnn(x.detach(), None, *weights(module), cell=cell, jacobian="block", block_size=5)


def full_hidden_weights(diagonal_column, H):
    """ParaRNN-style diagonal hidden weights (G·H, 1) as the full (G·H, H)
    matrix torch's cells take: each gate's block diagonal."""
    G = diagonal_column.shape[0] // H
    return torch.cat([torch.diag(block) for block in diagonal_column.reshape(G, H)])


@pytest.mark.parametrize("Module,cell", [("GRU", "gru"), ("LSTM", "lstm")])
def test_diagonal_cells_match_torch_with_diagonal_weights(Module, cell):
    # diagonal=True: torch's cell with each gate's W_hh diagonal, states and
    # gradients (weight_hh's: its diagonal's); the module solves by exact
    # Newton on the Jacobian's structure (diagonal, or an LSTM's strided 2x2
    # blocks), in the iterations full-Jacobian Newton takes (from zeros: the
    # units' chunks and the whole state's differ, and with them the start
    # evaluated chunk by chunk).
    m, H, B, T = 3, 6, 2, 400
    ours = getattr(deer, Module)(m, H, diagonal=True, method="deer", start_warm_up=0, dtype=torch.float64)
    assert ours.weight_hh_l0.shape == ({"gru": 3, "lstm": 4}[cell] * H, 1)
    assert ours.options["jacobian"] == ("block" if cell == "lstm" else "diagonal")
    reference = torch_module(cell, m, H, 17)
    with torch.no_grad():
        for name, p in ours.named_parameters():
            getattr(reference, name).copy_(full_hidden_weights(p, H) if name == "weight_hh_l0" else p)
    x = torch.randn(B, T, m, dtype=torch.float64, requires_grad=True)
    want, _ = reference(x)
    got, _ = ours(x)
    assert torch.allclose(got, want, atol=1e-10, rtol=0)
    assert ours.last_report.path == ["deer"] * B
    w = torch.randn_like(want)
    have = torch.autograd.grad((got * w).sum(), [x] + list(ours.parameters()))
    expected = torch.autograd.grad((want * w).sum(), [x] + list(reference.parameters()))
    for (name, _), a, b in zip([("x", None)] + list(ours.named_parameters()), have, expected):
        if name == "weight_hh_l0":
            b = torch.stack([torch.diagonal(block) for block in b.reshape(-1, H, H)]).reshape(-1, 1)
        assert torch.allclose(a, b, atol=1e-9, rtol=1e-7), name
    full_options = dict(method="deer", jacobian="full", start_warm_up=0)
    if cell == "lstm":
        _, _, full_report = deer.lstm(x.detach(), None, *weights(reference), **full_options)
    else:
        _, full_report = deer.gru(x.detach(), None, *weights(reference), **full_options)
    assert ours.last_report.iterations == full_report.iterations
    # NumPy takes the same weights.
    numpy_weights = [p.detach().numpy() for p in weights(ours)]
    if cell == "lstm":
        h, _, report = deer.lstm(x.detach().numpy(), None, *numpy_weights, diagonal=True, method="deer",
                                 jacobian="block", block_size=2, block_layout="strided", start_warm_up=0)
    else:
        h, report = deer.gru(x.detach().numpy(), None, *numpy_weights, diagonal=True, method="deer",
                             jacobian="diagonal", start_warm_up=0)
    assert np.allclose(h, got.detach().numpy(), atol=1e-10)
    assert report.iterations == full_report.iterations


def pararnn_reference(module, x, state=None):
    """ParaRNN's recurrences step by step from its equations and parameters
    (A (3, H), B (heads, m/heads, 3, H/heads), b (3, H), C (2, H)), float64:
    the states h (B, T, H)."""
    H, heads = module.hidden_size, module.num_heads
    B_, T = x.shape[0], x.shape[1]
    A, b = module.A, module.b
    # Input projections per gate v and unit h·(H/heads) + j.
    xh = x.reshape(B_, T, heads, -1)
    proj = torch.einsum("bthi,hivj->btvhj", xh, module.B).reshape(B_, T, 3, H) + b
    h = x.new_zeros(B_, H) if state is None else state[0]
    c = x.new_zeros(B_, H) if state is None else state[1]
    out = []
    for t in range(T):
        p = proj[:, t]
        if module.cell == "gru":
            z = torch.sigmoid(A[0] * h + p[:, 0])
            r = torch.sigmoid(A[1] * h + p[:, 1])
            candidate = torch.tanh(A[2] * h * r + p[:, 2])
            h = z * candidate + (1 - z) * h
        else:
            f = torch.sigmoid(A[0] * h + p[:, 0] + module.C[0] * c)
            c = f * c + (1 - f) * torch.tanh(A[2] * h + p[:, 2])
            o = torch.sigmoid(A[1] * h + p[:, 1] + module.C[1] * c)
            h = o * torch.tanh(c)
        out.append(h)
    return torch.stack(out, 1)


@pytest.mark.parametrize("Module", ["ParaGRU", "ParaLSTM"])
@pytest.mark.parametrize("heads,B,T,m,H", [(1, 1, 1, 1, 1), (2, 3, 200, 4, 6), (1, 2, 50, 3, 5)])
def test_pararnn_cells_match_their_equations(Module, heads, B, T, m, H):
    # ParaRNN's GRU and LSTM with its parameters: states and the gradients of
    # x, A, B, b (and the LSTM's peepholes C) against its recurrences step by
    # step; exact Newton on the units' structure.
    torch.manual_seed(B * 100 + T)
    ours = getattr(deer, Module)(m, H, heads, method="deer", atol=1e-12, rtol=1e-12, dtype=torch.float64)
    names = ["A", "B", "b"] + (["C"] if Module == "ParaLSTM" else [])
    assert [name for name, _ in ours.named_parameters()] == names
    assert ours.B.shape == (heads, m // heads, 3, H // heads)
    x = torch.randn(B, T, m, dtype=torch.float64, requires_grad=True)
    want = pararnn_reference(ours, x)
    got = ours(x)
    assert got.shape == (B, T, H)
    assert torch.allclose(got, want, atol=1e-10, rtol=0)
    assert ours.last_report.path == ["deer"] * B
    assert max(ours.last_report.iterations) <= 12
    w = torch.randn_like(want)
    params = [x] + list(ours.parameters())
    have = torch.autograd.grad((got * w).sum(), params)
    expected = torch.autograd.grad((want * w).sum(), params)
    for name, a, e in zip(["x"] + names, have, expected):
        assert torch.allclose(a, e, atol=1e-9, rtol=1e-7), name
    # A ParaRNN state dict loads as it is; an initial state is taken.
    other = getattr(deer, Module)(m, H, heads, method="deer", atol=1e-12, rtol=1e-12, dtype=torch.float64)
    other.load_state_dict({k: v * 0.5 for k, v in ours.state_dict().items()})
    h0, c0 = torch.randn(B, H, dtype=torch.float64), torch.randn(B, H, dtype=torch.float64)
    state = (h0, c0) if Module == "ParaLSTM" else (h0, None)
    start = state if Module == "ParaLSTM" else h0
    with torch.no_grad():
        assert torch.allclose(other(x, start), pararnn_reference(other, x, state), atol=1e-10, rtol=0)


def test_cifg_lstm_numpy_torch_and_sequential_agree():
    # deer.cifg_lstm with dense and diagonal hidden weights: DEER, the
    # sequential loop and NumPy give the same states (h and c).
    g = torch.Generator().manual_seed(3)
    B, T, m, H = 2, 120, 3, 4
    x = torch.randn(B, T, m, dtype=torch.float64, generator=g)
    h0, c0 = (0.5 * torch.randn(B, H, dtype=torch.float64, generator=g) for _ in range(2))
    for diagonal in (False, True):
        w_ih, w_hh, b_ih, b_hh, peephole = (0.5 * torch.randn(*shape, dtype=torch.float64, generator=g) for shape in
                                            ((3 * H, m), (3 * H, 1 if diagonal else H), (3 * H,), (3 * H,), (2 * H,)))
        args = (w_ih, w_hh, peephole, b_ih, b_hh)
        h, c, report = deer.cifg_lstm(x, (h0, c0), *args, diagonal=diagonal, method="deer", atol=1e-12, rtol=1e-12)
        assert report.path == ["deer"] * B
        hs, cs, _ = deer.cifg_lstm(x, (h0, c0), *args, diagonal=diagonal, method="sequential")
        assert torch.allclose(h, hs, atol=1e-10) and torch.allclose(c, cs, atol=1e-10)
        hn, cn, _ = deer.cifg_lstm(x.numpy(), (h0.numpy(), c0.numpy()), *(a.numpy() for a in args),
                                   diagonal=diagonal, method="deer", atol=1e-12, rtol=1e-12)
        assert np.allclose(hn, h.numpy(), atol=1e-10) and np.allclose(cn, c.numpy(), atol=1e-10)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_projected_inputs_match_the_weights(cell):
    # weight_ih None: x holds W_ih x (+ b_ih): the same states, and through
    # torch's own product the same gradients of x and every weight.
    module = torch_module(cell, 3, 4, 9)
    w_ih, w_hh, b_ih, b_hh = weights(module)
    x = torch.randn(2, 60, 3, dtype=torch.float64, requires_grad=True)
    opts = dict(cell=cell, method="deer", atol=1e-12, rtol=1e-12)
    want, _ = deer.rnn(x, None, w_ih, w_hh, b_ih, b_hh, **opts)
    got, report = deer.rnn(x @ w_ih.T, None, None, w_hh, b_ih, b_hh, **opts)
    assert torch.allclose(got, want, atol=1e-12)
    assert report.path == ["deer"] * 2
    w = torch.randn_like(want)
    params = [x, w_ih, w_hh, b_ih, b_hh]
    for a, b in zip(torch.autograd.grad((got * w).sum(), params), torch.autograd.grad((want * w).sum(), params)):
        assert torch.allclose(a, b, atol=1e-10)
    projected = (x @ w_ih.T + b_ih).detach().numpy()
    y, _ = deer.rnn(projected, None, None, w_hh.detach().numpy(), None, b_hh.detach().numpy(), **opts)
    assert np.allclose(y, want.detach().numpy(), atol=1e-12)
    with pytest.raises(ValueError, match="weight_ih"):
        deer.rnn(x.detach(), None, None, w_hh, b_ih, b_hh, **opts)


def test_peephole_errors_name_the_argument():
    x = torch.randn(2, 10, 2, dtype=torch.float64)
    w_ih, w_hh, b = torch.randn(9, 2, dtype=torch.float64), torch.randn(9, 1, dtype=torch.float64), None
    with pytest.raises(ValueError, match="peephole"):
        deer.rnn(x, None, w_ih, w_hh, b, b, cell="cifg_lstm", diagonal=True)
    with pytest.raises(ValueError, match="peephole"):
        deer.rnn(x, None, w_ih, w_hh, b, b, cell="cifg_lstm", diagonal=True,
                 peephole=torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="peephole"):
        deer.rnn(x, None, w_ih, w_hh, b, b, cell="gru", diagonal=True, peephole=torch.zeros(6, dtype=torch.float64))
    with pytest.raises(ValueError, match="num_heads"):
        deer.ParaGRU(3, 4, num_heads=2)


def test_diagonal_weights_errors_name_the_argument():
    module = torch_module("gru", 2, 3, 5)
    x = torch.randn(2, 10, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="weight_hh"):  # full weights declared diagonal
        deer.gru(x, None, *weights(module), diagonal=True)
    column = module.weight_hh_l0[:, :1]
    with pytest.raises(ValueError, match="block_layout"):
        deer.gru(x, None, module.weight_ih_l0, column, diagonal=True, jacobian="block", block_size=1,
                 block_layout="diagonal")


def test_kernel_choice_on_the_host():
    # The portable kernels are the host's: "portable" gives what "automatic"
    # gives, and insisting on the fused CUDA iteration is an error naming
    # the kernel.
    module = torch_module("gru", 2, 3, 6)
    x = torch.randn(2, 200, 2, dtype=torch.float64)
    y, _ = deer.gru(x, None, *weights(module), method="deer", jacobian="diagonal")
    y_portable, _ = deer.gru(x, None, *weights(module), method="deer", jacobian="diagonal",
                             kernel="portable")
    assert torch.equal(y, y_portable)
    with pytest.raises(ValueError, match="kernel"):
        deer.gru(x, None, *weights(module), method="deer", jacobian="diagonal", kernel="specialised")


def test_training_script_runs_both_models(tmp_path):
    """perf/train_gru_long.py on a short task: both models train from the same
    weights, and their first losses agree (same initial model, same batch)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "perf" / "train_gru_long.py"
    spec = importlib.util.spec_from_file_location("train_gru_long", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    results = script.main(["--out", str(tmp_path / "train.json"), "--steps", "300", "--train", "32",
                           "--test", "16", "--epochs", "1", "--hidden", "8", "--device", "cpu"])
    first = [results[name]["losses"][0] for name in ("torch.nn.GRU", "softwave.deer.GRU")]
    assert abs(first[0] - first[1]) < 1e-4
    assert len(results["softwave.deer.GRU"]["losses"]) == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("kernel", ["automatic", "portable"])
@pytest.mark.parametrize("cell,jacobian", [("gru", "full"), ("gru", "diagonal"), ("lstm", "diagonal")])
def test_cuda_tensors_match_torch(cell, jacobian, kernel):
    # CUDA tensors through the library's CUDA backend (the fused iteration
    # under "automatic" where it applies), in float64 against torch's module
    # on the same device: values and every gradient.
    import softwave

    if not softwave.has_cuda():
        pytest.skip("softwave was built without CUDA")
    module = torch_module(cell, 3, 4, 21).cuda()
    x = torch.randn(3, 700, 3, dtype=torch.float64, device="cuda", requires_grad=True)
    w = torch.randn(3, 700, 4, dtype=torch.float64, device="cuda")
    expected, _ = module(x)
    got, report = deer.rnn(x, None, *weights(module), cell=cell, method="deer", jacobian=jacobian,
                           kernel=kernel, atol=1e-12, rtol=1e-12, max_iter=1000)
    got = got[..., :4]  # an LSTM's states are (h, c): h is torch's output
    assert torch.allclose(got, expected, atol=1e-10, rtol=0)
    assert report.path == ["deer"] * 3
    inputs = [x] + list(weights(module))
    want = torch.autograd.grad((expected * w).sum(), inputs)
    have = torch.autograd.grad((got * w).sum(), inputs)
    for a, b in zip(have, want):
        assert torch.allclose(a, b, atol=1e-9, rtol=1e-7)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("Module", ["ParaGRU", "ParaLSTM"])
@pytest.mark.parametrize("B", [1, 3])
def test_cuda_pararnn_cells_match_their_equations(Module, B):
    # ParaRNN's cells on CUDA tensors (units as sequences of their own, the
    # fused iteration where it applies) against its recurrences step by step
    # on the same device: values and every gradient.
    import softwave

    if not softwave.has_cuda():
        pytest.skip("softwave was built without CUDA")
    torch.manual_seed(B)
    ours = getattr(deer, Module)(4, 8, 2, method="deer", atol=1e-12, rtol=1e-12, dtype=torch.float64).cuda()
    x = torch.randn(B, 700, 4, dtype=torch.float64, device="cuda", requires_grad=True)
    want = pararnn_reference(ours, x)
    got = ours(x)
    assert torch.allclose(got, want, atol=1e-10, rtol=0)
    assert ours.last_report.path == ["deer"] * B
    w = torch.randn_like(want)
    params = [x] + list(ours.parameters())
    have = torch.autograd.grad((got * w).sum(), params)
    expected = torch.autograd.grad((want * w).sum(), params)
    for a, e in zip(have, expected):
        assert torch.allclose(a, e, atol=1e-9, rtol=1e-7)


def scan_loop(a, b, y0, reverse):
    """The recurrence step by step in torch (differentiable)."""
    state = torch.zeros_like(a[..., 0]) if y0 is None else y0
    steps = range(a.shape[-1] - 1, -1, -1) if reverse else range(a.shape[-1])
    out = [None] * a.shape[-1]
    for t in steps:
        state = a[..., t] * state + b[..., t]
        out[t] = state
    return torch.stack(out, dim=-1)


def scan_inputs(rng, shape, dtype=torch.float64, device="cpu"):
    def tensor(values):
        return torch.tensor(values, dtype=dtype, device=device, requires_grad=True)
    return (tensor(rng.uniform(-0.99, 0.99, shape)), tensor(rng.standard_normal(shape)),
            tensor(rng.standard_normal(shape[:-1])), torch.tensor(rng.standard_normal(shape), dtype=dtype,
                                                                  device=device))


@pytest.mark.parametrize("shape", [(1,), (3, 5), (2, 3, 700), (2, 5000)])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("kernel", ["automatic", "portable"])
@pytest.mark.parametrize("with_y0", [False, True])
def test_linear_recurrence_matches_the_loop_with_gradients(rng, shape, reverse, kernel, with_y0):
    a, b, y0, w = scan_inputs(rng, shape)
    h = y0 if with_y0 else None
    got = deer.linear_recurrence(a, b, h, reverse=reverse, kernel=kernel)
    want = scan_loop(a, b, h, reverse)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    wanted = (a, b, y0) if with_y0 else (a, b)
    got_grads = torch.autograd.grad((got * w).sum(), wanted)
    want_grads = torch.autograd.grad((want * w).sum(), wanted)
    for g, e in zip(got_grads, want_grads):
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-9)


def test_linear_recurrence_gradcheck(rng):
    a, b, y0, _ = scan_inputs(rng, (2, 37))
    assert torch.autograd.gradcheck(lambda a, b, y0: deer.linear_recurrence(a, b, y0, reverse=True), (a, b, y0))


def test_linear_recurrence_float32_and_numpy(rng):
    a, b, y0, _ = scan_inputs(rng, (4, 3000))
    want = scan_loop(a, b, y0, False).detach().numpy()
    got32 = deer.linear_recurrence(a.float(), b.float(), y0.float())
    assert got32.dtype == torch.float32
    np.testing.assert_allclose(got32.detach().numpy(), want, atol=2e-5 * max(1.0, np.abs(want).max()))
    got_np = deer.linear_recurrence(a.detach().numpy(), b.detach().numpy(), y0.detach().numpy())
    np.testing.assert_allclose(got_np, want, rtol=1e-12, atol=1e-12)


def test_linear_recurrence_errors_name_the_argument():
    a = torch.rand(3, 10, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"\bb\b"):
        deer.linear_recurrence(a, torch.rand(3, 11, dtype=torch.float64))
    with pytest.raises(ValueError, match="y0"):
        deer.linear_recurrence(a, a, torch.rand(4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\bb\b"):
        deer.linear_recurrence(a, a.float())
    bad = a.clone()
    bad[1, 3] = float("nan")
    with pytest.raises(ValueError, match=r"\ba\b"):
        deer.linear_recurrence(bad, a)
    with pytest.raises(ValueError, match="kernel"):
        deer.linear_recurrence(a, a, kernel="pairs")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("kernel", ["automatic", "portable"])
def test_linear_recurrence_cuda_matches_the_loop(rng, kernel):
    import softwave
    if not softwave.has_cuda():
        pytest.skip("softwave built without CUDA")
    a, b, y0, w = scan_inputs(rng, (3, 20000), device="cuda")
    got = deer.linear_recurrence(a, b, y0, reverse=True, kernel=kernel)
    cpu = [t.detach().cpu().requires_grad_() for t in (a, b, y0)]
    want = deer.linear_recurrence(*cpu, reverse=True)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-10, atol=1e-10)
    got_grads = torch.autograd.grad((got * w).sum(), (a, b, y0))
    want_grads = torch.autograd.grad((want * w.cpu()).sum(), cpu)
    for g, e in zip(got_grads, want_grads):
        torch.testing.assert_close(g.cpu(), e, rtol=1e-9, atol=1e-9)
