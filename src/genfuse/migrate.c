/* genfuse: migration of the long tail (inc/genfuse.h, docs/fusion.md). A hook of
 * the generation engine's loop on every rank of the generation mesh: before
 * each step the replicas add up their unfinished samples (one allreduce
 * over the mesh, so every replica decides at the same step); once at most
 * R_t * B remain, or a replica has none left (its ranks are free already),
 * each replica head's list of unfinished samples is
 * gathered, every rank computes the same plan (genfuse_migrate_plan), and each
 * rank of a source replica sends its samples' states, cache shard included,
 * to the rank with the same stage and tensor coordinates in the destination
 * replica, in buckets, point to point. Receivers take the buckets source by
 * source in replica order, so every rank of a destination replica puts the
 * samples in the same slots. After that no rank joins another allreduce:
 * the sources have nothing left and leave the loop, the destinations decode
 * the tail. */
#include "genfuse.h"
#include "exec.h"
#include <string.h>

#define MIGRATE_TAG 7302

/* Replica order for the destinations: most cache held, then most samples,
 * then the lower index. */
static int before(const double *held, const int *cnt, int a, int b)
{
  if (held[a] != held[b]) return held[a] > held[b];
  if (cnt[a] != cnt[b]) return cnt[a] > cnt[b];
  return a < b;
}

PetscErrorCode genfuse_migrate_plan(const GenFuseMigIn *in, int *m_out, unsigned char *dest, int *to)
{
  int     dp = in->dp, S = in->slots, n = in->n, running = 0, m, *cnt, *run, *ord, *load;
  double *held;

  PetscFunctionBegin;
  PetscCall(PetscCalloc5(dp, &cnt, dp, &run, dp, &ord, dp, &load, dp, &held));
  for (int i = 0; i < n; i++) {
    cnt[in->rep[i]]++;
    held[in->rep[i]] += in->kvlen[i];
    if (in->kvlen[i] > 0) run[in->rep[i]]++, running++;
  }
  /* the fewest replicas whose slots hold the samples (a slot holds a
   * sequence of any length up to the bound: slots are the KV memory too);
   * never fewer than the running ones need slots */
  m = in->forced > 0 ? in->forced : (n + S - 1) / S;
  m = PetscMax(m, (running + S - 1) / S);
  m = PetscMin(PetscMax(m, 1), dp);
  for (int d = 0; d < dp; d++) ord[d] = d;
  for (int i = 1; i < dp; i++) /* insertion sort: dp is small */
    for (int j = i; j > 0 && before(held, cnt, ord[j], ord[j - 1]); j--) {
      int x = ord[j];
      ord[j] = ord[j - 1], ord[j - 1] = x;
    }
  for (int d = 0; d < dp; d++) dest[d] = 0;
  for (int k = 0; k < m; k++) dest[ord[k]] = 1;
  for (int d = 0; d < dp; d++)
    load[d] = dest[d] ? cnt[d] : 0, run[d] = dest[d] ? S - run[d] : 0; /* run: free slots now */
  for (int i = 0; i < n; i++) {
    int best = -1;
    if (dest[in->rep[i]]) {
      to[i] = in->rep[i];
      continue;
    }
    for (int d = 0; d < dp; d++) {
      if (!dest[d]) continue;
      if (in->kvlen[i] > 0) { /* running: the most free slots */
        if (run[d] > 0 && (best < 0 || run[d] > run[best])) best = d;
      } else if (best < 0 || load[d] < load[best]) best = d; /* waiting: the least loaded */
    }
    PetscCheck(best >= 0, PETSC_COMM_SELF, PETSC_ERR_PLIB, "genfuse_migrate_plan: no free slot for a running sample");
    to[i] = best;
    load[best]++;
    if (in->kvlen[i] > 0) run[best]--;
  }
  *m_out = m;
  PetscCall(PetscFree5(cnt, run, ord, load, held));
  PetscFunctionReturn(PETSC_SUCCESS);
}

void genfuse_reroute(int ncall, int nq, int B, const int *q_rep, const unsigned char *freed,
                     const unsigned char *member, const unsigned char *keep, unsigned char *need)
{
  int stay[PLAN_MAX_RANKS], to[PLAN_MAX_RANKS],
      ns =
          0; /* ranks of decoding replicas; freed members, in rank order (a world has at most PLAN_MAX_RANKS: plan.c) */

  for (int q = 0; q < nq && q < PLAN_MAX_RANKS; q++)
    if (q_rep[q] >= 0 && !freed[q_rep[q]]) stay[ns++] = q;
  for (int k = 0; k < ncall; k++) {
    int nf = 0, next = 0;
    for (int q = 0; q < nq && q < PLAN_MAX_RANKS; q++)
      if (q_rep[q] >= 0 && freed[q_rep[q]] && member[k * nq + q]) to[nf++] = q;
    if (!nf) continue;
    for (int b = 0; b < B; b++) {
      if (keep && keep[b]) continue;
      for (int i = 0; i < ns; i++) {
        unsigned char *n = need + ((size_t)k * nq + stay[i]) * B + b;
        if (!*n) continue;
        *n = 0; /* to the next freed member, in rank order */
        need[((size_t)k * nq + to[next++ % nf]) * B + b] = 1;
      }
    }
  }
}

PetscErrorCode genfuse_migrator_begin(MPI_Comm comm, const Mesh *mesh, int B, double at, int forced,
                                      size_t bucket_bytes, GenFuseMigrator *mg)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(mg, sizeof *mg));
  mg->comm = comm, mg->mesh = mesh, mg->B = B, mg->at = at, mg->forced = forced;
  mg->bucket = PetscMax(bucket_bytes / 4, (size_t)1);
  mg->m      = mesh->dp;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Every replica head's unfinished samples as (replica, request, positions),
 * on every rank of the mesh. */
static PetscErrorCode gather_unfinished(GenFuseMigrator *mg, GenEngine *e, const GenBatch *b, GenFuseMigIn *in,
                                        int **trip)
{
  const Mesh *m = mg->mesh;
  int         size = m->all.size, nloc = 0, *cnt, *displ, *mine, *idx, *kvl, tot = 0;

  PetscFunctionBegin;
  PetscCall(PetscMalloc5(size, &cnt, size, &displ, 3 * (size_t)b->n + 1, &mine, b->n + 1, &idx, b->n + 1, &kvl));
  if (exec_is_head(m)) {
    nloc = gen_engine_unfinished(e, b, idx, kvl);
    for (int i = 0; i < nloc; i++) mine[3 * i] = m->d, mine[3 * i + 1] = idx[i], mine[3 * i + 2] = kvl[i];
  }
  nloc *= 3;
  PetscCallMPI(sys_mpi_allgather(&nloc, 1, MPI_INT, cnt, 1, MPI_INT, m->all.mpi));
  for (int r = 0; r < size; r++) displ[r] = tot, tot += cnt[r];
  PetscCall(PetscMalloc1(tot + 1, trip));
  PetscCallMPI(sys_mpi_allgatherv(mine, nloc, MPI_INT, *trip, cnt, displ, MPI_INT, m->all.mpi));
  in->n = tot / 3;
  PetscCall(PetscFree5(cnt, displ, mine, idx, kvl));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* This rank's samples to its counterparts in the destination replicas,
 * packed [count, state, state, ...] in buckets of at most mg->bucket words
 * (a single state larger than that goes alone). */
static PetscErrorCode send_states(GenFuseMigrator *mg, GenEngine *e, const GenBatch *b, const GenFuseMigIn *in,
                                  const int *to, MPI_Request *req, int **bufs, int *nreq)
{
  const Mesh *m = mg->mesh;

  PetscFunctionBegin;
  *nreq = 0;
  for (int d = 0; d < m->dp; d++) {
    int i = 0;
    if (d == m->d) continue;
    for (;;) { /* one bucket to replica d: samples i..k-1 */
      size_t words = 1, at = 1;
      int    k, count = 0, *w;
      for (k = i; k < in->n; k++) {
        size_t sw;
        if (in->rep[k] != m->d || to[k] != d) continue;
        sw = gen_engine_state_words(e, b, in->idx[k]);
        if (count && words + sw > mg->bucket) break;
        words += sw, count++;
      }
      if (!count) break;
      PetscCall(PetscMalloc1(words, &w));
      w[0] = count;
      for (int j = i; j < k; j++) {
        size_t sw;
        if (in->rep[j] != m->d || to[j] != d) continue;
        sw = gen_engine_state_words(e, b, in->idx[j]);
        PetscCall(gen_engine_take(e, b, in->idx[j], w + at));
        at += sw;
      }
      bufs[*nreq] = w;
      PetscCallMPI(
          MPI_Isend(w, (int)words, MPI_INT, mesh_rank(m, m->p, d, m->t), MIGRATE_TAG, mg->comm, &req[(*nreq)++]));
      mg->bytes += 4LL * (long long)words;
      mg->moved += count;
      i = k;
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The samples for this rank's replica, source replica by source replica
 * (MPI keeps the order of one sender's messages), so every rank of the
 * replica gives them to its engine in the same order. */
static PetscErrorCode recv_states(GenFuseMigrator *mg, GenEngine *e, GenBatch *b, const GenFuseMigIn *in, const int *to)
{
  const Mesh *m = mg->mesh;
  int        *w = NULL, cap = 0;

  PetscFunctionBegin;
  for (int s = 0; s < m->dp; s++) {
    int expect = 0;
    if (s == m->d) continue;
    for (int i = 0; i < in->n; i++) expect += in->rep[i] == s && to[i] == m->d;
    while (expect > 0) {
      MPI_Status st;
      int        words, src = mesh_rank(m, m->p, s, m->t);
      size_t     at = 1;
      PetscCallMPI(sys_mpi_probe(src, MIGRATE_TAG, mg->comm, &st));
      PetscCallMPI(MPI_Get_count(&st, MPI_INT, &words));
      if (words > cap) {
        PetscCall(PetscFree(w));
        cap = words;
        PetscCall(PetscMalloc1(cap, &w));
      }
      PetscCallMPI(sys_mpi_recv(w, words, MPI_INT, src, MIGRATE_TAG, mg->comm, MPI_STATUS_IGNORE));
      PetscCheck(w[0] >= 1 && w[0] <= expect, PETSC_COMM_SELF, PETSC_ERR_PLIB,
                 "fuse: migration bucket of %d samples, %d expected", w[0], expect);
      for (int j = 0; j < w[0]; j++) {
        size_t used;
        PetscCall(gen_engine_give(e, b, w + at, &used));
        at += used;
      }
      PetscCheck(at == (size_t)words, PETSC_COMM_SELF, PETSC_ERR_PLIB, "fuse: migration bucket of %d words, %zu read",
                 words, at);
      expect -= w[0];
    }
  }
  PetscCall(PetscFree(w));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode migrate(GenFuseMigrator *mg, GenEngine *e, GenBatch *b)
{
  GenFuseMigIn      in;
  int           *trip, *rep, *idx, *kvl, *to, nreq = 0, **bufs;
  unsigned char *dest;
  MPI_Request   *req;

  PetscFunctionBegin;
  mg->t_start = sys_wtime();
  PetscCall(PetscMemzero(&in, sizeof in));
  PetscCall(gather_unfinished(mg, e, b, &in, &trip));
  PetscCall(PetscMalloc5(in.n + 1, &rep, in.n + 1, &idx, in.n + 1, &kvl, in.n + 1, &to, mg->mesh->dp, &dest));
  PetscCall(PetscMalloc2(in.n + 1, &req, in.n + 1, &bufs));
  for (int i = 0; i < in.n; i++) rep[i] = trip[3 * i], idx[i] = trip[3 * i + 1], kvl[i] = trip[3 * i + 2];
  in.dp = mg->mesh->dp, in.slots = gen_engine_slots(e), in.forced = mg->forced, in.rep = rep, in.idx = idx,
  in.kvlen = kvl;
  PetscCall(genfuse_migrate_plan(&in, &mg->m, dest, to));
  mg->dest = (PetscBool)dest[mg->mesh->d];
  if (mg->after)
    PetscCall(
        mg->after(mg->after_ctx, dest, mg->mesh->dp, idx, in.n)); /* e.g. the freed ranks' inference starts being fed */
  if (mg->dest) PetscCall(recv_states(mg, e, b, &in, to));
  else PetscCall(send_states(mg, e, b, &in, to, req, bufs, &nreq));
  for (int k = 0; k < nreq; k++) {
    PetscCallMPI(sys_mpi_finish(&req[k], MPI_STATUS_IGNORE));
    PetscCall(PetscFree(bufs[k]));
  }
  PetscCall(PetscFree2(req, bufs));
  PetscCall(PetscFree5(rep, idx, kvl, to, dest));
  PetscCall(PetscFree(trip));
  mg->t_end = sys_wtime();
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode genfuse_migrate_step(void *ctx, GenEngine *e, GenBatch *b, PetscBool *go)
{
  GenFuseMigrator *mg = (GenFuseMigrator *)ctx;
  int           c[2] = {0, 0}; /* unfinished samples; replicas with none left */

  PetscFunctionBegin;
  if (mg->decided) PetscFunctionReturn(PETSC_SUCCESS);
  if (exec_is_head(mg->mesh)) {
    c[0] = gen_engine_running(e) + gen_engine_waiting(e);
    c[1] = c[0] == 0;
  }
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, c, 2, MPI_INT, MPI_SUM, mg->mesh->all.mpi));
  if (c[0] == 0) { /* every sample finished before the threshold */
    mg->decided = PETSC_TRUE;
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  /* at R_t, or earlier when a replica has run out of samples: its ranks
   * are free already, and waiting in this count would idle them */
  if (c[0] > mg->at * mg->B && !c[1]) {
    *go = PETSC_TRUE; /* keep joining the count */
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  mg->decided = PETSC_TRUE;
  mg->left    = c[0];
  PetscCall(migrate(mg, e, b));
  *go = (PetscBool)(gen_engine_running(e) + gen_engine_waiting(e) > 0);
  PetscFunctionReturn(PETSC_SUCCESS);
}
