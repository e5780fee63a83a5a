/* io private: which part of a checkpoint's datasets one rank reads or
 * writes, and the transfer of that part through hyperslab selections in
 * bounded pieces (src/io/ckpt_shard.c). */
#ifndef RLFUSE_IO_CKPT_SHARD_H
#define RLFUSE_IO_CKPT_SHARD_H

#include "internal/h5util.h"

/* Writes /<src->as>_source (src/io/ckpt_source.c); collective on the file's ranks. */
PetscErrorCode ckpt_source_write(hid_t file, const CkptSource *src);

/* Floats staged in host memory per transfer: the bounded buffer (default
 * 2^22, 16 MiB). A variable so that tests can make it tiny and cross
 * every row, group and rank boundary. */
extern size_t ckpt_chunk;
/* MPI-IO transfer mode (h5u_dxpl_comm): -1 (default) collective across
 * nodes and independent within one, 1 collective, 0 independent; tests
 * force each. */
extern int ckpt_collective;

typedef struct {
  ModelConfig    cfg;         /* the same on every rank */
  const char    *role;        /* the model's group in the file, for messages */
  ModelTensor   *full;        /* the whole model's table (the file's datasets) */
  int            nfull;
  ModelTensor   *mine;        /* this rank's shard table (same order), NULL: holds nothing */
  PetscBool      own_table;   /* mine was allocated here */
  int            tp, t, p;    /* shard coordinates */
  size_t         n;           /* floats in the shard */
  size_t         own0, own1;  /* the shard's flat range this rank transfers */
  float         *params, *m, *v;
  PetscBool      zero1;       /* m, v hold only [own0, own1) */
  size_t         m0;          /* flat index of m[0], v[0] (ZeRO-1: own0) */
  const Backend *be;          /* copies to and from params/m/v; NULL: host memory */
  const Comm    *dp_comm;     /* replicas that share what each read (dp > 1) */
  int64_t        step;        /* optimizer steps (write: agreed on every rank) */
  int           *rounds;      /* [nfull]: transfers per dataset, the maximum over ranks */
  PetscBool      write;
} CkptPlace;

/* Collective on comm (where may be NULL). write: what this rank writes (each element once over
 * all ranks); else what it reads. */
PetscErrorCode ckpt_place_setup(MPI_Comm comm, const CkptModel *cm, const CkptWhere *where, PetscBool write,
                                CkptPlace *pl);
PetscErrorCode ckpt_place_destroy(CkptPlace *pl);
/* Collective on comm: tensor i of buffer which (0 params, 1 m, 2 v) to or
 * from dataset dset, in pl->rounds[i] transfers of at most ckpt_chunk floats
 * through buf. Every rank makes every transfer, an empty one if it has
 * nothing (collective MPI-IO); the first error is returned at the end. */
PetscErrorCode ckpt_place_xfer(const CkptPlace *pl, int i, int which, hid_t dset, hid_t dxpl, float *buf);
/* After a read: the dp replicas exchange the ranges each read (collective
 * over the model's mesh); moments only without ZeRO-1. */
PetscErrorCode ckpt_place_share(CkptPlace *pl, PetscBool optim);

#endif
