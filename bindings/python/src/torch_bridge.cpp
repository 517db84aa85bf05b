// The core's side of torch_bridge.hpp: each entry unpacks its C arguments
// into the dispatch.hpp call and turns what the call throws into a status
// and a message (argument errors, softwave::invalid_argument among them,
// derive from std::invalid_argument and become ValueError, as through
// nanobind).
#include "torch_bridge.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>

#include "dispatch.hpp"

namespace softwave::python::torch_bridge {
namespace {

Borrowed borrowed(const Array& a) {
  Borrowed b;
  b.name = a.name;
  if (a.data == nullptr) return b;
  b.data = a.data;
  b.dtype = a.dtype;
  b.device = a.device;
  b.device_id = a.device_id;
  b.shape.assign(a.shape, a.shape + std::clamp(a.rank, 0, 3));
  return b;
}

void copy_message(const char* what, char* message, std::size_t capacity) {
  if (capacity == 0) return;
  const std::size_t length = std::min(std::strlen(what), capacity - 1);
  std::memcpy(message, what, length);
  message[length] = '\0';
}

// Runs call(), mapping its exceptions to statuses.
template <class Call>
Status guarded(Call&& call, char* message, std::size_t capacity) {
  try {
    call();
    return Status::ok;
  } catch (const std::invalid_argument& e) {
    copy_message(e.what(), message, capacity);
    return Status::value_error;
  } catch (const std::exception& e) {
    copy_message(e.what(), message, capacity);
    return Status::runtime_error;
  } catch (...) {
    copy_message("softwave: unknown error", message, capacity);
    return Status::runtime_error;
  }
}

Status soft_dtw_entry(const SoftDtwCall* call, char* message,
                      std::size_t capacity) {
  return guarded(
      [&] {
        Settings settings;
        settings.gamma = call->gamma;
        settings.cost = call->cost;
        settings.band = call->band;
        settings.kernel = call->kernel;
        settings.check_values = call->check_values;
        settings.stream = call->stream;
        soft_dtw(settings, borrowed(call->x), borrowed(call->y),
                 borrowed(call->values), borrowed(call->grad_x),
                 borrowed(call->grad_y), Borrowed{"alignment"},
                 Borrowed{"grad_output"}, borrowed(call->lengths_x),
                 borrowed(call->lengths_y), call->divergence);
      },
      message, capacity);
}

constexpr Table core_table{version, &soft_dtw_entry};

}  // namespace

const Table* table() { return &core_table; }

}  // namespace softwave::python::torch_bridge
