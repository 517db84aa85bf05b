// Configure-time check of the Kokkos softwave was given: is a
// default-constructed View really empty?
//
// g++ 12 miscompiles the defaulted constexpr constructor of the mdspan-based
// View (Kokkos develop after 4.6, the default View of Kokkos 5): the empty
// accessor member marked [[no_unique_address]] shares its address with the
// allocation tracker, and the constructor is folded into all-zero bytes. The
// tracker then reads "tracked, record at null" instead of "do not
// dereference", and the first copy, assignment or destruction of an empty View
// writes through a null pointer (kokkos/kokkos #7464 and #8187, fixed by
// kokkos/kokkos#8223). Every softwave entry point copies empty Views (absent
// lengths, unused gradients), so a library built on such a Kokkos crashes.
//
// Exit status: 0 when every empty View carries the "do not dereference" flag;
// 1 when one does not (the defect). A crash means the same.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

namespace {

using Empty = Kokkos::View<const int*>;

struct Holder {
  Empty member;
  Kokkos::View<double**> other;
};

// impl_track() is Kokkos' internal accessor (3.4 through develop); should a
// later Kokkos drop it, the copies in main() still show the defect by
// crashing.
template <class View, class = void>
struct has_impl_track : std::false_type {};
template <class View>
struct has_impl_track<
    View, std::void_t<decltype(std::declval<const View&>().impl_track())>>
    : std::true_type {};

template <class View>
bool flagged_empty(const View& view, const char* where) {
  if constexpr (has_impl_track<View>::value) {
    std::uintptr_t bits = 0;
    static_assert(sizeof(view.impl_track()) == sizeof(bits),
                  "tracker is one word");
    std::memcpy(&bits, &view.impl_track(), sizeof(bits));
    // Kokkos::Impl::SharedAllocationTracker::DO_NOT_DEREF_FLAG
    if ((bits & 1u) == 0) {
      std::fprintf(
          stderr,
          "empty View (%s): allocation tracker bits 0x%llx, flag missing\n",
          where, static_cast<unsigned long long>(bits));
      return false;
    }
  }
  return true;
}

bool default_argument(const Empty& view = {}) {
  return flagged_empty(view, "default argument");
}

}  // namespace

int main() {
  // No Kokkos::initialize: empty Views need no execution space.
  Empty local;
  Holder holder{};
  Empty value_initialised = Empty();
  bool ok = flagged_empty(local, "local variable");
  ok = flagged_empty(holder.member, "struct member") && ok;
  ok = flagged_empty(holder.other, "second struct member") && ok;
  ok = flagged_empty(value_initialised, "value-initialised") && ok;
  ok = default_argument() && ok;
  if (!ok) return 1;
  // What the library does with them; with the defect this is the crash.
  Empty copy(local);
  copy = holder.member;
  Holder moved = std::move(holder);
  return flagged_empty(copy, "copy") && flagged_empty(moved.member, "moved")
             ? 0
             : 1;
}
