#pragma once
// Nonlinear recurrences y_t = f(y_{t−1}, x_t) evaluated for all t at once
// (DEER, Lim et al. 2023), batched, on any Kokkos execution space, with
// gradients by implicit differentiation.
//
// Sequence b has length L_b <= T, state size n, inputs x_t (m values a
// step) and an initial state y_0. Newton's method on the whole trajectory:
// around the current guess y^k, each step is linearised,
//   y_t ≈ f(y^k_{t−1}, x_t) + J_t (y_{t−1} − y^k_{t−1}),
//   J_t = ∂f/∂y (y^k_{t−1}, x_t),
// and the linear recurrence for the update δ_t = y^{k+1}_t − y^k_t,
//   δ_t = r_t + J_t δ_{t−1},  δ_0 = 0,  r_t = f(y^k_{t−1}, x_t) − y^k_t
// (the residual, zero at the solution), is solved by a chunked parallel
// scan: each chunk of `chunk` steps composes its steps' affine maps
// (A₂,b₂)∘(A₁,b₁) = (A₂A₁, A₂b₁ + b₂) into one, the chunks' maps are
// scanned the same way (recursively), and each chunk then replays its steps
// from its carried-in δ. Jacobians are recomputed in the replay instead of
// stored: memory is two trajectories (B·T·n) plus one composed map per
// chunk, never T·n². Work is O(T·n³) an iteration with full Jacobians,
// O(T·n) with their diagonal (quasi-DEER: the same fixed point, reached in
// more iterations), O(T·n·k²) with their diagonal blocks of k×k (the cell
// gives its full Jacobian, the solver keeps the blocks; the composed maps
// take n·k values). A sequence stops once max_t,i |δ_t,i| <= atol +
// rtol·|y_t,i|; a converged sequence costs nothing in later iterations.
//
// Damping (ELK, Gonzalez et al. 2024): with λ = DeerOptions::damping > 0
// each update is the Levenberg–Marquardt step
//   δ = argmin Σ_t |δ_t − J_t δ_{t−1} − r_t|² + λ Σ_t |δ_t|²,
// the smoothed mean of a linear-Gaussian state-space model (dynamics
// δ_t = J_t δ_{t−1} + r_t + noise of variance 1, observations 0 = δ_t +
// noise of variance 1/λ). With the Jacobians' diagonal (quasi-ELK) each
// state decouples into a scalar Kalman filter and smoother: the filter's
// variances by a parallel scan of Möbius maps (2×2 products), its means by
// a scan of affine maps, the smoother by a second affine scan backwards in
// time. With full Jacobians (ELK) the filter is the parallel scan of
// Särkkä and García-Fernández's filtering elements (n×n products and
// solves, O(T·n³) a step's work, the Jacobians and covariances (B, T, n²)
// in memory) and the smoother an affine scan of n×n maps
// (softwave/deer_elk.hpp); on a GRU with weights ×3 it took 10–26
// iterations where quasi-ELK took 25–1,128. Where the cell does not
// contract (an LSTM's cell state) its covariances grow like 1/λ and the
// filter's solves lose that factor of precision: in float32 it can stall
// above its tolerance (the guard then evaluates the sequence), and some
// float64 draws took over 1,000 iterations where Newton took 8. The filter's
// gain keeps each step's effective multiplier bounded where |J| is large, so
// the products that make plain Newton overflow stay finite; the fixed point is
// the same (r = 0 gives δ = 0). A damped sequence stops once its residual
// max_t,i |r_t,i| <= atol + rtol·|y_t,i| (the error left is about the residual
// / (1 − |J|), so their default tolerances are a hundredth of Newton's, whose
// last update bounds it).
//
// Damped iterations converge linearly, and on a cell with two stable
// states (h' = tanh(3h + x)) they did not converge within 5,000 iterations
// where plain Newton did in a few: they are an option, not the guard's
// default.
//
// Guard: a sequence whose update is not finite (an overflowing Jacobian
// product, a cell that makes Newton diverge) or that has not converged
// within max_iterations is evaluated sequentially instead (path =
// fallback); finite inputs never give a NaN that the sequential
// evaluation would not.
//
// Gradients (implicit differentiation; nothing is differentiated through
// the iterations): for a loss with dL/dy_t = ḡ_t, the adjoint
//   λ_t = ḡ_t + J_{t+1}ᵀ λ_{t+1},  λ_{L} = ḡ_L (J at the solution)
// is the same kind of linear recurrence backwards in time, solved by the
// same scan (exactly, in one pass, with full Jacobians; by quasi-Newton
// iterations with their diagonal); then dL/dx_t = (∂f/∂x_t)ᵀ λ_t,
// dL/dy_0 = J_1ᵀ λ_1, and a cell's weights get Σ_t (∂f/∂θ)ᵀ λ_t.
//
// Every entry point takes the execution-space instance first; every kernel
// and allocation runs on it and is labelled softwave::deer::*. A call
// fences the instance once per Newton iteration (to read how many
// sequences are still iterating) and once for the data checks.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <optional>
#include <softwave/errors.hpp>
#include <softwave/kernel_choice.hpp>
#include <type_traits>

namespace softwave {

enum class DeerMethod {
  automatic,   // DEER where it is expected to beat the sequential loop
               // (see DeerOptions), else sequential
  deer,        // Newton iterations with parallel scans
  sequential,  // the loop over t in one kernel, a thread a sequence (or a
               // team: DeerOptions::sequential_team_size)
};

// The Jacobians the Newton steps use.
enum class DeerJacobian {
  full,      // ∂f/∂y (n×n): Newton, quadratic convergence
  diagonal,  // its diagonal (quasi-DEER): O(n) a step, linear convergence
  block,     // its diagonal blocks of DeerOptions::block_size (heads, or
             // ParaRNN's 2×2 / 3×3): O(n·k²) a step, linear convergence
};

// Which states a block of jacobian = block couples (k = block_size).
enum class DeerBlockLayout {
  contiguous,  // block q: states q·k … q·k + k − 1 (heads)
  strided,  // block q: states q, q + n/k, …, q + (k − 1)·n/k. With k = 2,
            // an LSTM's (h_q, c_q): its Jacobian with diagonal hidden
            // weights (RnnWeights::diagonal_hh) is exactly these blocks
};

// How each sequence's result was obtained (DeerResult::path).
enum class DeerPath : int {
  deer = 0,        // converged Newton iterations
  fallback = 1,    // not finite or not converged: evaluated sequentially
  sequential = 2,  // evaluated sequentially, as chosen up front
  damped = 3,      // converged damped (Levenberg–Marquardt) iterations
};

struct DeerOptions {
  DeerMethod method = DeerMethod::automatic;
  DeerJacobian jacobian = DeerJacobian::full;
  // The blocks' side k with jacobian = block: >= 1 and dividing the state
  // size n (k = 1 is the diagonal, k = n the full Jacobian). The cell gives
  // its full Jacobian and the solver keeps the blocks.
  int block_size = 2;
  DeerBlockLayout block_layout = DeerBlockLayout::contiguous;
  // Convergence: max |δ_t,i| <= atol + rtol·|y_t,i| for every step and
  // state of the sequence. Both > 0 and finite; unset: the DEER paper's
  // float32 defaults 1e-4 / 1e-3 for float, 1e-10 / 1e-8 for double; with
  // damping > 0 (where they bound the residual) a hundredth of those.
  // Full Jacobians converge quadratically: the last update bounds the error
  // left. Diagonal or block Jacobians (quasi-Newton) converge linearly at
  // some rate ρ, and a last update of δ leaves about δ·ρ/(1 − ρ): where
  // they converge slowly it exceeds the tolerance (an Elman cell at n = 2
  // that took 448 iterations, ρ ≈ 0.97, ended 35 times its tolerance from
  // the sequential states): a smaller tolerance bounds the error there.
  std::optional<double> atol, rtol;
  // >= 1. Newton on a recurrence of length L is exact after L iterations,
  // but a sequence still iterating here is evaluated sequentially.
  int max_iterations = 100;
  // The starting λ of damped (Levenberg–Marquardt) updates, >= 0 and
  // finite: 0 takes plain Newton steps; above 0 every update is damped,
  // with jacobian = diagonal (quasi-ELK) or full (ELK; not block). Each
  // sequence's λ then follows
  // a trust-region schedule (halved after an update that lowered its worst
  // residual ratio, back to this value after one that did not).
  double damping = 0;
  // Start from the trajectory in DeerResult::y (read): a warm start from
  // the previous training step's states.
  bool warm_start = false;
  // Without warm_start, where Newton starts: > 0, from a trajectory
  // evaluated chunk by chunk (the scan's chunks, a thread each), each
  // chunk's steps one after another from zeros this many steps before it,
  // or from the initial state where that reaches the first step. A cell
  // that forgets its past (a trained or freshly initialised GRU or LSTM) is
  // then close to its answer at every step, and Newton takes fewer
  // iterations than from zeros; the pass costs about
  // (chunk + start_warm_up) / chunk evaluations of each step. Where the
  // CUDA fused iteration runs, its first pass evaluates the start itself,
  // a thread per run of steps (8 at n = 1, else 1), each from zeros this
  // many steps before its run. 0: from zeros, as the DEER paper does.
  // Unset: 32 (measured faster, perf/RESULTS.md); where the fused iteration
  // runs, 16 at n > 1 (a thread's one step pays its warm-up alone) and
  // zeros for full Jacobians of a state of 2 (an LSTM unit's (h, c)), where
  // it cannot start itself.
  std::optional<int> start_warm_up;
  // Steps per chunk of the scan (>= 1), and chunks per group at each level
  // of the scan over chunks where above 1; 0 chooses from the batch, the
  // length and the space's concurrency.
  int chunk = 0;
  // Data checks (finite inputs, initial states and weights; lengths in
  // [1, T]), read back with one fence per call.
  bool check_values = true;
  // The Newton iterations' kernels (kernel_choice.hpp). On Kokkos::Cuda the
  // library's cells (deer_rnn, deer_rnn_gradients) have a fused iteration:
  // linearisation, scan and update in one kernel that reads each step
  // once, for diagonal Jacobians (and full ones at n = 1, where they are
  // the same) with n <= 16; `automatic` takes it there. A user's cell, and
  // damped iterations, run the portable kernels. `portable` also keeps the
  // sequential loop portable (sequential_team_size).
  Kernel kernel = Kernel::automatic;
  // How often the host reads the Newton iterations' convergence back (each
  // read waits for the device): after every check_every-th iteration,
  // >= 0. 0 never: all max_iterations iterations are issued, and those
  // after a sequence converged skip its work, so nothing in the call waits
  // for the device (with check_values off) and the library's cells can be
  // captured in a CUDA graph; set max_iterations near what the sequences
  // need. Above 1 the waits are fewer, at the cost of up to check_every − 1
  // iterations issued after the last sequence converged.
  int check_every = 1;
  // Threads that share each sequence's steps in the sequential loop (the
  // method, and the fallback), where the cell can divide a step among them
  // (the neural-ODE field of deer_ode.hpp: its hidden units; deer_rnn's
  // cells with dense hidden weights: the rows of W_hh h), >= 0. 0 chooses:
  // on a device a team a sequence where the team's values fit its fast
  // memory, on the host a thread a sequence; 1 a thread a sequence; above 1
  // that many threads (at most the host's threads, or 32 on a device).
  // Other cells run a thread a sequence. The backward's loops follow the
  // same choice (the neural ODE's sweep, the adjoint of deer_rnn's cells).
  // On CUDA, 0 takes the backend's loop for deer_rnn's forward with dense
  // hidden weights, 8 gate rows or more and H up to 64 instead (a block a
  // sequence, a row of W_hh a thread in registers; not with
  // Kernel::portable); the adjoint's loop stays the portable one.
  int sequential_team_size = 0;
  // Threads that share one chunk of a sequence in the Newton iterations'
  // passes (full and block Jacobians of k×k blocks): each linearises a
  // step, and every step's products (its map on the chunk's offset, and on
  // the chunk's composed map) are divided among them, >= 0. 0 chooses: on
  // a device a team a chunk for blocks of k >= 4 where a step's values fit
  // its fast memory, on the host a thread a chunk; 1 a thread a chunk;
  // above 1 that many threads (at most the host's threads, or 256 on a
  // device). The scan's upper levels follow the same choice. ELK's passes
  // (damping with full Jacobians) run a team a chunk whatever the choice:
  // 0 gives one thread on the host and 32 to 128 on a device (about one
  // for four entries of an n×n product), 1 one thread, above 1 that many
  // (at most the host's threads, or 128 on a device).
  int chunk_team_size = 0;
};

template <class T, class Space>
using DeerView3 =
    Kokkos::View<T***, Kokkos::LayoutRight, typename Space::memory_space>;
template <class T, class Space>
using DeerView2 =
    Kokkos::View<T**, Kokkos::LayoutRight, typename Space::memory_space>;
template <class T, class Space>
using DeerView1 = Kokkos::View<T*, typename Space::memory_space>;

// The sequences. Views are row-major in the space's memory.
template <class T, class Space>
struct DeerInputs {
  DeerView3<const T, Space> x;          // (B, T, m)
  DeerView2<const T, Space> y0;         // (B, n), or empty for zeros
  DeerView1<const int, Space> lengths;  // (B), 1 <= L_b <= T; empty: all T
};

// Outputs. y is required; the others are optional.
template <class T, class Space>
struct DeerResult {
  // (B, T, n): y_1 .. y_T (entry t holds y_{t+1}); zero from L_b on. Read as
  // the starting trajectory with warm_start.
  DeerView3<T, Space> y;
  DeerView1<int, Space> iterations;  // (B) Newton iterations run
  DeerView1<int, Space> path;        // (B) DeerPath
};

// Gradients of a loss L given dL/dy (grad_y, (B, T, n); entries from L_b on
// are ignored). Every output is optional (empty: not computed) and
// overwritten.
template <class T, class Space>
struct DeerGradients {
  DeerView3<const T, Space> grad_y;  // (B, T, n)
  DeerView3<T, Space> grad_x;        // (B, T, m)
  DeerView2<T, Space> grad_y0;       // (B, n)
  // (B, T, n): λ_t = dL/dy_t including every later step's dependence on
  // y_t — what a user cell's own parameter gradients are summed from:
  // dL/dθ = Σ_t (∂f/∂θ (y_{t−1}, x_t))ᵀ λ_t.
  DeerView3<T, Space> adjoint;
};

// ---------------------------------------------------------------------------
// Recurrent cells as PyTorch defines them (torch.nn.RNN with tanh,
// torch.nn.GRU, torch.nn.LSTM; one layer, batch_first), with PyTorch's
// weight layouts, so a module's state dict is used as it is:
//   elman  h' = tanh(W_ih x + b_ih + W_hh h + b_hh)          G = 1
//   gru    r = σ(W_ir x + b_ir + W_hr h + b_hr)               G = 3
//          z = σ(W_iz x + b_iz + W_hz h + b_hz)
//          n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))
//          h' = (1 − z) ⊙ n + z ⊙ h
//   lstm   i, f, g, o = σ, σ, tanh, σ of (W_ih x + b_ih + W_hh h + b_hh)
//          c' = f ⊙ c + i ⊙ g,  h' = o ⊙ tanh(c')              G = 4
// with hidden size H, and ParaRNN's LSTM (Danieli et al. 2025, after
// Greff et al.'s CIFG variant: the input gate coupled to the forget gate,
// with peepholes C_f and C_o from the cell state, gates f, o, c in that
// order, their hidden-side weights W_hf, W_ho, W_hc):
//   cifg_lstm  f = σ(W_if x + b_if + W_hf h + b_hf + C_f ⊙ c)   G = 3
//              ĉ = tanh(W_ic x + b_ic + W_hc h + b_hc)
//              c' = f ⊙ c + (1 − f) ⊙ ĉ
//              o = σ(W_io x + b_io + W_ho h + b_ho + C_o ⊙ c')
//              h' = o ⊙ tanh(c')
// The state is h (n = H), for lstm and cifg_lstm (h, c) (n = 2H: h in the
// first H entries of y and y0, c in the last H). ParaRNN's GRU is gru with
// diagonal_hh, b_hn = 0 and its update gate's weights and biases negated
// (its z is PyTorch's 1 − z; softwave.deer.ParaGRU maps its parameters).
// The input projections W_ih x_t + b_ih of all steps are formed once,
// before the iterations (as cuDNN does); the recurrence then carries only
// W_hh. With weight_ih empty, x holds them already (m = G·H, b_ih still
// added if given): a caller with a large input size forms them with its
// own matrix product (a GEMM library, heads' block-diagonal weights), and
// grad_x is then dL/d(projections).
//
// With diagonal_hh each gate's hidden-side matrix is diagonal, as in
// ParaRNN's cells: W_hh is given as (G·H, 1), row g·H + i holding the
// weight of h_i in gate g's unit i. A unit then sees only its own past, so
// the Jacobian ∂y_t/∂y_{t−1} is diagonal for elman and gru (DEER with
// jacobian = diagonal is exact Newton at O(n) a step) and, for lstm, 2×2
// blocks coupling (h_i, c_i) (exact with jacobian = block, block_size = 2,
// block_layout = strided), as for cifg_lstm.
enum class RnnCell { elman, gru, lstm, cifg_lstm };

template <class T, class Space>
struct RnnWeights {
  RnnCell cell = RnnCell::gru;
  DeerView2<const T, Space> weight_ih;  // (G·H, m), or empty: x projected
  DeerView2<const T, Space> weight_hh;  // (G·H, H), or (G·H, 1) diagonal_hh
  DeerView1<const T, Space> bias_ih;    // (G·H), or empty for zeros
  DeerView1<const T, Space> bias_hh;    // (G·H), or empty for zeros
  DeerView1<const T, Space> peephole;   // cifg_lstm's (2H): C_f, then C_o
  bool diagonal_hh = false;
};

// Gradients of the weights (each optional, overwritten), beside
// DeerGradients' grad_y, grad_x, grad_y0 and adjoint.
template <class T, class Space>
struct RnnWeightGradients {
  DeerView2<T, Space> weight_ih;
  DeerView2<T, Space> weight_hh;  // weight_hh's shape
  DeerView1<T, Space> bias_ih;
  DeerView1<T, Space> bias_hh;
  DeerView1<T, Space> peephole;  // cifg_lstm's (2H)
};

// Evaluates the recurrence for every sequence of the batch. float or double.
template <class Space, class T>
void deer_rnn(const Space& space, const RnnWeights<T, Space>& weights,
              const DeerInputs<T, Space>& inputs,
              const DeerResult<T, Space>& result,
              const DeerOptions& options = {});

// Gradients at the states y that deer_rnn returned for the same weights and
// inputs. options.jacobian chooses how the adjoint recurrence is solved
// (full: one exact scan; diagonal: quasi-Newton iterations to atol/rtol);
// options.method = sequential solves it by the plain reverse loop.
template <class Space, class T>
void deer_rnn_gradients(const Space& space, const RnnWeights<T, Space>& weights,
                        const DeerInputs<T, Space>& inputs,
                        DeerView3<const T, Space> y,
                        const DeerGradients<T, Space>& gradients,
                        const RnnWeightGradients<T, Space>& weight_gradients,
                        const DeerOptions& options = {});

// ---------------------------------------------------------------------------
// Any cell: a copyable functor callable on the space's device, with
//   using value_type = float or double;
//   KOKKOS_FUNCTION int state_size() const;  // n
//   KOKKOS_FUNCTION int input_size() const;  // m
//   KOKKOS_FUNCTION int work_size() const;   // scratch values a call may use
//   // y = f(y_prev, x); with jacobian non-null also ∂f/∂y_prev: n×n
//   // row-major (jacobian[i*n + j] = ∂y_i/∂y_prev_j) for DeerJacobian::full,
//   // its n diagonal entries for DeerJacobian::diagonal.
//   KOKKOS_FUNCTION void step(const T* y_prev, const T* x, T* y, T* jacobian,
//                             DeerJacobian kind, T* work) const;
//   // grad_y_prev = (∂f/∂y_prev)ᵀ λ and grad_x = (∂f/∂x)ᵀ λ; either pointer
//   // may be null (not wanted).
//   KOKKOS_FUNCTION void vector_jacobian(const T* y_prev, const T* x,
//                                        const T* lambda, T* grad_y_prev,
//                                        T* grad_x, T* work) const;
// Pointers address n, m or n·n contiguous values; work has work_size()
// values of its own for the duration of the call. An example is
// tests/test_deer.cpp's LogisticMap. deer() and deer_gradients() are
// templates (softwave/deer_engine.hpp): a cell's kernels are compiled in
// the caller's translation unit, in as many units as call them (the
// engine's kernels are functors, which CUDA builds need for that).
template <class Space, class Cell>
void deer(const Space& space, const Cell& cell,
          const DeerInputs<typename Cell::value_type, Space>& inputs,
          const DeerResult<typename Cell::value_type, Space>& result,
          const DeerOptions& options = {});

template <class Space, class Cell>
void deer_gradients(
    const Space& space, const Cell& cell,
    const DeerInputs<typename Cell::value_type, Space>& inputs,
    DeerView3<const typename Cell::value_type, Space> y,
    const DeerGradients<typename Cell::value_type, Space>& gradients,
    const DeerOptions& options = {});

}  // namespace softwave

#include <softwave/deer_engine.hpp>
