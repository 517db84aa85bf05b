"""Fit a neural ODE to a spiral with softwave.deer.NeuralODE.

The data: one trajectory of dy/dt = (y ⊙ y ⊙ y) A, A = [[-0.1, 2], [-2, -0.1]],
from y(0) = (2, 0), sampled at 1,000 points over [0, 25] (a float64 RK4 loop with 10
substeps an interval). The model: dy/dt = W_out tanh(W_hidden y + b_hidden) + b_out
with 50 hidden units, trained with Adam on random windows of 10 intervals (20 a
batch), each window's states from its first point; every `--report` iterations the
whole trajectory from y(0) is integrated and its mean |error| printed.

    python3 bindings/python/examples/neural_ode_spiral.py [--iterations 500] [--device cuda]
"""

import argparse

import torch

import softwave.deer as deer

A = torch.tensor([[-0.1, 2.0], [-2.0, -0.1]], dtype=torch.float64)


def spiral(points=1000, end=25.0, substeps=10):
    """(t (points,), y (points, 2)) of the true dynamics."""
    t = torch.linspace(0, end, points, dtype=torch.float64)

    def f(y):
        return (y ** 3) @ A

    y, states = torch.tensor([2.0, 0.0], dtype=torch.float64), []
    for k in range(points):
        states.append(y)
        if k + 1 == points:
            break
        h = float(t[k + 1] - t[k]) / substeps
        for _ in range(substeps):
            k1 = f(y)
            k2 = f(y + 0.5 * h * k1)
            k3 = f(y + 0.5 * h * k2)
            k4 = f(y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return t, torch.stack(states)


def train(iterations=500, window=10, batch=20, report=100, device="cpu", seed=0, log=print):
    """The whole trajectory's mean |error| before training and after each
    report (a list)."""
    torch.manual_seed(seed)
    t, y = (a.float().to(device) for a in spiral())
    steps = torch.diff(t)
    model = deer.NeuralODE(2, 50, device=device)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)

    def whole_error():
        with torch.no_grad():
            return float((model(y[:1], steps) - y[None, 1:]).abs().mean())

    errors = [whole_error()]
    log(f"iteration 0: whole-trajectory error {errors[-1]:.4f}")
    for iteration in range(1, iterations + 1):
        start = torch.randint(0, len(t) - window, (batch,), device=device)
        index = start[:, None] + torch.arange(window, device=device)
        predicted = model(y[start], steps[index])  # (batch, window, 2)
        loss = (predicted - y[index + 1]).abs().mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if iteration % report == 0:
            errors.append(whole_error())
            log(f"iteration {iteration}: window loss {float(loss):.4f}, whole-trajectory error "
                f"{errors[-1]:.4f}, {model.last_report.path[0]}")
    return errors


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--report", type=int, default=100)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    train(args.iterations, report=args.report, device=args.device)
