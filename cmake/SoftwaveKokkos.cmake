# TEMPORARY: replaced by the bootstrap module (find_package only for now).
find_package(Kokkos REQUIRED)
set(SOFTWAVE_KOKKOS_ORIGIN "installed")
