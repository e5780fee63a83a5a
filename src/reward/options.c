/* reward: the -reward_ options. src/reward owns the prefix, so each option
 * has one default and one check; PPO receives the values. */
#include "reward.h"

/* The file it reads, for io_files_check. */
const IoFileOption reward_file_options[] = {
  {"-reward_checkpoint", IO_FILE_IN, NULL, NULL},
  {NULL, IO_FILE_IN, NULL, NULL},
};

PetscErrorCode reward_options_from_options(RewardOptions *r)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(r, sizeof *r));
  PetscOptionsBegin(PETSC_COMM_WORLD, "reward_", "Rewards", NULL);
  RfOptString("-checkpoint", "Reward-model checkpoint (role reward); optional with -reward_fn or -reward_command",
              r->checkpoint, sizeof r->checkpoint);
  RfOptString("-fn",
              "Rule rewards on the response text, summed with weights: NAME[:WEIGHT],... of numeric (the last number "
              "or \\boxed{} answer equals the reference), exact (the response is the reference), format (an answer is "
              "stated and the response ended), length (0 up to -reward_length_start tokens, then down to -1 at "
              "-gen_max_new_tokens)",
              r->fn, sizeof r->fn);
  RfOptInt("-length_start",
           "The length reward's last unpenalised response length, in tokens (default: half of -gen_max_new_tokens)", -1,
           &r->length_start);
  RfOptReal("-model_weight", "The reward model's weight in the reward (with -reward_checkpoint)", 1.0,
            &r->model_weight);
  RfOptString("-command",
              "A reward program, started once through /bin/sh: it reads one JSON line per batch of samples and writes "
              "one number per sample (docs/rewards.md)",
              r->command, sizeof r->command);
  RfOptReal("-command_weight", "The reward command's weight in the reward", 1.0, &r->command_weight);
  RfOptReal("-command_timeout", "Seconds the reward command may take for one batch", 600.0, &r->command_timeout);
  PetscOptionsEnd();
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode reward_options_check(RewardOptions *r, PetscInt max_new_tokens)
{
  PetscFunctionBegin;
  PetscCall(reward_spec_parse("-reward_fn", r->fn, &r->spec));
  if (r->length_start < 0) r->length_start = max_new_tokens / 2;
  PetscCheck(r->model_weight >= 0 && r->command_weight >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-reward_model_weight and -reward_command_weight must be >= 0");
  PetscCheck(r->command_timeout > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-reward_command_timeout %g must be positive", (double)r->command_timeout);
  PetscCheck(r->length_start >= 0 && r->length_start <= max_new_tokens, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-reward_length_start %" PetscInt_FMT " must be in [0, -gen_max_new_tokens %" PetscInt_FMT "]",
             r->length_start, max_new_tokens);
  PetscFunctionReturn(PETSC_SUCCESS);
}
