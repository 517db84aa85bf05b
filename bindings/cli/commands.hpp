#pragma once
// The softwave subcommands. Each takes the arguments after its name and
// returns the exit code; errors are thrown (usage_error, input_error,
// softwave::invalid_argument, output_error) and reported by main().

#include <string>
#include <vector>

namespace softwave::cli {

// True when --help or -h is among the arguments.
bool wants_help(const std::vector<std::string>& arguments);

int run_knn(const std::vector<std::string>& arguments);
std::string knn_help();

int run_pairwise(const std::vector<std::string>& arguments);
std::string pairwise_help();

int run_barycenter(const std::vector<std::string>& arguments);
std::string barycenter_help();

int run_cluster(const std::vector<std::string>& arguments);
std::string cluster_help();

int run_sinkhorn(const std::vector<std::string>& arguments);
std::string sinkhorn_help();

int run_gw(const std::vector<std::string>& arguments);
std::string gw_help();

}  // namespace softwave::cli
