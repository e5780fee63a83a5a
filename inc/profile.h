/* profile: measured primitive costs of this machine (-mode profile) and the
 * CostPrims built from them by interpolation (cost.h, docs/costmodel.md).
 *
 * -mode profile times the project's own model code (src/model through the
 * Backend table, so the same code measures the CPU and a GPU) for the
 * deck's actor and critic shapes over a grid of rows x len per
 * tensor-parallel size, one AdamW step over a grid of parameter counts, and
 * the collectives of src/comm over message sizes and mesh sizes; it writes
 * them to an HDF5 profile (docs/formats.md). cost_prims_profile reads one
 * back as primitives for the cost model. */
#ifndef RLFUSE_PROFILE_H
#define RLFUSE_PROFILE_H

#include "cost.h"
#include "tensor.h"

/* One model shape's table: seconds per (tp, part, phase, rows, len). */
typedef struct {
  CostShape shape;
  int       ntp, nrows, nlen;
  int      *tp;    /* [ntp], increasing */
  double   *rows;  /* [nrows], increasing */
  double   *len;   /* [nlen], increasing */
  double   *sec;   /* [ntp][COST_NPART][COST_NPHASE][nrows][nlen] */
} ProfileModel;

#define PROFILE_MAX_MODELS 8 /* up to four distinct trunks, each with the LM and the scalar head */

typedef struct {
  char         host[256], backend[16];
  int          cores, threads, nranks, ranks_per_node;
  double       seconds;         /* how long the profiling took */
  int          coll_modeled;    /* 1: a one-rank job, the 2-rank collectives modeled from messages to itself */
  char         key[1024];       /* the profile cache's key ("" outside the cache) */
  double       mem_per_rank;    /* bytes one rank may use (CostPrims.mem_per_rank) */
  double       bytes_per_param; /* 4: fp32 weights */
  int          nmodel;
  ProfileModel model[PROFILE_MAX_MODELS];
  int          nopt;
  double      *opt_n, *opt_sec;   /* [nopt]: AdamW step of n parameters */
  int          nbytes, nmesh;
  double      *bytes;             /* [nbytes], increasing */
  int         *mesh;              /* [nmesh] ranks per group, increasing, >= 2 */
  double      *coll_sec;          /* [COST_NCOLL][nmesh][nbytes] */
} Profile;

static inline double *profile_entry(const ProfileModel *m, int itp, int part, int ph, int ir, int il)
{
  return m->sec + ((((size_t)itp * COST_NPART + part) * COST_NPHASE + ph) * m->nrows + ir) * m->nlen + il;
}
static inline double *profile_coll_entry(const Profile *pf, int op, int im, int ib)
{
  return pf->coll_sec + ((size_t)op * pf->nmesh + im) * pf->nbytes + ib;
}

/* Allocates a model table's arrays for the given axis lengths (zeroed). */
PetscErrorCode profile_model_alloc(ProfileModel *m, int ntp, int nrows, int nlen);
/* Allocates the optimizer and collective tables. */
PetscErrorCode profile_tables_alloc(Profile *pf, int nopt, int nmesh, int nbytes);
PetscErrorCode profile_free(Profile *pf);
/* Writes pf atomically (temporary, then rename); call on one rank. */
PetscErrorCode profile_write(const char *path, const Profile *pf);
/* Reads and checks a profile (axes increasing and positive, seconds finite
 * and non-negative); errors are one line naming the file and what is wrong. */
PetscErrorCode profile_read(const char *path, Profile *pf);

/* The grid and repeats of a profile (-profile_* options, or the quick
 * defaults of the profile cache). */
typedef struct {
  int    rows_max, len_max, repeats, warmup, extra;
  double bytes_max, opt_max, mem;
} ProfSpec;

/* Times the deck's models (each distinct trunk with both heads), AdamW and
 * the collectives on every rank of the job with run->be; collective on
 * PETSC_COMM_WORLD. On one rank the 2-rank collectives are modeled
 * (coll_modeled). profile_free frees pf. */
PetscErrorCode profile_measure(const RunCtx *run, const ProfSpec *spec, const CostDeck *deck, Profile *pf);
/* profile_write on rank 0, its error everyone's. */
PetscErrorCode profile_write_rank0(const char *path, const Profile *pf);

/* -mode profile: -profile_output FILE, the grid and repeat options, for
 * the deck's models. */
PetscErrorCode profile_run(RunCtx *run, CostDeckFn deck_of);
/* Its file options (-profile_file, -profile_output), for io_files_check. */
extern const IoFileOption profile_file_options[];

/* This machine's profile for the deck's models, for a plan search given
 * no -cost_hardware or -cost_profile: from the cache directory (dir: the
 * -cost_profile_cache value, else $XDG_CACHE_HOME/rlfuse/profiles, else
 * ~/.cache/rlfuse/profiles), keyed by host, backend, ranks, threads per
 * rank, the models' trunks and the grid; measured on the job's ranks on a
 * quick grid and stored there (temporary, then rename) when the cache has
 * none. path gets the file, how says whether it was measured or reused.
 * Collective on PETSC_COMM_WORLD. */
PetscErrorCode profile_cached(const RunCtx *run, const CostDeck *deck, const char *dir, char *path, size_t len,
                              char *how, size_t howlen);

/* CostPrims from a profile file. compute interpolates log(seconds)
 * bilinearly in (log rows, log len) per tp and extrapolates outside the grid
 * (docs/costmodel.md, "Measured primitives"); coll interpolates in bytes and
 * extrapolates to larger meshes by the ring formulas. p->destroy frees it. */
PetscErrorCode cost_prims_profile(const char *path, CostPrims *p);
/* cost_prims_profile for a workload: every model the work runs (actor,
 * reference, reward, and the critic unless critic-free) must be one the
 * profile measured (cost_prims_profile_check); the one way a plan is
 * estimated from a profile (-mode plan, -placement auto, -profile_file). */
PetscErrorCode cost_prims_profile_for(const char *path, const CostWork *work, CostPrims *p);
/* The profile behind primitives from cost_prims_profile (NULL for others). */
const Profile *cost_prims_profile_info(const CostPrims *p);
/* Whether the profile behind p holds shape m (all but n_layer equal); an
 * error of one line naming the profile, the role and the first difference
 * when it does not. compute() on a shape the profile lacks scales the
 * nearest table by FLOPs, which the cost model must not rely on. */
PetscErrorCode cost_prims_profile_check(const CostPrims *p, const CostShape *m, const char *role);

#endif
