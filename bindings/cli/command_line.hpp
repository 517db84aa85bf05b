#pragma once
// Option parsing for the softwave subcommands: `--name value`,
// `--name=value` and flags, each given at most once, no positionals.

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace softwave::cli {

// Bad usage: unknown or repeated option, missing or bad value. what() is a
// one-line message naming the option.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct OptionSpec {
  std::string name;         // "--gamma"
  bool takes_value = true;  // false: a flag
  std::string alias = {};   // "-o"
};

class ParsedOptions {
 public:
  ParsedOptions(const std::vector<std::string>& arguments,
                const std::vector<OptionSpec>& specs);

  bool has(const std::string& name) const;
  // The value of a required option (usage_error when missing).
  const std::string& required(const std::string& name) const;
  std::optional<std::string> text(const std::string& name) const;
  // Typed values: usage_error naming the option when the text does not
  // parse completely.
  std::optional<double> number(const std::string& name) const;
  std::optional<std::int64_t> integer(const std::string& name) const;
  // An integer >= `least` (usage_error naming the option otherwise).
  std::optional<std::int64_t> integer_at_least(const std::string& name,
                                               std::int64_t least) const;
  // A finite number > 0 (usage_error naming the option otherwise).
  std::optional<double> positive_number(const std::string& name) const;
  // One of `choices`, or usage_error listing them.
  std::optional<std::string> choice(
      const std::string& name, const std::vector<std::string>& choices) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace softwave::cli
