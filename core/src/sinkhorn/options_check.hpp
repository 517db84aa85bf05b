#pragma once
// The argument checks of SinkhornOptions, shared by every Sinkhorn entry
// point (options_check.cpp defines them).

#include <softwave/sinkhorn.hpp>

namespace softwave::impl {

// Throws std::invalid_argument naming the first bad option.
void check_sinkhorn_options(const SinkhornOptions& o);

}  // namespace softwave::impl
