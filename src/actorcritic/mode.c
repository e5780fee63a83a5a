/* mode.c: -mode schedule. Reads the instance (-sched_*), optimizes a fused
 * actor-critic schedule, prints its makespan against the lower bound, the
 * greedy start and the sequential 1F1B baseline, and writes the schedule
 * file; or, with -sched_file, reads and validates a schedule file and
 * prints its replay. Runs on one rank; needs no model. */
#include "actorcritic.h"
#include <stdio.h>
#include <string.h>

/* PETSc's %g prints 708 as "708."; numbers go through snprintf */
static const char *num(char *buf, double v)
{
  snprintf(buf, 32, "%g", v);
  return buf;
}

/* The files -mode schedule reads and writes, for io_files_check. */
const IoFileOption ac_file_options[] = {
  {"-sched_file", IO_FILE_IN, NULL, NULL},
  {"-sched_output", IO_FILE_OUT, NULL, NULL},
  {NULL, IO_FILE_IN, NULL, NULL},
};

static PetscErrorCode print_result(const ACInst *in, double makespan, double peak, double lb, double greedy,
                                   const ACScore *seq)
{
  char a[32], b[32], c[32], d[32], e[32], f[32];

  PetscFunctionBegin;
  PetscCall(PetscPrintf(PETSC_COMM_WORLD,
                        "schedule: actor pp %d x %d micro-batches (f %s), critic pp %d x %d copies x %d micro-batches "
                        "(f %s)\n",
                        in->pp[0], in->m[0], num(a, in->f[0]), in->pp[1], in->pp[0] / in->pp[1], in->m[1],
                        num(b, in->f[1])));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "  makespan %s  lower bound %s  (%.2f%% above)", num(a, makespan), num(b, lb),
                        100 * (makespan / lb - 1)));
  if (greedy > 0) PetscCall(PetscPrintf(PETSC_COMM_WORLD, "  greedy start %s", num(c, greedy)));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "  sequential 1F1B %s  speed-up %.3fx\n", num(d, seq->makespan),
                        seq->makespan / makespan));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "  peak activation memory per rank %s (sequential 1F1B %s)\n", num(e, peak),
                        num(f, seq->peak_mem)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ac_schedule_run(RunCtx *run)
{
  ACInst       in = {{0, 0}, {0, 0}, {0, 0}, {1, 1}, 0};
  ACOptimizeOpts opt;
  ACSched      s;
  ACOptimizeInfo info;
  ACScore      seq = {0};
  PetscInt       pp0 = 0, pp1 = 0, m0 = 0, m1 = 0, chains = 4, iters = 2000, mem_steps = 4;
  PetscReal      f0 = 0, f1 = 0, mem0 = 1, mem1 = 1, cap = 0;
  char           output[PETSC_MAX_PATH_LEN] = "", file[PETSC_MAX_PATH_LEN] = "";
  PetscBool      help;
  const char    *need[] = {"pp0", "pp1", "m0", "m1"};

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, "sched_", "Fused actor-critic schedule optimizer (-mode schedule)", NULL);
  RfOptInt("-pp0", "Actor pipeline stages, one per rank (required)", pp0, &pp0);
  RfOptInt("-pp1", "Critic pipeline stages: divides pp0, the critic is replicated pp0/pp1 times (required)", pp1, &pp1);
  RfOptInt("-m0", "Actor micro-batches (required)", m0, &m0);
  RfOptInt("-m1", "Micro-batches of each critic copy (required)", m1, &m1);
  RfOptReal("-f0", "Forward time of one actor stage; a backward takes twice as long (required)", f0, &f0);
  RfOptReal("-f1", "Forward time of one critic stage (required)", f1, &f1);
  RfOptReal("-mem0", "Activation memory one actor micro-batch in flight holds on a rank", mem0, &mem0);
  RfOptReal("-mem1", "Activation memory one critic micro-batch in flight holds on a rank", mem1, &mem1);
  RfOptReal("-mem_cap", "Activation memory cap per rank (0: none)", cap, &cap);
  RfOptInt("-chains",
           "Independent annealing chains (run on the OpenMP threads; the result does not depend on the thread count)",
           chains, &chains);
  RfOptInt("-iters", "Annealing proposals per chain (a chain stops early at the lower bound)", iters, &iters);
  RfOptInt("-mem_steps",
           "Bisection steps on a memory cap after the optimization, lowering the peak activation memory at the best "
           "makespan (0: none)",
           mem_steps, &mem_steps);
  RfOptString("-output", "Schedule file to write, HDF5 (required unless -sched_file)", output, sizeof output);
  RfOptString("-file",
              "Schedule file to check instead of optimizing one: validated against the instance, replayed, printed",
              file, sizeof file);
  PetscOptionsEnd();
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscFunctionReturn(PETSC_SUCCESS);
  if (run->size > 1)
    SETERRQ(PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
            "-mode schedule runs on one rank (got %d): it searches a schedule for pp0 ranks without running it",
            run->size);
  {
    PetscInt v[4] = {pp0, pp1, m0, m1};
    for (int k = 0; k < 4; k++)
      PetscCheck(v[k] != 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-mode schedule needs -sched_%s", need[k]);
  }
  PetscCheck(f0 != 0 && f1 != 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL,
             "-mode schedule needs -sched_f0 and -sched_f1 (forward times per stage)");
  PetscCheck(output[0] || file[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL,
             "-mode schedule needs -sched_output FILE (or -sched_file FILE to check one)");
  PetscCheck(!(output[0] && file[0]), PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-sched_output %s and -sched_file %s: give one (search and write, or check a file)", output, file);
  PetscCheck(chains >= 1 && chains <= 1024, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-sched_chains %" PetscInt_FMT " must be in 1..1024", chains);
  PetscCheck(mem_steps >= 0 && mem_steps <= 64, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-sched_mem_steps %" PetscInt_FMT " must be in 0..64", mem_steps);
  PetscCheck(iters >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-sched_iters %" PetscInt_FMT " must be >= 0",
             iters);
  PetscCheck(pp0 <= 4096 && pp1 <= 4096, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-sched_pp0 %" PetscInt_FMT " / -sched_pp1 %" PetscInt_FMT ": at most 4096 stages", pp0, pp1);
  in.pp[0]   = (int)pp0;
  in.pp[1]   = (int)pp1;
  in.m[0]    = m0 > (1 << 20) ? -1 : (int)m0;
  in.m[1]    = m1 > (1 << 20) ? -1 : (int)m1;
  in.f[0]    = f0;
  in.f[1]    = f1;
  in.mem[0]  = mem0;
  in.mem[1]  = mem1;
  in.mem_cap = cap;
  PetscCall(ac_inst_check(&in, "-sched_"));
  if (run->dry_run) {
    PetscCall(
        PetscPrintf(PETSC_COMM_WORLD, "schedule: dry run, instance is valid; lower bound %g\n", ac_lower_bound(&in)));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(ac_sequential(&in, NULL, &seq));
  if (file[0]) {
    ACScore sc = {0};
    PetscCall(ac_sched_read(file, &in, &s));
    PetscCall(ac_replay(&s, &sc, NULL));
    PetscCall(print_result(&in, sc.makespan, sc.peak_mem, ac_lower_bound(&in), 0, &seq));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "  %s is a valid schedule\n", file));
    PetscCall(ac_sched_free(&s));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  opt.seed   = (uint64_t)run->seed;
  opt.chains = (int)chains;
  opt.iters  = (int)iters;
  opt.mem_steps = (int)mem_steps;
  PetscCall(ac_optimize(&in, &opt, &s, &info));
  PetscCall(print_result(&in, info.best.makespan, info.best.peak_mem, info.lower_bound, info.greedy.makespan, &seq));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD,
                        "  search %.2f s (CPU %.2f s) on %d threads, %d chains, %d proposals in all\n", info.seconds,
                        info.cpu_seconds, run->nthreads, opt.chains, info.iters_used));
  PetscCall(ac_sched_write(output, &s, &info, &seq));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "  wrote %s\n", output));
  PetscCall(ac_sched_free(&s));
  PetscFunctionReturn(PETSC_SUCCESS);
}
