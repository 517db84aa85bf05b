// softwave pairwise: the all-pairs Soft-DTW (or divergence) matrix between
// two series sets, as CSV on stdout or as a .csv / .npy file.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
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

// The series set of a run, and whether it is one set against itself (no
// --y), whose symmetric matrix is computed a pair at a time: each row i
// from column i on (pairwise_upper_in_blocks), the columns before it from
// the rows before it.
struct PairwiseJob {
  const SeriesSet& x;
  const SeriesSet& y;
  SoftDTWOptions options;
  PairwiseValue what;
  std::string x_name, y_name;
  bool one_set() const { return &x == &y; }
};

// Rows [first, first + count) of the job on this rank, block by block.
template <class T>
void compute_rows(const PairwiseJob& job, const RowRange& rows,
                  const BlockHandler<T>& on_block) {
  if (job.one_set())
    pairwise_upper_in_blocks<T>(job.x, job.options, job.what, job.x_name, rows,
                                on_block);
  else
    pairwise_in_blocks<T>(job.x, job.y, job.options, job.what, job.x_name,
                          job.y_name, rows, on_block);
}

// How each rank's share of rows is balanced: by the pairs a row holds.
std::vector<RowRange> split_rows(const PairwiseJob& pairwise) {
  std::vector<std::int64_t> pairs;
  if (pairwise.one_set())
    for (std::size_t i = 0; i < pairwise.x.count; ++i)
      pairs.push_back(std::int64_t(pairwise.x.count - i));
  return ranks().split(pairwise.x.count, pairs);
}

// Upper bound on what MirroredRows holds, values of `value_bytes` bytes
// (each row's vector at most doubles its contents).
double mirrored_rows_bytes(std::size_t n, double value_bytes) {
  return 2.0 * value_bytes * double(n) * double(n) / 4.0;
}

// The rows of a symmetric n × n matrix completed in row order: row i
// arrives valid from column i on; its columns before i are the entries the
// rows before it handed on as they passed (row j gives row t > j its entry
// t), which are dropped once used. So at most the entries between the rows
// written and the rows to come are held: n²/4 at the half-way row.
template <class T>
class MirroredRows {
 public:
  explicit MirroredRows(std::size_t n) : pending_(n) {}

  // Fills the columns before i of rows i = first .. first + rows - 1
  // (row-major, n values each), which must be the next rows.
  void complete(std::size_t first, std::size_t rows, T* values) {
    const std::size_t n = pending_.size();
    for (std::size_t q = 0; q < rows; ++q) {
      const std::size_t i = first + q;
      T* row = values + q * n;
      std::vector<T>& before = pending_[i];
      std::copy(before.begin(), before.end(), row);
      std::vector<T>().swap(before);
      for (std::size_t t = i + 1; t < n; ++t) pending_[t].push_back(row[t]);
    }
  }

 private:
  std::vector<std::vector<T>> pending_;
};

// Every rank computes its rows; rank 0 writes its own as they come and then
// the others' (each held by its rank until then), in row order.
template <class T>
void write_pairwise(const PairwiseJob& pairwise,
                    const std::vector<RowRange>& ranges, std::FILE* out,
                    const std::string& out_name, MatrixFormat format) {
  const Ranks& job = ranks();
  const RowRange mine = job.mine(ranges);
  const std::size_t columns = pairwise.y.count;
  std::optional<MatrixWriter<T>> writer;
  std::optional<MirroredRows<T>> mirrored;
  if (job.root()) {
    writer.emplace(out, out_name, format, pairwise.x.count, columns);
    if (pairwise.one_set()) mirrored.emplace(columns);
  }
  std::vector<T> rows_done;
  auto write = [&](std::size_t first, std::size_t rows, const T* values) {
    if (!mirrored) return writer->write_rows(values, rows);
    rows_done.assign(values, values + rows * columns);
    mirrored->complete(first, rows, rows_done.data());
    writer->write_rows(rows_done.data(), rows);
  };
  std::vector<T> held;
  // A matrix printed on the terminal would be torn by the bar's redraws.
  const bool matrix_on_terminal = out == stdout && ::isatty(STDOUT_FILENO) == 1;
  ProgressBar progress("pairwise", mine.count,
                       job.root() && !matrix_on_terminal);
  compute_rows<T>(pairwise, mine,
                  [&](std::size_t first, std::size_t rows, const T* values) {
                    if (writer)
                      write(first, rows, values);
                    else
                      held.insert(held.end(), values, values + rows * columns);
                    progress.update(first - mine.first + rows);
                  });
  job.checkpoint();
  {
    const Ranks::Exchange exchange(job);
    job.send_to_root(ranges, held.data(), columns, write);
  }
  if (writer) writer->finish();
}

// One rank's handle on the shared temporary .npy file: its rows written
// in place (pwrite at the header plus the rows before them), so no rank
// holds or sends rows. output_error names the user's path.
class RowFile {
 public:
  // `own` (rank 0's output file, when it is the only rank) or else the
  // file at `temporary`, which rank 0 started.
  RowFile(std::FILE* own, const std::string& temporary, std::string name,
          std::size_t header, std::size_t row_bytes)
      : name_(std::move(name)), header_(header), row_bytes_(row_bytes) {
    if (own) {
      descriptor_ = ::dup(::fileno(own));
      if (descriptor_ < 0) fail("cannot duplicate its descriptor");
      return;
    }
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
    write_at(header_ + first * row_bytes_, values, rows * row_bytes_);
  }
  // `bytes` bytes into row `row` from its byte `offset` on.
  void write_in_row(std::size_t row, std::size_t offset, const void* values,
                    std::size_t bytes) {
    write_at(header_ + row * row_bytes_ + offset, values, bytes);
  }
  // The rows on disk before rank 0 renames the file.
  void close() {
    if (::fsync(descriptor_) != 0) fail("fsync failed");
    const int descriptor = std::exchange(descriptor_, -1);
    if (::close(descriptor) != 0) fail("close failed");
  }

 private:
  void write_at(std::size_t offset, const void* values, std::size_t count) {
    const char* bytes = static_cast<const char*>(values);
    std::size_t left = count;
    off_t at = off_t(offset);
    while (left > 0) {
      const ssize_t written = ::pwrite(descriptor_, bytes, left, at);
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) fail("write failed");
      bytes += written;
      at += written;
      left -= std::size_t(written);
    }
  }

  [[noreturn]] void fail(const std::string& what) {
    throw output_error(name_ + ": " + what + ": " + std::strerror(errno) +
                       " (the previous file, if any, is unchanged)");
  }

  std::string name_;
  std::size_t header_, row_bytes_;
  int descriptor_ = -1;
};

// Columns a MirrorSegments group spans: as many as `bytes` hold, at least
// a block's and at most n.
std::size_t mirror_width(std::size_t n, std::size_t block, double bytes,
                         double value_bytes) {
  const double per_column = value_bytes * double(std::max<std::size_t>(n, 1));
  return std::min(n, std::max(block, std::size_t(bytes / per_column)));
}

// What MirrorSegments holds at most, unless one block takes more: 64 MiB
// and a sixteenth of the memory allowed.
double mirror_bytes(const MemoryLimit& limit) {
  return std::min(64.0 * 1024 * 1024, double(limit.bytes) / 16.0);
}

// The mirror of a rank's rows of a symmetric n × n matrix in a .npy file:
// entry (t, j) = (j, t) of the rows j it computed, for the later rows t.
// Blocks of rows are gathered into a group of columns [begin, end) and
// written as one segment per later row, so the file sees a few large
// writes rather than one per block and row (parallel file systems).
template <class T>
class MirrorSegments {
 public:
  // At most `bytes` held, and at least one block of `block` columns.
  MirrorSegments(RowFile& file, std::size_t n, std::size_t block, double bytes)
      : file_(file),
        n_(n),
        width_(mirror_width(n, block, bytes, sizeof(T))),
        values_(n * width_),
        filled_(n, 0) {}

  // Rows [first, first + rows) (row-major, n values each, valid from
  // column first on), the next block of this rank's rows.
  void add(std::size_t first, std::size_t rows, const T* values) {
    if (end_ != first || end_ - begin_ + rows > width_) flush();
    if (begin_ == end_) begin_ = end_ = first;
    const std::size_t next = first + rows;
    for (std::size_t t = next; t < n_; ++t) {
      T* out = values_.data() + t * width_ + (first - begin_);
      for (std::size_t q = 0; q < rows; ++q) out[q] = values[q * n_ + t];
      filled_[t] = next - begin_;
    }
    end_ = next;
  }

  void flush() {
    for (std::size_t t = begin_; t < n_; ++t) {
      if (filled_[t] == 0) continue;
      file_.write_in_row(t, begin_ * sizeof(T), values_.data() + t * width_,
                         filled_[t] * sizeof(T));
      filled_[t] = 0;
    }
    begin_ = end_;
  }

 private:
  RowFile& file_;
  std::size_t n_, width_;
  std::vector<T> values_;
  std::vector<std::size_t> filled_;  // columns from begin_ held per row
  std::size_t begin_ = 0, end_ = 0;
};

// .npy across ranks: rank 0 writes the header into its shared temporary
// file, every rank writes its rows in place, and rank 0 puts the file in
// place once every rank has closed its part. One set with itself takes
// this path on one rank too, for its mirrored half.
template <class T>
void write_pairwise_npy(const PairwiseJob& pairwise,
                        const std::vector<RowRange>& ranges, OutputFile* file,
                        const std::string& out_name, double mirror_bytes) {
  const Ranks& job = ranks();
  const std::size_t columns = pairwise.y.count;
  const std::string header = npy_header<T>(pairwise.x.count, columns);
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
  // One process keeps its own unnamed temporary file, so that a run killed
  // outright leaves nothing behind (see OutputFile).
  RowFile rows_file(job.size() == 1 ? file->get() : nullptr, temporary,
                    out_name, header.size(), sizeof(T) * columns);
  const RowRange mine = job.mine(ranges);
  std::optional<MirrorSegments<T>> mirror;
  if (pairwise.one_set())
    mirror.emplace(rows_file, columns, upper_rows_per_block, mirror_bytes);
  ProgressBar progress("pairwise", mine.count, job.root());
  compute_rows<T>(pairwise, mine,
                  [&](std::size_t first, std::size_t rows, const T* values) {
                    if (mirror) {
                      // Each row from its block's first column on, then the
                      // mirror.
                      for (std::size_t q = 0; q < rows; ++q)
                        rows_file.write_in_row(first + q, first * sizeof(T),
                                               values + q * columns + first,
                                               (columns - first) * sizeof(T));
                      mirror->add(first, rows, values);
                    } else {
                      rows_file.write_rows(first, values, rows);
                    }
                    progress.update(first - mine.first + rows);
                  });
  if (mirror) mirror->flush();
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
             "by B2 columns; --y defaults to --x, whose symmetric matrix is "
             "computed a pair\n"
             "at a time and mirrored. Without -o the matrix goes "
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
  const PairwiseJob pairwise{x,
                             y,
                             settings.options(x.length, y.length),
                             parsed.has("--divergence")
                                 ? PairwiseValue::divergence
                                 : PairwiseValue::soft_dtw,
                             x_name,
                             y_name};

  const Ranks& job = ranks();
  const std::vector<RowRange> ranges = split_rows(pairwise);
  // A .npy file is written in place by every rank (one set with itself: by
  // the one rank too, its mirrored half as well); anything else by rank 0,
  // which receives the others' rows.
  const bool npy =
      output && output_format("--output", *output) == MatrixFormat::npy;
  const bool in_place = npy && (job.size() > 1 || pairwise.one_set());
  const std::unique_ptr<OutputFile> file =
      output && job.root()
          ? std::make_unique<OutputFile>("--output", *output,
                                         in_place && job.size() > 1)
          : nullptr;
  std::FILE* const out = file ? file->get() : stdout;
  const std::string out_name = output ? *output : std::string("stdout");
  const MatrixFormat format = file ? file->format() : MatrixFormat::csv;
  {
    const KokkosScope kokkos(settings.threads);
    const bool float32 = settings.dtype == Dtype::float32;
    const double value_bytes = float32 ? 4.0 : 8.0;
    std::vector<MemoryPart> memory =
        pairwise.one_set()
            ? (float32 ? pairwise_upper_memory<float>(x, pairwise.options)
                       : pairwise_upper_memory<double>(x, pairwise.options))
            : (float32 ? pairwise_memory<float>(x, y, pairwise.options)
                       : pairwise_memory<double>(x, y, pairwise.options));
    if (!job.root() && !in_place)
      memory.push_back(
          {"rows held for rank 0",
           value_bytes * double(job.mine(ranges).count * y.count)});
    if (pairwise.one_set() && in_place)
      memory.push_back({"mirrored columns gathered for the file",
                        value_bytes * double(x.count) *
                            double(mirror_width(x.count, upper_rows_per_block,
                                                mirror_bytes(settings.memory),
                                                value_bytes))});
    else if (pairwise.one_set() && job.root())
      memory.push_back({"mirrored entries held for the rows to come",
                        mirrored_rows_bytes(x.count, value_bytes)});
    check_memory(settings.memory, "pairwise", memory);
    if (in_place) {
      if (float32)
        write_pairwise_npy<float>(pairwise, ranges, file.get(), *output,
                                  mirror_bytes(settings.memory));
      else
        write_pairwise_npy<double>(pairwise, ranges, file.get(), *output,
                                   mirror_bytes(settings.memory));
    } else if (float32) {
      write_pairwise<float>(pairwise, ranges, out, out_name, format);
    } else {
      write_pairwise<double>(pairwise, ranges, out, out_name, format);
    }
  }
  if (file) file->close();
  return 0;
}

}  // namespace softwave::cli
