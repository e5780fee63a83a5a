/* exec: the dataflow graph (inc/exec.h). Levels come from the data keys; in
 * each level a rank runs the nodes on its meshes in the order given, then
 * every rank takes part in every node's share. Nodes of one level on
 * disjoint meshes therefore run at the same time. A late node runs in the
 * last level (before that level's other nodes on a rank it shares with
 * them, when listed first) and shares after it: it runs beside the nodes
 * that end the graph on other meshes. */
#include "exec.h"
#include "io.h"
#include <limits.h>
#include <string.h>

static int key_index(const char *const *keys, int n, const char *k)
{
  for (int i = 0; i < n; i++)
    if (!strcmp(keys[i], k)) return i;
  return -1;
}

/* Kahn's algorithm a level at a time; keys/key_level have room for every key. */
static PetscErrorCode levels(const ExecNode *nodes, int n, const char *const *given, const char **keys, int *key_level,
                             int *level, int *nlevels)
{
  int nkeys = 0, done = 0;

  PetscFunctionBegin;
  for (int k = 0; given && given[k]; k++) {
    keys[nkeys]        = given[k];
    key_level[nkeys++] = -1;
  }
  for (int i = 0; i < n; i++) {
    level[i] = -1;
    for (int j = 0; j < EXEC_MAX_KEYS && nodes[i].out[j]; j++) {
      PetscCheck(key_index(keys, nkeys, nodes[i].out[j]) < 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
                 "dataflow graph: '%s' is produced by %s and by another node or given", nodes[i].out[j], nodes[i].name);
      keys[nkeys]        = nodes[i].out[j];
      key_level[nkeys++] = INT_MAX; /* not yet available */
    }
  }
  *nlevels = 0;
  while (done < n) {
    int progress = 0, waiting = 0;
    for (int i = 0; i < n; i++) {
      int ready = 1;
      if (level[i] >= 0) continue;
      for (int j = 0; j < EXEC_MAX_KEYS && nodes[i].in[j]; j++) {
        int k = key_index(keys, nkeys, nodes[i].in[j]);
        PetscCheck(k >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
                   "dataflow graph: %s needs '%s', which no node produces", nodes[i].name, nodes[i].in[j]);
        if (key_level[k] >= *nlevels) ready = 0; /* produced in this level or later */
      }
      if (ready) level[i] = *nlevels, progress++;
      else waiting = i;
    }
    PetscCheck(progress, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
               "dataflow graph: the remaining nodes wait on each other (a cycle), e.g. %s", nodes[waiting].name);
    for (int i = 0; i < n; i++) {
      if (level[i] != *nlevels) continue;
      for (int j = 0; j < EXEC_MAX_KEYS && nodes[i].out[j]; j++)
        key_level[key_index(keys, nkeys, nodes[i].out[j])] = *nlevels;
      done++;
    }
    (*nlevels)++;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode exec_graph_levels(const ExecNode *nodes, int n, const char *const *given, int *level, int *nlevels)
{
  const char   **keys;
  int           *key_level, cap = 0;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  for (int k = 0; given && given[k]; k++) cap++;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < EXEC_MAX_KEYS && nodes[i].out[j]; j++) cap++;
  PetscCall(PetscMalloc2(cap + 1, &keys, cap + 1, &key_level));
  ierr = levels(nodes, n, given, keys, key_level, level, nlevels);
  PetscCall(PetscFree2(keys, key_level));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode exec_graph_run(const ExecNode *nodes, int n, const char *const *given, double *seconds)
{
  int    *level, nlevels;
  double *t;

  PetscFunctionBegin;
  for (int i = 0; i < n; i++) /* a late node's outputs exist only after the last level */
    for (int j = 0; nodes[i].late && j < EXEC_MAX_KEYS && nodes[i].out[j]; j++)
      for (int k = 0; k < n; k++)
        for (int q = 0; q < EXEC_MAX_KEYS && nodes[k].in[q]; q++)
          PetscCheck(strcmp(nodes[k].in[q], nodes[i].out[j]), PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
                     "dataflow graph: %s needs '%s' of %s, whose share is late", nodes[k].name, nodes[i].out[j],
                     nodes[i].name);
  PetscCall(PetscMalloc2(n + 1, &level, n + 1, &t));
  PetscCall(exec_graph_levels(nodes, n, given, level, &nlevels));
  for (int i = 0; i < n; i++) /* a late node runs in the last level, beside the nodes that end the graph */
    if (nodes[i].late) level[i] = nlevels - 1;
  for (int lv = 0; lv < nlevels; lv++) {
    for (int i = 0; i < n; i++) {
      double t0 = sys_wtime();
      t[i] = level[i] == lv ? 0.0 : t[i];
      if (level[i] != lv || !nodes[i].here || !nodes[i].run) continue;
      PetscCall(nodes[i].run(nodes[i].ctx));
      t[i] = sys_wtime() - t0;
      if (!nodes[i].marks) PetscCall(timeline_mark(nodes[i].name, t0, t0 + t[i]));
    }
    for (int i = 0; i < n; i++)
      if (level[i] == lv && nodes[i].share && !nodes[i].late) PetscCall(nodes[i].share(nodes[i].ctx));
  }
  for (int i = 0; i < n; i++)
    if (nodes[i].share && nodes[i].late) PetscCall(nodes[i].share(nodes[i].ctx));
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, t, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  if (seconds) PetscCall(PetscArraycpy(seconds, t, n));
  PetscCall(PetscFree2(level, t));
  PetscFunctionReturn(PETSC_SUCCESS);
}
