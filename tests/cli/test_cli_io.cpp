// Unit tests of the CLI's file readers (text and .npy), matrix writer,
// option parser, JSON line and series helpers (bindings/cli, library
// softwave_cli_io).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "json_line.hpp"
#include "matrix_writer.hpp"
#include "npy_reader.hpp"
#include "series_input.hpp"
#include "series_tools.hpp"
#include "ucr_reader.hpp"

namespace softwave::cli {
namespace {

// The message of the input_error that parsing `text` as file "f.tsv" raises.
std::string parse_error(const std::string& text,
                        Labels labels = Labels::first_column) {
  try {
    parse_series(text, "f.tsv", labels);
  } catch (const input_error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(UcrReader, TabSeparatedWithLabels) {
  const SeriesSet set = parse_series("1\t0.5\t-1.25\t3\n-1\t2e-3\t4\t5.5\n",
                                     "f.tsv", Labels::first_column);
  EXPECT_EQ(set.count, 2u);
  EXPECT_EQ(set.length, 3u);
  EXPECT_EQ(set.labels, (std::vector<std::int64_t>{1, -1}));
  EXPECT_EQ(set.values, (std::vector<double>{0.5, -1.25, 3, 2e-3, 4, 5.5}));
}

TEST(UcrReader, CommaSeparatedAndSpaces) {
  const SeriesSet commas =
      parse_series("0,1.5,2.5\n1, 3.5 ,4.5\n", "f.csv", Labels::first_column);
  EXPECT_EQ(commas.labels, (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(commas.values, (std::vector<double>{1.5, 2.5, 3.5, 4.5}));
  // The 2015 archive layout: runs of spaces, labels written as floats.
  const SeriesSet spaces = parse_series(
      "  2.0000000e+00  1.0e+00  -2.0e+00\n  3.0000000e+00  +4  5\n", "f.txt",
      Labels::first_column);
  EXPECT_EQ(spaces.labels, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(spaces.values, (std::vector<double>{1, -2, 4, 5}));
}

TEST(UcrReader, CrlfTrailingWhitespaceAndBlankTrailingLines) {
  const SeriesSet set = parse_series("1\t1\t2 \r\n2\t3\t4\t\r\n\r\n  \n\n",
                                     "f.tsv", Labels::first_column);
  EXPECT_EQ(set.count, 2u);
  EXPECT_EQ(set.values, (std::vector<double>{1, 2, 3, 4}));
  // No final newline at all.
  EXPECT_EQ(parse_series("1\t1\t2", "f.tsv", Labels::first_column).count, 1u);
}

TEST(UcrReader, NoLabels) {
  const SeriesSet set =
      parse_series("0.5\t1\n2\t3.25\n", "f.tsv", Labels::none);
  EXPECT_TRUE(set.labels.empty());
  EXPECT_EQ(set.length, 2u);
  EXPECT_EQ(set.values, (std::vector<double>{0.5, 1, 2, 3.25}));
}

TEST(UcrReader, EmptyFile) {
  EXPECT_EQ(parse_error(""), "f.tsv:1: no series (the file is empty)");
  EXPECT_EQ(parse_error("\n \r\n\t\n"),
            "f.tsv:1: no series (the file is empty)");
}

TEST(UcrReader, RaggedRows) {
  EXPECT_EQ(parse_error("1\t1\t2\n1\t1\t2\n2\t3\n"),
            "f.tsv:3: ragged rows: 1 values, but the first series has 2");
}

TEST(UcrReader, NotANumber) {
  EXPECT_EQ(parse_error("1\t1\t2\n1\t1\tx7\n"),
            "f.tsv:2: field 3: 'x7' is not a number");
  EXPECT_EQ(parse_error("1\t1\t2.5.1\n"),
            "f.tsv:1: field 3: '2.5.1' is not a number");
  EXPECT_EQ(parse_error("1\t1\t1e999\n"),
            "f.tsv:1: field 3: '1e999' is too large for a double (largest "
            "about 1.8e308)");
  EXPECT_EQ(parse_error("1\t1\t-1e-400\n"),
            "f.tsv:1: field 3: '-1e-400' is too small for a double: it is not "
            "0, but below the smallest positive double (about 4.9e-324)");
  // Subnormal values are numbers like any other.
  const SeriesSet set =
      parse_series("1\t5e-324\t1e-310\n", "f.tsv", Labels::first_column);
  EXPECT_EQ(set.values, (std::vector<double>{5e-324, 1e-310}));
}

// Labels are read as exact 64-bit integers: 2^53 + 1 stays itself (as a
// double it would merge with 2^53), beyond int64 is said to be so, and a
// decimal-point label past 2^53 is refused rather than rounded.
TEST(UcrReader, LabelsAreExactIntegers) {
  const SeriesSet set = parse_series(
      "9007199254740993\t1\n9007199254740992\t2\n-9223372036854775808\t3\n",
      "f.tsv", Labels::first_column);
  EXPECT_EQ(set.labels, (std::vector<std::int64_t>{
                            9007199254740993, 9007199254740992, INT64_MIN}));
  EXPECT_EQ(parse_series("2.0\t1\n", "f.tsv", Labels::first_column).labels,
            std::vector<std::int64_t>{2});
  EXPECT_EQ(parse_error("99999999999999999999\t1\n"),
            "f.tsv:1: label '99999999999999999999' is beyond the range of a "
            "64-bit integer (largest 9223372036854775807)");
  EXPECT_EQ(parse_error("9.007199254740993e15\t1\n"),
            "f.tsv:1: label '9.007199254740993e15' is 2^53 or beyond written "
            "as a decimal number, which cannot tell neighbouring integers "
            "apart: write it as an integer");
}

TEST(UcrReader, NonFiniteValues) {
  EXPECT_EQ(parse_error("1\t1\tNaN\n"),
            "f.tsv:1: field 3: 'NaN' is not a finite number");
  EXPECT_EQ(parse_error("1\t1\t2\n1\t-inf\t2\n"),
            "f.tsv:2: field 2: '-inf' is not a finite number");
  EXPECT_EQ(parse_error("nan\t1\n", Labels::none),
            "f.tsv:1: field 1: 'nan' is not a finite number");
}

TEST(UcrReader, LabelLessLineWhenLabelsExpected) {
  EXPECT_EQ(parse_error("1\t1\t2\n0.25\t1\t2\n"),
            "f.tsv:2: label '0.25' is not an integer (a file without labels "
            "needs --no-labels)");
  EXPECT_EQ(parse_error("1\t1\t2\n3\n"), "f.tsv:2: no values after the label");
}

TEST(UcrReader, EmptyFieldsAndBlankLinesInside) {
  EXPECT_EQ(parse_error("1,2,,3\n"), "f.tsv:1: field 3 is empty");
  EXPECT_EQ(parse_error("1,2,3,\n"),
            "f.tsv:1: field 4 is empty (trailing comma)");
  EXPECT_EQ(parse_error("1\t1\n\n2\t2\n"),
            "f.tsv:2: blank line before more series");
}

TEST(UcrReader, ReadsFilesAndReportsMissingOnes) {
  const auto path = std::filesystem::path(::testing::TempDir()) /
                    "softwave_cli_reader_test.tsv";
  { std::ofstream(path, std::ios::binary) << "1\t1\t2\r\n2\t3\t4\r\n"; }
  const SeriesSet set = read_series_file(path.string(), Labels::first_column);
  EXPECT_EQ(set.count, 2u);
  std::filesystem::remove(path);
  try {
    read_series_file(path.string(), Labels::first_column);
    FAIL() << "no error for a missing file";
  } catch (const input_error& error) {
    EXPECT_EQ(std::string(error.what()),
              path.string() + ": cannot open: No such file or directory");
  }
}

TEST(MatrixWriter, NpyHeaderFollowsFormat10) {
  const std::string header = npy_header<double>(3, 1234);
  ASSERT_EQ(header.size() % 64, 0u);
  EXPECT_EQ(header.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t length = static_cast<unsigned char>(header[8]) +
                             256 * static_cast<unsigned char>(header[9]);
  EXPECT_EQ(10 + length, header.size());
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(header.substr(10, 62),
            "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 1234), }");
  EXPECT_NE(npy_header<float>(1, 1).find("'descr': '<f4'"), std::string::npos);
}

TEST(MatrixWriter, CsvRoundTripsEveryDigit) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  const double values[] = {0.1, -1.0 / 3.0, 1e-300, 12345678.901234567};
  MatrixWriter<double> writer(file, "tmp", MatrixFormat::csv, 2, 2);
  writer.write_rows(values, 2);
  writer.finish();
  std::rewind(file);
  double read[4];
  ASSERT_EQ(std::fscanf(file, "%lf,%lf\n%lf,%lf\n", &read[0], &read[1],
                        &read[2], &read[3]),
            4);
  std::fclose(file);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(read[k], values[k]);
}

TEST(CommandLine, ValuesFlagsAndEqualsForm) {
  const ParsedOptions options(
      {"--gamma=0.5", "-o", "m.npy", "--flag"},
      {{"--gamma"}, {"--output", true, "-o"}, {"--flag", false}});
  EXPECT_EQ(*options.number("--gamma"), 0.5);
  EXPECT_EQ(options.required("--output"), "m.npy");
  EXPECT_TRUE(options.has("--flag"));
  EXPECT_FALSE(options.integer("--band").has_value());
}

TEST(CommandLine, ErrorsNameTheOption) {
  auto message = [](std::vector<std::string> arguments) -> std::string {
    try {
      const ParsedOptions options(arguments, {{"--gamma"}, {"--flag", false}});
      options.number("--gamma");
      options.required("--gamma");
    } catch (const usage_error& error) {
      return error.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(message({"--nope"}), "unknown option '--nope'");
  EXPECT_EQ(message({"stray"}), "unexpected argument 'stray'");
  EXPECT_EQ(message({"--gamma"}), "option --gamma needs a value");
  EXPECT_EQ(message({"--gamma", "1", "--gamma", "2"}),
            "option --gamma given more than once");
  EXPECT_EQ(message({"--gamma", "abc"}),
            "option --gamma: expected a number, got 'abc'");
  EXPECT_EQ(message({"--gamma", "5e-324"}), "(no error)");  // subnormal
  EXPECT_EQ(message({"--gamma", "1e-400"}),
            "option --gamma: '1e-400' is too small for a double: it is not 0, "
            "but below the smallest positive double (about 4.9e-324)");
  EXPECT_EQ(message({"--gamma", "1e400"}),
            "option --gamma: '1e400' is too large for a double (largest about "
            "1.8e308)");
  EXPECT_EQ(message({"--flag=1"}), "option --flag takes no value");
  EXPECT_EQ(message({"--flag"}), "missing required option --gamma");
  const ParsedOptions band({"--band", "99999999999999999999"}, {{"--band"}});
  try {
    band.integer("--band");
    ADD_FAILURE() << "no error";
  } catch (const usage_error& error) {
    EXPECT_STREQ(error.what(),
                 "option --band: '99999999999999999999' is beyond the range "
                 "of a 64-bit integer (largest 9223372036854775807)");
  }
}

// --- .npy reader ------------------------------------------------------------

// A .npy file (format 1.0, as the writer makes it) holding `values` as T.
template <class T>
std::string npy_file(const std::vector<std::size_t>& shape,
                     const std::vector<double>& values) {
  std::string bytes = npy_header<T>(shape);
  for (const double v : values) {
    const T item = static_cast<T>(v);
    bytes.append(reinterpret_cast<const char*>(&item), sizeof item);
  }
  return bytes;
}

// A .npy file with a hand-written header dict (format 1.0) and raw data.
std::string npy_raw(const std::string& dict, const std::string& data) {
  std::string header = dict + "\n";
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes.push_back(static_cast<char>(header.size() & 0xff));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  return bytes + header + data;
}

std::string npy_error(const std::string& bytes, bool labels = false) {
  try {
    if (labels) {
      parse_npy_labels(bytes, "f.npy");
    } else {
      parse_npy_series(bytes, "f.npy");
    }
  } catch (const input_error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(NpyReader, Float64Matrix) {
  const SeriesSet set = parse_npy_series(
      npy_file<double>({2, 3}, {0.5, -1, 2, 3, 4.25, 1e-300}), "f.npy");
  EXPECT_EQ(set.count, 2u);
  EXPECT_EQ(set.length, 3u);
  EXPECT_EQ(set.dims, 1u);
  EXPECT_TRUE(set.labels.empty());
  EXPECT_EQ(set.values, (std::vector<double>{0.5, -1, 2, 3, 4.25, 1e-300}));
}

TEST(NpyReader, Float32ThreeDimensional) {
  const std::vector<double> values = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6,
                                      0.7, 0.8, 0.9, 1.0, 1.1, 1.2};
  const SeriesSet set =
      parse_npy_series(npy_file<float>({2, 3, 2}, values), "f.npy");
  EXPECT_EQ(set.count, 2u);
  EXPECT_EQ(set.length, 3u);
  EXPECT_EQ(set.dims, 2u);
  ASSERT_EQ(set.values.size(), values.size());
  for (std::size_t q = 0; q < values.size(); ++q) {
    EXPECT_EQ(set.values[q],
              static_cast<double>(static_cast<float>(values[q])));
  }
  EXPECT_EQ(set.series(1)[0], static_cast<double>(0.7f));
}

TEST(NpyReader, Version2HeaderAndPaddedDict) {
  const std::string dict =
      "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2), }    \n";
  std::string bytes("\x93NUMPY\x02\x00", 8);
  const std::uint32_t length = static_cast<std::uint32_t>(dict.size());
  for (int b = 0; b < 4; ++b)
    bytes.push_back(static_cast<char>(length >> (8 * b)));
  const double values[] = {1.5, -2.5};
  bytes += dict + std::string(reinterpret_cast<const char*>(values), 16);
  const SeriesSet set = parse_npy_series(bytes, "f.npy");
  EXPECT_EQ(set.values, (std::vector<double>{1.5, -2.5}));
}

TEST(NpyReader, LabelsOfEveryIntegerTypeAndIntegralFloats) {
  EXPECT_EQ(parse_npy_labels(npy_file<std::int64_t>({3}, {1, -2, 3}), "f.npy"),
            (std::vector<std::int64_t>{1, -2, 3}));
  const std::int32_t ints[] = {-7, 0, 9};
  EXPECT_EQ(parse_npy_labels(
                npy_raw("{'descr': '<i4', 'fortran_order': False, 'shape': "
                        "(3,), }",
                        std::string(reinterpret_cast<const char*>(ints), 12)),
                "f.npy"),
            (std::vector<std::int64_t>{-7, 0, 9}));
  EXPECT_EQ(parse_npy_labels(npy_raw("{'descr': '|u1', 'fortran_order': "
                                     "False, 'shape': (2,), }",
                                     std::string("\x02\xff", 2)),
                             "f.npy"),
            (std::vector<std::int64_t>{2, 255}));
  EXPECT_EQ(parse_npy_labels(npy_file<double>({2}, {4.0, -1.0}), "f.npy"),
            (std::vector<std::int64_t>{4, -1}));
  EXPECT_EQ(npy_error(npy_file<double>({2}, {4.0, 1.5}), true),
            "f.npy: label [1] is not an integer");
  EXPECT_EQ(npy_error(npy_file<std::int64_t>({2, 1}, {1, 2}), true),
            "f.npy: labels must be a 1-D array, got shape (2, 1)");
}

TEST(NpyReader, BadFilesSayWhat) {
  const std::string good = npy_file<double>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(npy_error("1\t2\t3\n"),
            "f.npy: not a NumPy .npy file (no \\x93NUMPY magic string)");
  EXPECT_EQ(npy_error(good.substr(0, 40)), "f.npy: truncated .npy header");
  EXPECT_EQ(npy_error(good.substr(0, good.size() - 8)),
            "f.npy: truncated: shape (2, 3) of '<f8' needs 48 bytes of data, "
            "the file has 40");
  EXPECT_EQ(npy_error(good + "xx"),
            "f.npy: 2 unexpected bytes after the array data");
  EXPECT_EQ(npy_error(npy_raw("{'descr': '<f8', 'fortran_order': True, "
                              "'shape': (1, 1), }",
                              std::string(8, '\0'))),
            "f.npy: Fortran-order arrays are not supported (save a C-order "
            "array, e.g. np.save(path, np.ascontiguousarray(a)))");
  EXPECT_EQ(npy_error(npy_file<std::int64_t>({1, 2}, {1, 2})),
            "f.npy: series must be float32 or float64, not an integer array");
  EXPECT_EQ(npy_error(npy_raw("{'descr': '<c16', 'fortran_order': False, "
                              "'shape': (1, 1), }",
                              std::string(16, '\0'))),
            "f.npy: dtype '<c16' is not supported (float or integer)");
  EXPECT_EQ(npy_error(npy_raw("{'descr': '>f8', 'fortran_order': False, "
                              "'shape': (1, 1), }",
                              std::string(8, '\0'))),
            "f.npy: dtype '>f8' is big-endian; only little-endian data is "
            "supported");
  EXPECT_EQ(npy_error(npy_raw("{'descr': [('a', '<f8')], 'fortran_order': "
                              "False, 'shape': (1,), }",
                              std::string(8, '\0'))),
            "f.npy: bad .npy header: 'descr' is not a simple type string "
            "(structured arrays are not supported)");
  EXPECT_EQ(npy_error(npy_file<double>({3}, {1, 2, 3})),
            "f.npy: series must be a 2-D (n, length) or 3-D (n, length, d) "
            "array, got shape (3,)");
  EXPECT_EQ(npy_error(npy_file<double>({0, 4}, {})),
            "f.npy: no series (shape (0, 4))");
  EXPECT_EQ(npy_error(npy_file<double>(
                {1, 2, 2}, {1, 2, 3, std::numeric_limits<double>::infinity()})),
            "f.npy: value [0, 1, 1] is not finite");
  // numpy keeps the last of two equal keys and refuses unknown ones: so
  // does the reader, by refusing both outright.
  EXPECT_EQ(npy_error(npy_raw("{'descr': '<f8', 'fortran_order': False, "
                              "'shape': (1, 1), 'shape': (1, 2), }",
                              std::string(16, '\0'))),
            "f.npy: bad .npy header: key 'shape' appears twice");
  EXPECT_EQ(npy_error(npy_raw("{'descr': '<f8', 'fortran_order': False, "
                              "'shape': (1, 1), 'extra': 1, }",
                              std::string(8, '\0'))),
            "f.npy: bad .npy header: unknown key 'extra' (only 'descr', "
            "'fortran_order' and 'shape')");
  EXPECT_EQ(npy_error(npy_raw("{'descr': '<f8', 'shape': (1, 1), }",
                              std::string(8, '\0'))),
            "f.npy: bad .npy header: no 'fortran_order' entry");
}

// Integer labels are read exactly, whatever their size: 2^62 and 2^53 + 1
// in int64, 2^63 - 1 in uint64; larger uint64 values are refused.
TEST(NpyReader, IntegerLabelsAreExact) {
  auto int64_labels = [](const std::vector<std::int64_t>& values) {
    std::string bytes = npy_header<std::int64_t>({values.size()});
    bytes.append(reinterpret_cast<const char*>(values.data()),
                 values.size() * sizeof(std::int64_t));
    return bytes;
  };
  const std::vector<std::int64_t> big = {std::int64_t(1) << 62,
                                         9007199254740993, INT64_MIN};
  EXPECT_EQ(parse_npy_labels(int64_labels(big), "f.npy"), big);
  const std::uint64_t too_big = std::uint64_t(1) << 63;
  std::string data(reinterpret_cast<const char*>(&too_big), 8);
  EXPECT_EQ(npy_error(npy_raw("{'descr': '<u8', 'fortran_order': False, "
                              "'shape': (1,), }",
                              data),
                      /*labels=*/true),
            "f.npy: label [0] 9223372036854775808 is beyond the range of a "
            "64-bit integer");
  EXPECT_EQ(
      parse_npy_labels(npy_file<double>({1}, {4611686018427387904.0}), "f.npy"),
      std::vector<std::int64_t>{std::int64_t(1) << 62});
}

TEST(SeriesInput, LabelsFilesOnlyForNpyAndCountsMustMatch) {
  const auto dir = std::filesystem::path(::testing::TempDir());
  const std::string x = (dir / "softwave_cli_input_x.npy").string();
  const std::string labels = (dir / "softwave_cli_input_labels.npy").string();
  const std::string text = (dir / "softwave_cli_input.tsv").string();
  std::ofstream(x, std::ios::binary)
      << npy_file<double>({3, 2}, {1, 2, 3, 4, 5, 6});
  std::ofstream(labels, std::ios::binary)
      << npy_file<std::int64_t>({2}, {1, 2});
  std::ofstream(text, std::ios::binary) << "1\t1\t2\n";
  auto message = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const std::exception& error) {
      return error.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(message([&] {
              read_series_input(x, Labels::first_column, labels, "--labels");
            }),
            labels + ": 2 labels for 3 series in " + x);
  EXPECT_EQ(message([&] {
              read_series_input(text, Labels::first_column, labels, "--labels");
            }),
            "option --labels is for .npy input only ('" + text +
                "' is a text file, whose labels are its first column)");
  EXPECT_EQ(message([&] { read_labelled_input(x, {}, "--train-labels"); }),
            "'" + x +
                "' holds no class labels (a .npy file has none): give them "
                "with --train-labels FILE.npy");
  const SeriesSet unlabelled =
      read_series_input(x, Labels::first_column, {}, "--labels");
  EXPECT_EQ(unlabelled.count, 3u);
  EXPECT_TRUE(unlabelled.labels.empty());
  for (const auto& path : {x, labels, text}) std::filesystem::remove(path);
}

// --- writer shapes, JSON, series helpers -------------------------------------

TEST(MatrixWriter, NpyShapesAndIntegers) {
  EXPECT_NE(npy_header<std::int64_t>({5}).find(
                "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }"),
            std::string::npos);
  EXPECT_NE(npy_header<float>({2, 3, 4}).find("'shape': (2, 3, 4), }"),
            std::string::npos);
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  const std::int64_t labels[] = {0, 12, -3};
  MatrixWriter<std::int64_t> writer(file, "tmp", MatrixFormat::csv, 3, 1, {3});
  writer.write_rows(labels, 3);
  writer.finish();
  std::rewind(file);
  char text[32] = {};
  EXPECT_EQ(std::fread(text, 1, sizeof text - 1, file), 8u);
  std::fclose(file);
  EXPECT_STREQ(text, "0\n12\n-3\n");
}

TEST(JsonLine, TypesNullsAndEscapes) {
  const std::optional<int> none;
  const std::string line =
      JsonLine()
          .add("n", std::size_t{3})
          .add("s", std::string("a\"b\\c\n"))
          .add("x", 0.25)
          .add("t", 1.0 / 3.0, "%.3f")
          .add("nan", std::numeric_limits<double>::quiet_NaN())
          .add("none", none)
          .add("some", std::optional<std::int64_t>(-4))
          .add("ok", true)
          .str();
  EXPECT_EQ(line,
            "{\"n\": 3, \"s\": \"a\\\"b\\\\c\\u000a\", \"x\": 0.25, \"t\": "
            "0.333, \"nan\": null, \"none\": null, \"some\": -4, \"ok\": "
            "true}\n");
}

TEST(SeriesTools, ResampleKeepsEndsAndInterpolates) {
  const double series[] = {0, 10, 1, 11, 2, 12};  // 3 points, d = 2
  EXPECT_EQ(resample(series, 3, 2, 3),
            (std::vector<double>(series, series + 6)));
  EXPECT_EQ(resample(series, 3, 2, 5),
            (std::vector<double>{0, 10, 0.5, 10.5, 1, 11, 1.5, 11.5, 2, 12}));
  EXPECT_EQ(resample(series, 3, 2, 2), (std::vector<double>{0, 10, 2, 12}));
  EXPECT_EQ(resample(series, 3, 2, 1), (std::vector<double>{1, 11}));
}

TEST(SeriesTools, MeanSubsetAndLabels) {
  SeriesSet set;
  set.count = 3;
  set.length = 2;
  set.values = {1, 2, 3, 4, 5, 9};
  set.labels = {7, 8, 7};
  EXPECT_EQ(series_with_label(set, 7), (std::vector<std::size_t>{0, 2}));
  const SeriesSet sevens = subset(set, series_with_label(set, 7));
  EXPECT_EQ(sevens.count, 2u);
  EXPECT_EQ(sevens.values, (std::vector<double>{1, 2, 5, 9}));
  EXPECT_EQ(sevens.labels, (std::vector<std::int64_t>{7, 7}));
  EXPECT_EQ(mean_series(sevens, 2), (std::vector<double>{3, 5.5}));
  EXPECT_EQ(mean_series(sevens, 3), (std::vector<double>{3, 4.25, 5.5}));
}

TEST(SeriesTools, AdjustedRandIndex) {
  using L = std::vector<std::int64_t>;
  EXPECT_DOUBLE_EQ(adjusted_rand_index(L{0, 0, 1, 1}, L{0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(adjusted_rand_index(L{0, 0, 1, 1}, L{5, 5, 3, 3}), 1.0);
  EXPECT_DOUBLE_EQ(adjusted_rand_index(L{0, 0, 1, 2}, L{0, 0, 1, 1}),
                   4.0 / 7.0);
  EXPECT_DOUBLE_EQ(adjusted_rand_index(L{0, 0, 0, 0}, L{0, 1, 2, 3}), 0.0);
  EXPECT_DOUBLE_EQ(adjusted_rand_index(L{0, 0, 1, 1}, L{0, 1, 0, 1}), -0.5);
  EXPECT_DOUBLE_EQ(adjusted_rand_index(L{1, 1, 1}, L{2, 2, 2}), 1.0);
}

}  // namespace
}  // namespace softwave::cli
