#pragma once
// Plain float64 recurrent cells as PyTorch defines them (torch.nn.RNN with
// tanh, GRU, LSTM; one layer) and ParaRNN's LSTM (coupled input and forget
// gates, peepholes), evaluated step by step: the reference for
// softwave/deer.hpp. Used only by tests.

#include <cmath>
#include <vector>

namespace softwave_ref {

enum class Rnn { elman, gru, lstm, cifg_lstm };

inline int rnn_gates(Rnn cell) {
  return cell == Rnn::elman ? 1 : (cell == Rnn::lstm ? 4 : 3);
}

struct RnnParams {
  Rnn cell = Rnn::gru;
  int H = 1, m = 1;
  std::vector<double> w_ih, w_hh, b_ih, b_hh;  // row-major, PyTorch layouts
  std::vector<double> peephole;  // cifg_lstm's C_f (H), then C_o (H)
  int state() const {
    return cell == Rnn::lstm || cell == Rnn::cifg_lstm ? 2 * H : H;
  }
};

inline double sigmoid(double a) { return 1 / (1 + std::exp(-a)); }

// One step: state (H, or (h, c) for LSTM) and input x (m) to the next state.
inline std::vector<double> rnn_step(const RnnParams& p,
                                    const std::vector<double>& state,
                                    const double* x) {
  int const H = p.H, G = rnn_gates(p.cell);
  std::vector<double> a(G * H), c(G * H);  // input side, hidden side
  for (int k = 0; k < G * H; ++k) {
    double si = p.b_ih[k], sh = p.b_hh[k];
    for (int j = 0; j < p.m; ++j) si += p.w_ih[k * p.m + j] * x[j];
    for (int j = 0; j < H; ++j) sh += p.w_hh[k * H + j] * state[j];
    a[k] = si;
    c[k] = sh;
  }
  std::vector<double> out(p.state());
  for (int i = 0; i < H; ++i) {
    if (p.cell == Rnn::elman) {
      out[i] = std::tanh(a[i] + c[i]);
    } else if (p.cell == Rnn::gru) {
      double const r = sigmoid(a[i] + c[i]);
      double const z = sigmoid(a[H + i] + c[H + i]);
      double const n = std::tanh(a[2 * H + i] + r * c[2 * H + i]);
      out[i] = (1 - z) * n + z * state[i];
    } else if (p.cell == Rnn::cifg_lstm) {
      // Gates f, o, c (candidate).
      double const c_prev = state[H + i];
      double const fg = sigmoid(a[i] + c[i] + p.peephole[i] * c_prev);
      double const cand = std::tanh(a[2 * H + i] + c[2 * H + i]);
      double const cn = fg * c_prev + (1 - fg) * cand;
      double const og = sigmoid(a[H + i] + c[H + i] + p.peephole[H + i] * cn);
      out[i] = og * std::tanh(cn);
      out[H + i] = cn;
    } else {
      double const ig = sigmoid(a[i] + c[i]);
      double const fg = sigmoid(a[H + i] + c[H + i]);
      double const gg = std::tanh(a[2 * H + i] + c[2 * H + i]);
      double const og = sigmoid(a[3 * H + i] + c[3 * H + i]);
      double const cn = fg * state[H + i] + ig * gg;
      out[i] = og * std::tanh(cn);
      out[H + i] = cn;
    }
  }
  return out;
}

// Sequence of `length` steps from y0; x is (length, m) row-major. Returns
// (length, state) row-major.
inline std::vector<double> rnn_sequence(const RnnParams& p,
                                        const std::vector<double>& y0,
                                        const double* x, int length) {
  int const n = p.state();
  std::vector<double> out(std::size_t(length) * n);
  std::vector<double> state = y0;
  for (int t = 0; t < length; ++t) {
    state = rnn_step(p, state, x + std::size_t(t) * p.m);
    for (int i = 0; i < n; ++i) out[std::size_t(t) * n + i] = state[i];
  }
  return out;
}

}  // namespace softwave_ref
