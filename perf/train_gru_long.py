"""The DEER paper's headline, end to end: a GRU classifier trained on long
sequences with softwave.deer.GRU and with torch.nn.GRU (cuDNN on a GPU) from
the same initial weights, side by side: time per training step, the loss
curves and the final accuracy.

The task is generated (EigenWorms' shape: 6 channels, 17,984 steps, 5
classes): each class is a frequency; a sequence is Gaussian noise with a
weak sinusoid of its class's frequency, at a random phase, in one random
channel, so the class is only visible by integrating over the whole
sequence.

    python3 perf/train_gru_long.py --out train.json [--steps 17984] [--device cuda]

Both models: a one-layer GRU (hidden 32), a linear head on the last state,
Adam (lr 3e-3), the same batches in the same order.
"""

import argparse
import json
import math
import time

import torch

import softwave.deer as deer


def generate(count, steps, channels=6, classes=5, amplitude=0.25, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (count,), generator=g)
    t = torch.arange(steps, dtype=torch.float32)
    x = torch.randn(count, steps, channels, generator=g)
    freqs = torch.tensor([0.002 * (k + 1) for k in range(classes)])
    phase = torch.rand(count, generator=g) * 2 * math.pi
    channel = torch.randint(0, channels, (count,), generator=g)
    signal = amplitude * torch.sin(2 * math.pi * freqs[labels][:, None] * t[None] + phase[:, None])
    x[torch.arange(count), :, channel] += signal
    return x, labels


class Classifier(torch.nn.Module):
    def __init__(self, recurrent, hidden, classes):
        super().__init__()
        self.recurrent = recurrent
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        _, last = self.recurrent(x)
        return self.head(last[0])


def train(model, x, labels, epochs, batch, device):
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses, step_s = [], []
    for _ in range(epochs):
        for start in range(0, x.shape[0], batch):
            xb = x[start:start + batch].to(device)
            yb = labels[start:start + batch].to(device)
            if device == "cuda":
                torch.cuda.synchronize()
            begin = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if device == "cuda":
                torch.cuda.synchronize()
            step_s.append(time.perf_counter() - begin)
            losses.append(loss.item())
    return losses, step_s


def accuracy(model, x, labels, batch, device):
    right = 0
    with torch.no_grad():
        for start in range(0, x.shape[0], batch):
            logits = model(x[start:start + batch].to(device))
            right += int((logits.argmax(1).cpu() == labels[start:start + batch]).sum())
    return right / x.shape[0]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=17984)
    parser.add_argument("--train", type=int, default=256)
    parser.add_argument("--test", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--jacobian", default="full")
    args = parser.parse_args(argv)
    x, labels = generate(args.train + args.test, args.steps)
    x_train, y_train = x[:args.train], labels[:args.train]
    x_test, y_test = x[args.train:], labels[args.train:]
    results = {"steps": args.steps, "train": args.train, "test": args.test, "batch": args.batch,
               "hidden": args.hidden, "epochs": args.epochs, "device": args.device}
    torch.manual_seed(0)
    reference = torch.nn.GRU(6, args.hidden, batch_first=True)
    head = torch.nn.Linear(args.hidden, 5)
    for name, make in (("torch.nn.GRU", lambda: torch.nn.GRU(6, args.hidden, batch_first=True)),
                       ("softwave.deer.GRU", lambda: deer.GRU(6, args.hidden, jacobian=args.jacobian))):
        recurrent = make()
        recurrent.load_state_dict(reference.state_dict())
        model = Classifier(recurrent, args.hidden, 5)
        model.head.load_state_dict(head.state_dict())
        model.to(args.device)
        losses, step_s = train(model, x_train, y_train, args.epochs, args.batch, args.device)
        steady = sorted(step_s[1:] or step_s)
        results[name] = {"losses": losses, "median_step_ms": 1e3 * steady[len(steady) // 2],
                         "test_accuracy": accuracy(model, x_test, y_test, args.batch, args.device)}
        print(f"{name}: median step {results[name]['median_step_ms']:.1f} ms, final loss "
              f"{losses[-1]:.3f}, test accuracy {results[name]['test_accuracy']:.3f}", flush=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
