// softwave pairwise: the all-pairs Soft-DTW (or divergence) matrix between
// two series sets, as CSV on stdout or as a .csv / .npy file.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "distance_blocks.hpp"
#include "distance_settings.hpp"
#include "matrix_writer.hpp"
#include "output_file.hpp"
#include "progress_bar.hpp"
#include "ranks.hpp"
#include "series_input.hpp"

namespace softwave::cli {
namespace {

// Every rank computes its rows; rank 0 writes its own as they come and then
// the others' (each held by its rank until then), in row order.
template <class T>
void write_pairwise(const SeriesSet& x, const SeriesSet& y,
                    const SoftDTWOptions& options, PairwiseValue what,
                    const std::string& x_name, const std::string& y_name,
                    const std::vector<RowRange>& ranges, std::FILE* out,
                    const std::string& out_name, MatrixFormat format) {
  const Ranks& job = ranks();
  const RowRange mine = job.mine(ranges);
  std::optional<MatrixWriter<T>> writer;
  if (job.root()) writer.emplace(out, out_name, format, x.count, y.count);
  std::vector<T> held;
  // A matrix printed on the terminal would be torn by the bar's redraws.
  const bool matrix_on_terminal = out == stdout && ::isatty(STDOUT_FILENO) == 1;
  ProgressBar progress("pairwise", mine.count,
                       job.root() && !matrix_on_terminal);
  pairwise_in_blocks<T>(
      x, y, options, what, x_name, y_name, mine,
      [&](std::size_t first, std::size_t rows, const T* values) {
        if (writer)
          writer->write_rows(values, rows);
        else
          held.insert(held.end(), values, values + rows * y.count);
        progress.update(first - mine.first + rows);
      });
  job.checkpoint();
  {
    const Ranks::Exchange exchange(job);
    job.send_to_root(ranges, held.data(), y.count,
                     [&](std::size_t, std::size_t rows, const T* values) {
                       writer->write_rows(values, rows);
                     });
  }
  if (writer) writer->finish();
}

// One rank's handle on the shared temporary .npy file: its rows written
// in place (pwrite at the header plus the rows before them), so no rank
// holds or sends rows. output_error names the user's path.
class RowFile {
 public:
  RowFile(const std::string& temporary, std::string name, std::size_t header,
          std::size_t row_bytes)
      : name_(std::move(name)), header_(header), row_bytes_(row_bytes) {
    descriptor_ = ::open(temporary.c_str(), O_WRONLY | O_CLOEXEC);
    if (descriptor_ < 0)
      fail(
          "cannot open the file rank 0 started (is its directory on a file "
          "system every rank sees?)");
  }
  ~RowFile() {
    if (descriptor_ >= 0) ::close(descriptor_);
  }
  RowFile(const RowFile&) = delete;
  RowFile& operator=(const RowFile&) = delete;

  void write_rows(std::size_t first, const void* values, std::size_t rows) {
    const char* bytes = static_cast<const char*>(values);
    std::size_t left = rows * row_bytes_;
    off_t at = off_t(header_ + first * row_bytes_);
    while (left > 0) {
      const ssize_t written = ::pwrite(descriptor_, bytes, left, at);
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) fail("write failed");
      bytes += written;
      at += written;
      left -= std::size_t(written);
    }
  }
  // The rows on disk before rank 0 renames the file.
  void close() {
    if (::fsync(descriptor_) != 0) fail("fsync failed");
    const int descriptor = std::exchange(descriptor_, -1);
    if (::close(descriptor) != 0) fail("close failed");
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw output_error(name_ + ": " + what + ": " + std::strerror(errno) +
                       " (the previous file, if any, is unchanged)");
  }

  std::string name_;
  std::size_t header_, row_bytes_;
  int descriptor_ = -1;
};

// .npy across ranks: rank 0 writes the header into its shared temporary
// file, every rank writes its rows in place, and rank 0 puts the file in
// place once every rank has closed its part.
template <class T>
void write_pairwise_npy(const SeriesSet& x, const SeriesSet& y,
                        const SoftDTWOptions& options, PairwiseValue what,
                        const std::string& x_name, const std::string& y_name,
                        const std::vector<RowRange>& ranges, OutputFile* file,
                        const std::string& out_name) {
  const Ranks& job = ranks();
  const std::string header = npy_header<T>(x.count, y.count);
  std::string temporary;
  if (job.root()) {
    temporary = file->temporary_path();
    if (std::fwrite(header.data(), 1, header.size(), file->get()) !=
            header.size() ||
        std::fflush(file->get()) != 0)
      throw output_error(out_name + ": write failed: " + std::strerror(errno) +
                         " (the previous file, if any, is unchanged)");
  }
  job.checkpoint();
  {
    const Ranks::Exchange exchange(job);
    job.broadcast(temporary, 0);
  }
  RowFile rows_file(temporary, out_name, header.size(), sizeof(T) * y.count);
  const RowRange mine = job.mine(ranges);
  ProgressBar progress("pairwise", mine.count, job.root());
  pairwise_in_blocks<T>(
      x, y, options, what, x_name, y_name, mine,
      [&](std::size_t first, std::size_t rows, const T* values) {
        rows_file.write_rows(first, values, rows);
        progress.update(first - mine.first + rows);
      });
  rows_file.close();
  job.checkpoint();
}

}  // namespace

std::string pairwise_help() {
  return std::string(
             "usage: softwave pairwise --x A.tsv [--y B.tsv] [options]\n"
             "\n"
             "The all-pairs matrix D[i][j] = sdtw(A_i, B_j) (or the "
             "divergence), B1 rows\n"
             "by B2 columns; --y defaults to --x. Without -o the matrix goes "
             "to stdout as\n"
             "CSV (%.17g for float64, %.9g for float32); with -o the file's "
             "extension\n"
             "picks CSV (.csv) or NumPy (.npy, format 1.0, C order).\n"
             "\n"
             "options:\n"
             "  --x FILE           first series set, the rows (required)\n"
             "  --y FILE           second series set, the columns (default: "
             "--x)\n"
             "  --no-labels        the text files have no label column\n"
             "  --divergence       sdtw(a,b) - (sdtw(a,a) + sdtw(b,b))/2 "
             "instead of sdtw\n"
             "  -o, --output FILE  write to FILE (.csv or .npy) instead of "
             "stdout\n") +
         distance_options_help() + series_files_help() +
         "  -h, --help         this help\n";
}

int run_pairwise(const std::vector<std::string>& arguments) {
  std::vector<OptionSpec> specs = {{"--x"},
                                   {"--y"},
                                   {"--no-labels", false},
                                   {"--divergence", false},
                                   {"--output", true, "-o"}};
  for (const OptionSpec& spec : distance_option_specs()) specs.push_back(spec);
  const ParsedOptions parsed(arguments, specs);
  const std::string x_path = parsed.required("--x");
  const std::optional<std::string> y_path = parsed.text("--y");
  const std::optional<std::string> output = parsed.text("--output");
  const DistanceSettings settings = parse_distance_settings(parsed);
  if (output) output_format("--output", *output);

  const Labels labels =
      parsed.has("--no-labels") ? Labels::none : Labels::first_column;
  const ReadLimit limit = settings.memory.read_limit();
  const SeriesSet x = read_series_input(x_path, labels, {}, {}, limit);
  const std::optional<SeriesSet> y_read =
      y_path ? std::optional<SeriesSet>(
                   read_series_input(*y_path, labels, {}, {}, limit))
             : std::nullopt;
  const SeriesSet& y = y_read ? *y_read : x;
  check_same_dims(x, "--x", y, "--y");
  check_fits_dtype(x, x_path, "--x", settings.dtype);
  if (y_path) check_fits_dtype(y, *y_path, "--y", settings.dtype);
  const std::string x_name = "--x '" + x_path + "'";
  const std::string y_name = y_path ? "--y '" + *y_path + "'" : x_name;
  const SoftDTWOptions options = settings.options(x.length, y.length);
  const PairwiseValue what = parsed.has("--divergence")
                                 ? PairwiseValue::divergence
                                 : PairwiseValue::soft_dtw;

  const Ranks& job = ranks();
  const std::vector<RowRange> ranges = job.split(x.count, {});
  // Across ranks, a .npy file is written by all of them in place; anything
  // else by rank 0, which receives the others' rows.
  const bool in_place = job.size() > 1 && output &&
                        output_format("--output", *output) == MatrixFormat::npy;
  const std::unique_ptr<OutputFile> file =
      output && job.root()
          ? std::make_unique<OutputFile>("--output", *output, in_place)
          : nullptr;
  std::FILE* const out = file ? file->get() : stdout;
  const std::string out_name = output ? *output : std::string("stdout");
  const MatrixFormat format = file ? file->format() : MatrixFormat::csv;
  {
    const KokkosScope kokkos(settings.threads);
    const bool float32 = settings.dtype == Dtype::float32;
    std::vector<MemoryPart> memory =
        float32 ? pairwise_memory<float>(x, y, options)
                : pairwise_memory<double>(x, y, options);
    if (!job.root() && !in_place)
      memory.push_back(
          {"rows held for rank 0",
           (float32 ? 4.0 : 8.0) * double(job.mine(ranges).count * y.count)});
    check_memory(settings.memory, "pairwise", memory);
    if (in_place) {
      if (float32)
        write_pairwise_npy<float>(x, y, options, what, x_name, y_name, ranges,
                                  file.get(), *output);
      else
        write_pairwise_npy<double>(x, y, options, what, x_name, y_name, ranges,
                                   file.get(), *output);
    } else if (float32) {
      write_pairwise<float>(x, y, options, what, x_name, y_name, ranges, out,
                            out_name, format);
    } else {
      write_pairwise<double>(x, y, options, what, x_name, y_name, ranges, out,
                             out_name, format);
    }
  }
  if (file) file->close();
  return 0;
}

}  // namespace softwave::cli
