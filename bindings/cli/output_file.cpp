#include "output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "command_line.hpp"

namespace softwave::cli {
namespace {

// Named temporary files of this process, removed by the signal handler. The
// handler may call only async-signal-safe functions, so the names live in
// fixed storage and a slot is published (used = 1) only once written.
constexpr int kSlots = 8;
char slot_names[kSlots][PATH_MAX];
volatile std::sig_atomic_t slot_used[kSlots];

extern "C" void remove_temporaries_and_die(int signal) {
  for (int k = 0; k < kSlots; ++k)
    if (slot_used[k]) ::unlink(slot_names[k]);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void install_signal_handlers() {
  static const bool installed = [] {
    for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction action = {};
      action.sa_handler = remove_temporaries_and_die;
      sigemptyset(&action.sa_mask);
      // Keep a caller's choice to ignore a signal (nohup, batch systems).
      struct sigaction previous = {};
      if (sigaction(signal, nullptr, &previous) == 0 &&
          previous.sa_handler == SIG_IGN)
        continue;
      sigaction(signal, &action, nullptr);
    }
    return true;
  }();
  (void)installed;
}

// Publishes `name` for the handler; -1 when every slot is taken (the file
// is then still removed on failure, only not on a signal).
int remember(const std::string& name) {
  install_signal_handlers();
  if (name.size() >= PATH_MAX) return -1;
  for (int k = 0; k < kSlots; ++k) {
    if (slot_used[k]) continue;
    std::memcpy(slot_names[k], name.c_str(), name.size() + 1);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    slot_used[k] = 1;
    return k;
  }
  return -1;
}

void forget(const std::string& name) {
  for (int k = 0; k < kSlots; ++k)
    if (slot_used[k] && name == slot_names[k]) slot_used[k] = 0;
}

std::string directory_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The file a path names: symbolic links followed (a dangling one too, to
// the file it would create), then the directory resolved where the file
// does not exist yet.
std::string resolved(const std::string& path) {
  char buffer[PATH_MAX];
  std::string current = path;
  for (int depth = 0; depth < 40; ++depth) {
    if (::realpath(current.c_str(), buffer) != nullptr) return buffer;
    struct stat link = {};
    if (::lstat(current.c_str(), &link) != 0 || !S_ISLNK(link.st_mode)) break;
    const ssize_t size = ::readlink(current.c_str(), buffer, sizeof buffer - 1);
    if (size <= 0) break;
    const std::string to(buffer, static_cast<std::size_t>(size));
    current = to.front() == '/' ? to : directory_of(current) + "/" + to;
  }
  if (::realpath(directory_of(current).c_str(), buffer) != nullptr)
    return std::string(buffer) + "/" + base_of(current);
  return current;
}

int permissions_for(const std::string& target) {
  struct stat existing = {};
  if (::stat(target.c_str(), &existing) == 0) return existing.st_mode & 07777;
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~static_cast<int>(mask);
}

// O_TMPFILE files are named through /proc (linkat without privileges).
bool can_name_anonymous_files() {
#ifdef O_TMPFILE
  return ::access("/proc/self/fd", X_OK) == 0;
#else
  return false;
#endif
}

}  // namespace

MatrixFormat output_format(const std::string& option, const std::string& path) {
  const std::optional<MatrixFormat> format = matrix_format_from_path(path);
  if (!format) {
    throw usage_error("option " + option + ": '" + path +
                      "' must end in .csv or .npy");
  }
  return *format;
}

void check_distinct_outputs(const std::string& option_a,
                            const std::string& path_a,
                            const std::string& option_b,
                            const std::string& path_b) {
  struct stat a = {}, b = {};
  const bool same_file = ::stat(path_a.c_str(), &a) == 0 &&
                         ::stat(path_b.c_str(), &b) == 0 &&
                         a.st_dev == b.st_dev && a.st_ino == b.st_ino;
  if (same_file || resolved(path_a) == resolved(path_b)) {
    throw usage_error("options " + option_a + " and " + option_b +
                      " name the same file ('" + path_a + "' and '" + path_b +
                      "'): each output needs its own");
  }
}

OutputFile::OutputFile(const std::string& option, std::string path, bool shared)
    : path_(std::move(path)),
      target_(resolved(path_)),
      format_(output_format(option, path_)) {
  struct stat existing = {};
  if (::stat(target_.c_str(), &existing) == 0 && S_ISDIR(existing.st_mode)) {
    throw usage_error("option " + option + ": '" + path_ + "' is a directory");
  }
  mode_ = permissions_for(target_);
  const std::string directory = directory_of(target_);
  // An anonymous file (O_TMPFILE) leaves nothing behind even when the
  // process is killed; other file systems get a hidden named one.
#ifdef O_TMPFILE
  if (!shared && can_name_anonymous_files()) {
    descriptor_ =
        ::open(directory.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  }
#endif
  if (descriptor_ < 0) {
    std::string name = directory + "/." + base_of(target_) + ".XXXXXX";
    descriptor_ = ::mkstemp(name.data());
    if (descriptor_ >= 0) {
      temporary_ = name;
      remember(temporary_);
    }
  }
  if (descriptor_ < 0) {
    throw usage_error("option " + option + ": cannot write '" + path_ +
                      "': " + std::strerror(errno));
  }
  file_ = ::fdopen(descriptor_, "wb");
  if (file_ == nullptr) {
    const int error = errno;
    discard();
    throw usage_error("option " + option + ": cannot write '" + path_ +
                      "': " + std::strerror(error));
  }
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::discard() {
  if (file_ != nullptr) {
    std::fclose(std::exchange(file_, nullptr));
  } else if (descriptor_ >= 0) {
    ::close(descriptor_);
  }
  descriptor_ = -1;
  if (!temporary_.empty()) {
    ::unlink(temporary_.c_str());
    forget(temporary_);
    temporary_.clear();
  }
}

void OutputFile::close() {
  auto fail = [&](const std::string& step) {
    const int error = errno;
    discard();
    throw output_error(path_ + ": " + step +
                       " failed: " + std::strerror(error) +
                       " (the previous file, if any, " + "is unchanged)");
  };
  if (std::fflush(file_) != 0 || std::ferror(file_)) fail("write");
  if (::fchmod(descriptor_, static_cast<mode_t>(mode_)) != 0) fail("chmod");
  if (::fsync(descriptor_) != 0) fail("fsync");
  if (temporary_.empty()) {
    // Give the anonymous file a hidden name beside the target; linkat will
    // not replace a file, so pick one that is free.
    const std::string from = "/proc/self/fd/" + std::to_string(descriptor_);
    const std::string stem = directory_of(target_) + "/." + base_of(target_) +
                             "." + std::to_string(::getpid()) + ".";
    for (int attempt = 0; temporary_.empty(); ++attempt) {
      const std::string name = stem + std::to_string(attempt);
      remember(name);
      if (::linkat(AT_FDCWD, from.c_str(), AT_FDCWD, name.c_str(),
                   AT_SYMLINK_FOLLOW) == 0) {
        temporary_ = name;
      } else {
        forget(name);
        if (errno != EEXIST || attempt > 1000) fail("link");
      }
    }
  }
  const int closed = std::fclose(std::exchange(file_, nullptr));
  descriptor_ = -1;
  if (closed != 0) fail("close");
  if (std::rename(temporary_.c_str(), target_.c_str()) != 0) fail("rename");
  forget(temporary_);
  temporary_.clear();
}

}  // namespace softwave::cli
