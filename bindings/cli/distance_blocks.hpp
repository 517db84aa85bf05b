#pragma once
// All-pairs Soft-DTW values between two series sets, computed on
// Kokkos::DefaultExecutionSpace in blocks of rows of the first set, so the
// caller can stream results and show progress.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <softwave/softdtw.hpp>
#include <string>
#include <vector>

#include "memory_limit.hpp"
#include "ranks.hpp"
#include "ucr_reader.hpp"

namespace softwave::cli {

// on_block(first_row, rows, values): values is rows × y.count, row-major, on
// the host, valid during the call only. Blocks arrive in row order.
template <class T>
using BlockHandler =
    std::function<void(std::size_t, std::size_t, const T* values)>;

// Rows per block: enough pairs per call to keep the device busy, at most 256
// rows so progress still moves on large inputs.
std::size_t rows_per_block(std::size_t y_count);

// input_error for the first value that is not finite (a Soft-DTW value
// that overflowed T): value q of the block belongs to series first +
// q / columns of x and to series column_of[q] of y (q % columns without
// column_of), which the message names by x_name and y_name.
template <class T>
void check_finite_block(const T* values, std::size_t first, std::size_t rows,
                        std::size_t columns, const SoftDTWOptions& options,
                        const std::string& x_name, const std::string& y_name,
                        const std::int64_t* column_of = nullptr);

// What pairwise_in_blocks<T> holds and allocates for x against y, the
// series read included (Kokkos initialised).
template <class T>
std::vector<MemoryPart> pairwise_memory(const SeriesSet& x, const SeriesSet& y,
                                        const SoftDTWOptions& options);

// Rows `rows` of x (a rank's share; {0, x.count} for all) against y.
// Needs Kokkos initialised. T (float or double) is the type of the inputs
// handed to the library and of the values. The inputs were checked when
// read (finite, and within T's range: check_fits_dtype), so the library
// does not check them again; a value that is not finite all the same
// overflowed T, and is an input_error naming the two series by x_name and
// y_name (e.g. "--test 'a.tsv'"), before on_block sees its block.
template <class T>
void pairwise_in_blocks(const SeriesSet& x, const SeriesSet& y,
                        const SoftDTWOptions& options, PairwiseValue what,
                        const std::string& x_name, const std::string& y_name,
                        const RowRange& rows, const BlockHandler<T>& on_block);

// Rows `rows` of x against x itself, each pair computed once: for a block of
// rows [first, first + count), on_block sees count × x.count values whose
// row q holds the pairs (first + q, j) for j >= first only; the columns
// before `first` are left unset, for the caller to fill from the earlier
// rows' values (D is symmetric: the library walks the block's own square
// once and mirrors it, so that square is exactly symmetric). Blocks arrive
// in row order, at most upper_rows_per_block rows each. Checks as
// pairwise_in_blocks.
template <class T>
void pairwise_upper_in_blocks(const SeriesSet& x, const SoftDTWOptions& options,
                              PairwiseValue what, const std::string& x_name,
                              const RowRange& rows,
                              const BlockHandler<T>& on_block);

// Rows per block of pairwise_upper_in_blocks: larger than rows_per_block,
// since the caller also writes each block's mirror, one segment per later
// row.
constexpr std::size_t upper_rows_per_block = 256;

// What pairwise_upper_in_blocks<T> holds and allocates for x.
template <class T>
std::vector<MemoryPart> pairwise_upper_memory(const SeriesSet& x,
                                              const SoftDTWOptions& options);

}  // namespace softwave::cli
