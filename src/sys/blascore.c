/* blascore.c: OpenBLAS's kernels on CPUs it does not recognise. Debian's
 * OpenBLAS (0.3.21, built for every x86 core) picks its kernels from the CPU
 * model when the library loads; on a CPU too new for its table (this
 * project's test machine reports "Intel(R) Xeon(R) Processor" and has
 * AVX-512) it falls back to the SSE3 "Prescott" kernels. Measured there, side
 * by side: the 10M model trains 1.9x faster and SmolLM2-135M decodes at
 * batch 1 2.7x faster with the SkylakeX kernels, which the CPU runs. The
 * choice is made before main, so the only remedy is the documented
 * OPENBLAS_CORETYPE variable: when the fallback was taken and the CPU has
 * AVX-512 (or AVX2), the program sets it and executes itself again, before
 * MPI or PETSc start. A variable already set (any value) is left alone. */
#include "sys.h"
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

char *openblas_get_corename(void); /* OpenBLAS; not in every cblas.h */

void sys_blas_core_select(char **argv)
{
  const char *core = openblas_get_corename(), *want = NULL;

  if (getenv("OPENBLAS_CORETYPE") || !core ||
      (strcasecmp(core, "prescott") && strcasecmp(core, "core2") && strcasecmp(core, "katmai")))
    return;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    want = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) want = "Haswell";
#endif
  if (!want || setenv("OPENBLAS_CORETYPE", want, 1)) return;
  execv("/proc/self/exe", argv); /* returns only on failure: go on with the kernels loaded */
  unsetenv("OPENBLAS_CORETYPE");
}
