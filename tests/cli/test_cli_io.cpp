// Unit tests of the CLI's file reader, matrix writer header and option
// parser (bindings/cli, library softwave_cli_io).

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "matrix_writer.hpp"
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
            "f.tsv:1: field 3: '1e999' is out of the range of a double");
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
  EXPECT_EQ(message({"--flag=1"}), "option --flag takes no value");
  EXPECT_EQ(message({"--flag"}), "missing required option --gamma");
}

}  // namespace
}  // namespace softwave::cli
