#include "progress_bar.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace softwave::cli {

ProgressBar::ProgressBar(std::string label, std::size_t total, bool wanted)
    : label_(std::move(label)),
      total_(total),
      enabled_(wanted && total > 0 && ::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fprintf(stderr, "\r\033[K");
}

void ProgressBar::update(std::size_t done) {
  if (!enabled_) return;
  constexpr int width = 30;
  done = std::min(done, total_);
  const double fraction = static_cast<double>(done) / total_;
  const int filled = static_cast<int>(fraction * width);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
          .count();
  std::string bar(filled, '#');
  bar.append(width - filled, '.');
  std::fprintf(stderr, "\r%s [%s] %3d%% %zu/%zu  %.1fs", label_.c_str(),
               bar.c_str(), static_cast<int>(fraction * 100), done, total_,
               seconds);
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace softwave::cli
