/* file_options.c: the options of src/ppo that name files, for the check of
 * the run's inputs and outputs before any work (io_files_check). */
#include "ppo.h"

const IoFileOption ppo_file_options[] = {
  {"-actor_checkpoint", IO_FILE_IN, NULL, NULL},
  {"-reference_checkpoint", IO_FILE_IN, NULL, NULL},
  {"-ppo_prompts", IO_FILE_IN, "builtin", NULL},
  {"-ppo_eval_file", IO_FILE_IN, NULL, NULL},
  {NULL, IO_FILE_IN, NULL, NULL},
};
