// softwave pairwise: the all-pairs Soft-DTW (or divergence) matrix between
// two series sets, as CSV on stdout or as a .csv / .npy file.

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
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
  // Only rank 0 writes.
  const std::unique_ptr<OutputFile> file =
      output && job.root() ? std::make_unique<OutputFile>("--output", *output)
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
    if (!job.root())
      memory.push_back(
          {"rows held for rank 0",
           (float32 ? 4.0 : 8.0) * double(job.mine(ranges).count * y.count)});
    check_memory(settings.memory, "pairwise", memory);
    if (float32) {
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
