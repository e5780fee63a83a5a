/* texts.h: the per-row texts of a token dataset (IOTexts, inc/io.h), read
 * inside src/io (src/io/texts.c). */
#ifndef RLFUSE_INTERNAL_TEXTS_H
#define RLFUSE_INTERNAL_TEXTS_H

#include "io.h"
#include <hdf5.h>

/* Reads <name>_bytes and <name>_offsets of an open file when present (t
 * zeroed when neither is); errors name `where` and the dataset. */
PetscErrorCode io_texts_read(hid_t file, const char *where, const char *name, int N, IOTexts *t);
/* Rank 0's texts to every rank of comm. */
PetscErrorCode io_texts_bcast(MPI_Comm comm, int N, IOTexts *t);
PetscErrorCode io_texts_free(IOTexts *t);

#endif
