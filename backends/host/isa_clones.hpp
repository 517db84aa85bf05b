#pragma once
// Function multi-versioning for host loops that vectorise: on x86-64 with
// GCC, a function marked SOFTWAVE_HOST_ISA_CLONES is compiled for AVX-512,
// AVX2 with FMA and the baseline, and the loader picks the widest the CPU
// has (an ifunc), so a portable build still runs 8 doubles a vector where
// the machine can. Elsewhere (other compilers or architectures, and device
// compilers, which pass host code to theirs) the marker is empty and the
// function is compiled once for the build's target.
//
// Only what is inlined into a clone is compiled for its ISA: a helper the
// compiler keeps out of line runs the baseline's code from every clone.
// Helpers of cloned functions are therefore SOFTWAVE_HOST_ISA_INLINE.

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    defined(__linux__) && !defined(__CUDACC__) && !defined(__HIPCC__)
#define SOFTWAVE_HOST_ISA_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
// The same for code whose sums must equal the portable code's bit for bit:
// the wider clones have FMA, and GCC would fuse a product into a sum.
#define SOFTWAVE_HOST_ISA_CLONES_EXACT                                         \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), \
                 optimize("fp-contract=off")))
// GCC's vector extensions (vector_size, __builtin_convertvector) there too.
#define SOFTWAVE_HOST_VECTOR_LANES 1
#else
#define SOFTWAVE_HOST_ISA_CLONES
#define SOFTWAVE_HOST_ISA_CLONES_EXACT
#endif

#if defined(__GNUC__)
#define SOFTWAVE_HOST_ISA_INLINE __attribute__((always_inline)) inline
#else
#define SOFTWAVE_HOST_ISA_INLINE inline
#endif
