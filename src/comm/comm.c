/* comm.c: the collectives behind the Comm interface. Host buffers always go
 * through MPI. Backend (device) buffers go through NCCL on a COMM_NCCL
 * communicator, and otherwise through a host copy around the same MPI code,
 * so the CPU backend (host memory, no copy) runs exactly the MPI code it
 * always did and callers never see which one runs. */
#include "comm.h"
#ifdef RLFUSE_HAVE_NCCL
  #include "internal/rfcuda.h"
#endif

/* Set by comm_use_backend: the backend whose memory the backend-memory calls
 * receive when it is not host memory (NULL: the CPU backend), and whether
 * communicators created from now on get NCCL. */
static const Backend *dev_be   = NULL;
static PetscBool      use_nccl = PETSC_FALSE;

#ifdef RLFUSE_HAVE_NCCL
  /* An rfcuda call (0 on success); the failure's message names the NCCL or CUDA call. */
  #define CommCallNCCL(call) PetscCheck((call) == 0, PETSC_COMM_SELF, PETSC_ERR_LIB, "%s", rfcuda_error())
#endif

static PetscBool member(const Comm *c) { return c->mpi != MPI_COMM_NULL && c->size > 1 ? PETSC_TRUE : PETSC_FALSE; }

PetscErrorCode comm_use_backend(const Backend *be)
{
  PetscBool cpu;

  PetscFunctionBegin;
  PetscCall(PetscStrcmp(be->name, "cpu", &cpu));
  dev_be = cpu ? NULL : be;
#ifdef RLFUSE_HAVE_NCCL
  use_nccl = cpu ? PETSC_FALSE : PETSC_TRUE;
#endif
  PetscFunctionReturn(PETSC_SUCCESS);
}

#ifdef RLFUSE_HAVE_NCCL
/* Whether two members of c drive the same GPU (more ranks on a node than it
 * has devices), which NCCL refuses; *first then names the GPU. Collective
 * over c: every member gives its host and its device's PCI bus id. */
  #define GPU_KEY 256
static PetscErrorCode shared_gpu(const Comm *c, PetscBool *shared, char first[GPU_KEY])
{
  char key[GPU_KEY] = "", *all;
  int  len          = 0;

  PetscFunctionBegin;
  *shared = PETSC_FALSE;
  PetscCallMPI(MPI_Get_processor_name(key, &len));
  key[len++] = ' ';
  CommCallNCCL(rfcuda_device_pci(key + len, GPU_KEY - len));
  PetscCall(PetscMalloc1((size_t)c->size * GPU_KEY, &all));
  PetscCallMPI(sys_mpi_allgather(key, GPU_KEY, MPI_CHAR, all, GPU_KEY, MPI_CHAR, c->mpi));
  for (int a = 0; a < c->size && !*shared; a++)
    for (int b = a + 1; b < c->size && !*shared; b++)
      if (!strncmp(all + (size_t)a * GPU_KEY, all + (size_t)b * GPU_KEY, GPU_KEY)) {
        *shared = PETSC_TRUE;
        PetscCall(PetscStrncpy(first, all + (size_t)a * GPU_KEY, GPU_KEY));
      }
  PetscCall(PetscFree(all));
  PetscFunctionReturn(PETSC_SUCCESS);
}
#endif

PetscErrorCode comm_attach_nccl(Comm *c)
{
  PetscFunctionBegin;
  c->nccl = NULL;
  if (!use_nccl || !member(c)) PetscFunctionReturn(PETSC_SUCCESS);
#ifdef RLFUSE_HAVE_NCCL
  {
    static PetscBool said = PETSC_FALSE;
    PetscBool        shared;
    char             gpu[GPU_KEY];

    /* ranks sharing a GPU (a test, or more ranks than GPUs): the host path,
     * which gives the same bits, said once by the first such rank 0 */
    PetscCall(shared_gpu(c, &shared, gpu));
    if (shared) {
      if (c->rank == 0 && !said)
        PetscCall(PetscPrintf(PETSC_COMM_SELF,
                              "# comm: ranks share a GPU (%s): device buffers go through the host, not NCCL (which "
                              "needs a GPU for every rank)\n",
                              gpu));
      said = PETSC_TRUE;
      PetscFunctionReturn(PETSC_SUCCESS);
    }
  }
  {
    int            n = rfcuda_nccl_id_size();
    unsigned char *id; /* the id, then rank 0's verdict: every member fails together if it could not make one */

    PetscCheck(n > 0, PETSC_COMM_SELF, PETSC_ERR_LIB, "%s", rfcuda_error());
    PetscCall(PetscCalloc1((size_t)n + 1, &id));
    if (c->rank == 0) id[n] = rfcuda_nccl_get_id(id) == 0;
    PetscCallMPI(sys_mpi_bcast(id, n + 1, MPI_BYTE, 0, c->mpi));
    if (!id[n]) {
      PetscCall(PetscFree(id));
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_LIB, "NCCL communicator over %d ranks: %s", c->size,
              c->rank == 0 ? rfcuda_error() : "its rank 0 could not create the NCCL id");
    }
    n = rfcuda_nccl_init(&c->nccl, id, c->size, c->rank);
    PetscCall(PetscFree(id));
    PetscCheck(n == 0, PETSC_COMM_SELF, PETSC_ERR_LIB,
               "NCCL communicator over %d ranks: %s (NCCL needs a GPU of its own for every rank)", c->size,
               rfcuda_error());
    c->kind = COMM_NCCL;
  }
#endif
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- device buffers on a communicator without NCCL: through the host ------- */

/* A host buffer of `bytes` holding [off, off + copy) of device buffer dev
 * (copy 0: nothing copied yet). */
static PetscErrorCode stage_in(const void *dev, size_t bytes, size_t off, size_t copy, char **host)
{
  PetscFunctionBegin;
  PetscCall(PetscMalloc1(bytes + 1, host));
  if (copy) PetscCall(dev_be->to_host(*host + off, (const char *)dev + off, copy));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Back to the device, and the host buffer freed. */
static PetscErrorCode stage_out(void *dev, char **host, size_t bytes)
{
  PetscFunctionBegin;
  if (bytes) PetscCall(dev_be->from_host(dev, *host, bytes));
  PetscCall(PetscFree(*host));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- all-reduce --------------------------------------------------------------- */

/* Reduce-scatter by chunks in rank order, then all-gather: chunk k is summed
 * by rank k as x_0 + x_1 + ... in rank order, so the result does not depend
 * on MPI's algorithm and is the same on every member. Host memory. */
static PetscErrorCode allreduce_sum_mpi(const Comm *c, float *buf, size_t n)
{
  int    P, *cnt, *dsp;
  float *recv;
  size_t chunk;

  PetscFunctionBegin;
  P     = c->size;
  chunk = (n + P - 1) / P;
  PetscCheck(chunk <= (size_t)INT32_MAX / P, PETSC_COMM_SELF, PETSC_ERR_SUP,
             "comm_allreduce_sum: %zu floats is too large for one call; use buckets", n);
  PetscCall(PetscMalloc3((size_t)P * chunk, &recv, P, &cnt, P, &dsp));
  for (int r = 0; r < P; r++) {
    size_t lo = PetscMin((size_t)r * chunk, n), hi = PetscMin(lo + chunk, n);
    cnt[r] = (int)(hi - lo);
    dsp[r] = (int)lo;
  }
  {
    int *rcnt, *rdsp;
    PetscCall(PetscMalloc2(P, &rcnt, P, &rdsp));
    for (int r = 0; r < P; r++) {
      rcnt[r] = cnt[c->rank];
      rdsp[r] = (int)(r * chunk);
    }
    PetscCallMPI(sys_mpi_alltoallv(buf, cnt, dsp, MPI_FLOAT, recv, rcnt, rdsp, MPI_FLOAT, c->mpi));
    for (int i = 0; i < cnt[c->rank]; i++) {
      float s = recv[i];
      for (int r = 1; r < P; r++) s += recv[(size_t)r * chunk + i];
      recv[i] = s;
    }
    PetscCallMPI(sys_mpi_allgatherv(recv, cnt[c->rank], MPI_FLOAT, buf, cnt, dsp, MPI_FLOAT, c->mpi));
    PetscCall(PetscFree2(rcnt, rdsp));
  }
  PetscCall(PetscFree3(recv, cnt, dsp));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_allreduce_sum(const Comm *c, float *buf, size_t n)
{
  char *h;

  PetscFunctionBegin;
  if (!member(c) || n == 0) PetscFunctionReturn(PETSC_SUCCESS);
#ifdef RLFUSE_HAVE_NCCL
  if (c->kind == COMM_NCCL) { /* gathers every copy, adds them in rank order: the bits above */
    CommCallNCCL(rfcuda_nccl_allreduce_sum(c->nccl, buf, n));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
#endif
  if (!dev_be) PetscCall(allreduce_sum_mpi(c, buf, n));
  else {
    PetscCall(stage_in(buf, n * sizeof(float), 0, n * sizeof(float), &h));
    PetscCall(allreduce_sum_mpi(c, (float *)h, n));
    PetscCall(stage_out(buf, &h, n * sizeof(float)));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Host scalars: gathered and summed in rank order on every member. */
PetscErrorCode comm_allreduce_sum_double(const Comm *c, double *buf, int n)
{
  double *all;

  PetscFunctionBegin;
  if (!member(c) || n == 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc1((size_t)n * c->size, &all));
  PetscCallMPI(sys_mpi_allgather(buf, n, MPI_DOUBLE, all, n, MPI_DOUBLE, c->mpi));
  for (int i = 0; i < n; i++) {
    double s = all[i];
    for (int r = 1; r < c->size; r++) s += all[(size_t)r * n + i];
    buf[i] = s;
  }
  PetscCall(PetscFree(all));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- all-gathers ------------------------------------------------------------------ */

PetscErrorCode comm_allgather_host(const Comm *c, const void *in, void *out, size_t bytes)
{
  PetscFunctionBegin;
  if (c->mpi == MPI_COMM_NULL) PetscFunctionReturn(PETSC_SUCCESS);
  if (c->size == 1) {
    if (out != in) PetscCall(PetscMemcpy(out, in, bytes));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCheck(bytes <= INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_SUP, "comm_allgather: %zu bytes is too large for one call",
             bytes);
  PetscCallMPI(sys_mpi_allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, c->mpi));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_allgather(const Comm *c, const void *in, void *out, size_t bytes)
{
  char *hin, *hout;

  PetscFunctionBegin;
  if (!dev_be) {
    PetscCall(comm_allgather_host(c, in, out, bytes));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (c->mpi == MPI_COMM_NULL) PetscFunctionReturn(PETSC_SUCCESS);
  if (c->size == 1) {
    if (out != in) PetscCall(dev_be->copy(out, in, bytes));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
#ifdef RLFUSE_HAVE_NCCL
  if (c->kind == COMM_NCCL) { /* each member's piece broadcast from its place in out, in rank order on every member */
    char *mine = (char *)out + (size_t)c->rank * bytes;
    if (mine != (const char *)in) PetscCall(dev_be->copy(mine, in, bytes));
    for (int r = 0; r < c->size; r++)
      CommCallNCCL(rfcuda_nccl_bcast(c->nccl, (char *)out + (size_t)r * bytes, bytes, r));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
#endif
  PetscCall(stage_in(in, bytes, 0, bytes, &hin));
  PetscCall(stage_in(out, (size_t)c->size * bytes, 0, 0, &hout));
  PetscCall(comm_allgather_host(c, hin, hout, bytes));
  PetscCall(stage_out(out, &hout, (size_t)c->size * bytes));
  PetscCall(PetscFree(hin));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_allgather_ranges_host(const Comm *c, float *buf, size_t n)
{
  int *cnt, *dsp;

  PetscFunctionBegin;
  if (!member(c) || n == 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(n <= INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_SUP,
             "comm_allgather_ranges: %zu floats is too large for one call", n);
  PetscCall(PetscMalloc2(c->size, &cnt, c->size, &dsp));
  for (int r = 0; r < c->size; r++) {
    size_t lo, hi;
    comm_own_range(n, r, c->size, &lo, &hi);
    cnt[r] = (int)(hi - lo);
    dsp[r] = (int)lo;
  }
  PetscCallMPI(sys_mpi_allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, dsp, MPI_FLOAT, c->mpi));
  PetscCall(PetscFree2(cnt, dsp));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_allgather_ranges(const Comm *c, float *buf, size_t n)
{
  size_t lo, hi;
  char  *h;

  PetscFunctionBegin;
  if (!dev_be) {
    PetscCall(comm_allgather_ranges_host(c, buf, n));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (!member(c) || n == 0) PetscFunctionReturn(PETSC_SUCCESS);
#ifdef RLFUSE_HAVE_NCCL
  if (c->kind == COMM_NCCL) { /* each owner broadcasts its range in place, in rank order on every member */
    for (int r = 0; r < c->size; r++) {
      comm_own_range(n, r, c->size, &lo, &hi);
      CommCallNCCL(rfcuda_nccl_bcast(c->nccl, buf + lo, (hi - lo) * sizeof(float), r));
    }
    PetscFunctionReturn(PETSC_SUCCESS);
  }
#endif
  comm_own_range(n, c->rank, c->size, &lo, &hi);
  PetscCall(stage_in(buf, n * sizeof(float), lo * sizeof(float), (hi - lo) * sizeof(float), &h));
  PetscCall(comm_allgather_ranges_host(c, (float *)h, n));
  PetscCall(stage_out(buf, &h, n * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- broadcast -------------------------------------------------------------------- */

PetscErrorCode comm_bcast_host(const Comm *c, void *buf, size_t bytes, int root)
{
  PetscFunctionBegin;
  if (!member(c) || bytes == 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(bytes <= INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_SUP, "comm_bcast: %zu bytes is too large for one call",
             bytes);
  PetscCallMPI(sys_mpi_bcast(buf, (int)bytes, MPI_BYTE, root, c->mpi));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_bcast(const Comm *c, void *buf, size_t bytes, int root)
{
  char *h;

  PetscFunctionBegin;
  if (!dev_be) {
    PetscCall(comm_bcast_host(c, buf, bytes, root));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (!member(c) || bytes == 0) PetscFunctionReturn(PETSC_SUCCESS);
#ifdef RLFUSE_HAVE_NCCL
  if (c->kind == COMM_NCCL) {
    CommCallNCCL(rfcuda_nccl_bcast(c->nccl, buf, bytes, root));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
#endif
  PetscCall(stage_in(buf, bytes, 0, c->rank == root ? bytes : 0, &h));
  PetscCall(comm_bcast_host(c, h, bytes, root));
  PetscCall(stage_out(buf, &h, c->rank == root ? 0 : bytes));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- point to point --------------------------------------------------------------- */

/* Host copies of device buffers being sent, each freed by the comm_wait that
 * finishes its request (MPI keeps request handles distinct while active). */
typedef struct StagedSend {
  MPI_Request        req;
  char              *host;
  struct StagedSend *next;
} StagedSend;

static StagedSend *staged = NULL;

PetscErrorCode comm_isend(const Comm *c, const void *buf, size_t bytes, int dest, int tag, MPI_Request *req)
{
  StagedSend *s;

  PetscFunctionBegin;
  PetscCheck(bytes <= INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_SUP, "comm_isend: %zu bytes is too large for one message",
             bytes);
  if (!dev_be) {
    PetscCallMPI(MPI_Isend(buf, (int)bytes, MPI_BYTE, dest, tag, c->mpi, req));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(PetscNew(&s));
  PetscCall(stage_in(buf, bytes, 0, bytes, &s->host));
  PetscCallMPI(MPI_Isend(s->host, (int)bytes, MPI_BYTE, dest, tag, c->mpi, &s->req));
  *req    = s->req;
  s->next = staged;
  staged  = s;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The sends of comm_isend_copy still in flight, each with its own copy. */
static StagedSend *copied = NULL;

/* Frees the copies of the completed ones (all: waits for every one). */
static PetscErrorCode copied_sweep(PetscBool all)
{
  StagedSend **p = &copied;

  PetscFunctionBegin;
  while (*p) {
    StagedSend *s    = *p;
    int         done = 1;

    if (all) PetscCallMPI(sys_mpi_finish(&s->req, MPI_STATUS_IGNORE));
    else PetscCallMPI(MPI_Test(&s->req, &done, MPI_STATUS_IGNORE));
    if (!done) {
      p = &s->next;
      continue;
    }
    *p = s->next;
    PetscCall(PetscFree(s->host));
    PetscCall(PetscFree(s));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_isend_copy(const Comm *c, const void *buf, size_t bytes, int dest, int tag)
{
  StagedSend *s;

  PetscFunctionBegin;
  PetscCheck(bytes <= INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_SUP,
             "comm_isend_copy: %zu bytes is too large for one message", bytes);
  PetscCall(copied_sweep(PETSC_FALSE));
  PetscCall(PetscNew(&s));
  if (dev_be) PetscCall(stage_in(buf, bytes, 0, bytes, &s->host));
  else {
    PetscCall(PetscMalloc1(bytes + 1, &s->host));
    PetscCall(PetscMemcpy(s->host, buf, bytes));
  }
  PetscCallMPI(MPI_Isend(s->host, (int)bytes, MPI_BYTE, dest, tag, c->mpi, &s->req));
  s->next = copied;
  copied  = s;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_recv(const Comm *c, void *buf, size_t bytes, int src, int tag)
{
  MPI_Status st;
  int        got;
  char      *h = NULL;

  PetscFunctionBegin;
  PetscCheck(bytes <= INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_SUP, "comm_recv: %zu bytes is too large for one message",
             bytes);
  if (dev_be) PetscCall(stage_in(buf, bytes, 0, 0, &h));
  PetscCallMPI(sys_mpi_recv(h ? (void *)h : buf, (int)bytes, MPI_BYTE, src, tag, c->mpi, &st));
  PetscCallMPI(MPI_Get_count(&st, MPI_BYTE, &got));
  if ((size_t)got != bytes) PetscCall(PetscFree(h));
  PetscCheck((size_t)got == bytes, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "comm_recv: expected %zu bytes from rank %d (tag %d), got %d", bytes, src, tag, got);
  if (h) PetscCall(stage_out(buf, &h, bytes));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_wait(MPI_Request *req)
{
  StagedSend **p = &staged, *s;

  PetscFunctionBegin;
  if (*req == MPI_REQUEST_NULL) PetscFunctionReturn(PETSC_SUCCESS);
  while (*p && (*p)->req != *req) p = &(*p)->next;
  PetscCallMPI(sys_mpi_finish(req, MPI_STATUS_IGNORE));
  if ((s = *p)) { /* a staged send: its host copy is free now */
    *p = s->next;
    PetscCall(PetscFree(s->host));
    PetscCall(PetscFree(s));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_free(Comm *c)
{
  PetscFunctionBegin;
#ifdef RLFUSE_HAVE_NCCL
  if (c->nccl) CommCallNCCL(rfcuda_nccl_destroy(c->nccl));
#endif
  c->nccl = NULL;
  c->kind = COMM_MPI;
  if (c->mpi != MPI_COMM_NULL) PetscCallMPI(MPI_Comm_free(&c->mpi));
  c->mpi = MPI_COMM_NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Node of every world rank: the smallest world rank sharing memory with it. */
static int *node_of = NULL, nworld = 0;

PetscErrorCode comm_setup(void)
{
  MPI_Comm shm;
  int      me, leader;

  PetscFunctionBegin;
  if (node_of) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCallMPI(MPI_Comm_size(MPI_COMM_WORLD, &nworld));
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  PetscCallMPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &shm));
  PetscCallMPI(sys_mpi_allreduce(&me, &leader, 1, MPI_INT, MPI_MIN, shm));
  PetscCall(sys_mpi_wait_setup(shm));
  PetscCallMPI(MPI_Comm_free(&shm));
  PetscCall(PetscMalloc1(nworld, &node_of));
  PetscCallMPI(sys_mpi_allgather(&leader, 1, MPI_INT, node_of, 1, MPI_INT, MPI_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_teardown(void)
{
  PetscFunctionBegin;
  PetscCall(copied_sweep(PETSC_TRUE)); /* before the communicators go */
  PetscCall(mesh_cache_destroy());
  PetscCall(PetscFree(node_of));
  nworld   = 0;
  dev_be   = NULL;
  use_nccl = PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_node_of(int world_rank, int *node)
{
  PetscFunctionBegin;
  PetscCheck(node_of, PETSC_COMM_SELF, PETSC_ERR_ORDER, "comm_node_of: call comm_setup first");
  PetscCheck(world_rank >= 0 && world_rank < nworld, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "comm_node_of: rank %d outside the world of %d", world_rank, nworld);
  *node = node_of[world_rank];
  PetscFunctionReturn(PETSC_SUCCESS);
}
