/* cost/timeline.c: a simulated run's timeline written as a run records its
 * own (/timeline of docs/formats.md), so tools/plot_timeline.py draws a
 * simulated iteration beside a measured one. */
#include "cost_impl.h"

typedef struct {
  const CostTimeline *tl;
  const char         *source;
} TlWrite;

static PetscErrorCode tl_column(IoId g, const char *name, IoType file_type, IoType mem_type, int n, const void *data)
{
  IoSize dim = (IoSize)n;

  PetscFunctionBegin;
  PetscCall(io_dataset_write(g, name, file_type, mem_type, 1, &dim, data));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode tl_fill(IoId file, void *ctx)
{
  const TlWrite      *x  = ctx;
  const CostTimeline *tl = x->tl;
  char                list[16 * 33] = "";
  IoId                g;

  PetscFunctionBegin;
  for (int k = 0; k < tl->nnames; k++) {
    if (k) PetscCall(PetscStrlcat(list, " ", sizeof list));
    PetscCall(PetscStrlcat(list, tl->names[k], sizeof list));
  }
  PetscCall(io_group_create(file, "simulated timeline", "timeline", &g));
  PetscCall(io_attr_write_string(g, "calls", list));
  PetscCall(io_attr_write_string(g, "source", x->source ? x->source : "simulated"));
  PetscCall(tl_column(g, "rank", IO_I32LE, IO_INT, tl->n, tl->rank));
  PetscCall(tl_column(g, "step", IO_I64LE, IO_LLONG, tl->n, tl->step));
  PetscCall(tl_column(g, "call", IO_I32LE, IO_INT, tl->n, tl->call));
  PetscCall(tl_column(g, "start", IO_F64LE, IO_DOUBLE, tl->n, tl->start));
  PetscCall(tl_column(g, "end", IO_F64LE, IO_DOUBLE, tl->n, tl->end));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_timeline_write(const char *path, const CostTimeline *tl, const char *source)
{
  TlWrite x = {tl, source};

  PetscFunctionBegin;
  PetscCall(io_write_atomic("simulated timeline", path, tl_fill, &x));
  PetscFunctionReturn(PETSC_SUCCESS);
}
