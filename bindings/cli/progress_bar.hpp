#pragma once
// A one-line progress bar on stderr, redrawn in place with '\r'. It draws
// only when stderr is a terminal (and the caller wants it), so logs and
// pipes stay clean.

#include <chrono>
#include <cstddef>
#include <string>

namespace softwave::cli {

class ProgressBar {
 public:
  // wanted = false keeps it off, e.g. while results go to the same terminal.
  ProgressBar(std::string label, std::size_t total, bool wanted = true);
  ~ProgressBar();  // clears the line if anything was drawn
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(std::size_t done);

 private:
  std::string label_;
  std::size_t total_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace softwave::cli
