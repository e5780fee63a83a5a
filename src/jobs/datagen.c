/* Dataset generation (-mode data): writes the built-in task's prompts with
 * demonstrations as an HDF5 dataset, the same format users supply their own
 * data in (docs/formats.md). */
#include "jobs.h"

PetscErrorCode data_run(const RunCtx *run)
{
  BuiltinTask  task;
  TokenData d;
  PetscInt  count = 1000, split = TASK_SPLIT_TRAIN;
  char      output[PETSC_MAX_PATH_LEN] = "";
  PetscBool help;
  const char *const splits[] = {"train", "eval", "TaskSplit", "TASK_SPLIT_", NULL};

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, "data_", "Dataset generation (-mode data)", NULL);
  RfOptString("-output", "HDF5 file to write", output, sizeof output);
  RfOptInt("-count", "Number of samples", 1000, &count);
  RfOptEnum("-split", "Which prompts: train or the held-out eval set", splits, 2, &split);
  PetscOptionsEnd();
  PetscCall(task_set_from_options(&task));
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(sys_options_check_unused());
  PetscCheck(output[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-mode data needs -data_output FILE");
  PetscCheck(count > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-data_count %" PetscInt_FMT " must be positive", count);
  PetscCall(task_check(&task, task_vocab_size(&task), task_max_demo(&task), ""));
  PetscCall(io_output_check(run->comm, "-data_output", output, NULL, 0));
  if (run->dry_run) PetscFunctionReturn(PETSC_SUCCESS);
  d.N          = (int)count;
  d.T          = task_max_demo(&task);
  d.vocab_size = task_vocab_size(&task);
  PetscCall(PetscCalloc3((size_t)d.N * d.T, &d.tokens, d.N, &d.lengths, d.N, &d.prompt_lengths));
  for (int i = 0; i < d.N; i++) d.lengths[i] = task_demo(&task, (TaskSplit)split, (uint64_t)i, d.tokens + (size_t)i * d.T, &d.prompt_lengths[i]);
  PetscCall(data_write(run->comm, output, &d, task_name(&task)));
  PetscCall(PetscPrintf(run->comm, "data: %d %s samples of the %s task -> %s\n", d.N, splits[split], task_name(&task), output));
  PetscCall(PetscFree3(d.tokens, d.lengths, d.prompt_lengths));
  PetscFunctionReturn(PETSC_SUCCESS);
}
