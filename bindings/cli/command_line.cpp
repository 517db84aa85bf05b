#include "command_line.hpp"

#include <cmath>

#include "number_text.hpp"

namespace softwave::cli {

ParsedOptions::ParsedOptions(const std::vector<std::string>& arguments,
                             const std::vector<OptionSpec>& specs) {
  for (std::size_t k = 0; k < arguments.size(); ++k) {
    const std::string& argument = arguments[k];
    const std::size_t equals =
        argument.rfind("--", 0) == 0 ? argument.find('=') : std::string::npos;
    const std::string given = argument.substr(0, equals);
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& candidate : specs) {
      if (given == candidate.name ||
          (!candidate.alias.empty() && given == candidate.alias)) {
        spec = &candidate;
      }
    }
    if (spec == nullptr) {
      if (argument.empty() || argument[0] != '-') {
        throw usage_error("unexpected argument '" + argument + "'");
      }
      throw usage_error("unknown option '" + given + "'");
    }
    if (values_.count(spec->name) != 0) {
      throw usage_error("option " + spec->name + " given more than once");
    }
    std::string value;
    if (equals != std::string::npos) {
      if (!spec->takes_value) {
        throw usage_error("option " + spec->name + " takes no value");
      }
      value = argument.substr(equals + 1);
    } else if (spec->takes_value) {
      if (k + 1 == arguments.size()) {
        throw usage_error("option " + spec->name + " needs a value");
      }
      value = arguments[++k];
    }
    values_[spec->name] = value;
  }
}

bool ParsedOptions::has(const std::string& name) const {
  return values_.count(name) != 0;
}

const std::string& ParsedOptions::required(const std::string& name) const {
  const auto found = values_.find(name);
  if (found == values_.end()) {
    throw usage_error("missing required option " + name);
  }
  return found->second;
}

std::optional<std::string> ParsedOptions::text(const std::string& name) const {
  const auto found = values_.find(name);
  if (found == values_.end()) return std::nullopt;
  return found->second;
}

std::optional<double> ParsedOptions::number(const std::string& name) const {
  const auto value = text(name);
  if (!value) return std::nullopt;
  double parsed = 0;
  const NumberRead read = read_double(*value, parsed);
  if (read == NumberRead::not_a_number) {
    throw usage_error("option " + name + ": expected a number, got '" + *value +
                      "'");
  }
  if (read != NumberRead::ok) {
    throw usage_error("option " + name + ": '" + *value + "' " +
                      number_problem(read, /*integer=*/false));
  }
  return parsed;
}

std::optional<std::int64_t> ParsedOptions::integer(
    const std::string& name) const {
  const auto value = text(name);
  if (!value) return std::nullopt;
  std::int64_t parsed = 0;
  const NumberRead read = read_integer(*value, parsed);
  if (read == NumberRead::not_a_number) {
    throw usage_error("option " + name + ": expected an integer, got '" +
                      *value + "'");
  }
  if (read != NumberRead::ok) {
    throw usage_error("option " + name + ": '" + *value + "' " +
                      number_problem(read, /*integer=*/true));
  }
  return parsed;
}

std::optional<std::int64_t> ParsedOptions::integer_at_least(
    const std::string& name, std::int64_t least) const {
  const auto value = integer(name);
  if (value && *value < least) {
    throw usage_error("option " + name + ": expected an integer >= " +
                      std::to_string(least) + ", got '" + *text(name) + "'");
  }
  return value;
}

std::optional<double> ParsedOptions::positive_number(
    const std::string& name) const {
  const auto value = number(name);
  if (value && !(*value > 0 && std::isfinite(*value))) {
    throw usage_error("option " + name + ": expected a number > 0, got '" +
                      *text(name) + "'");
  }
  return value;
}

std::optional<std::string> ParsedOptions::choice(
    const std::string& name, const std::vector<std::string>& choices) const {
  const auto value = text(name);
  if (!value) return std::nullopt;
  std::string listed;
  for (const std::string& candidate : choices) {
    if (*value == candidate) return value;
    listed += (listed.empty() ? "" : "|") + candidate;
  }
  throw usage_error("option " + name + ": expected " + listed + ", got '" +
                    *value + "'");
}

}  // namespace softwave::cli
