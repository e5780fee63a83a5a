/* env/options.c: the -env_ options. src/env owns the prefix: each option
 * has one default and one check here; the RL job receives the values. */
#include "env.h"
#include <string.h>

const char *const EnvRewardAtNames[] = {"end", "turn"};

PetscBool env_on(const EnvOptions *o) { return (PetscBool)(strcmp(o->kind, "none") != 0); }

PetscErrorCode env_options_from_options(EnvOptions *o)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(o, sizeof *o));
  PetscCall(PetscStrncpy(o->kind, "none", sizeof o->kind));
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "Environments", NULL);
  RfOptString("-env",
              "The environment of multi-turn episodes (docs/environments.md): none, calc (the arithmetic task's "
              "built-in calculator) or command (a program, -env_command)",
              o->kind, sizeof o->kind);
  PetscOptionsEnd();
  PetscOptionsBegin(PETSC_COMM_WORLD, "env_", "Environments", NULL);
  RfOptString("-command", "The environment program (with -env command), started -env_procs times through /bin/sh",
              o->command, sizeof o->command);
  RfOptInt("-procs", "Processes of the environment program; each serves one request at a time", 4, &o->procs);
  RfOptReal("-timeout", "Seconds an environment request may take", 60.0, &o->timeout);
  RfOptInt("-max_turns", "The model's segments per episode (a turn stop in the last ends the episode)", 4,
           &o->max_turns);
  RfOptInt("-max_obs_tokens", "Tokens kept of an environment's answer (the rest cut, counted in the record)", 256,
           &o->max_obs);
  RfOptInt("-max_turn_tokens",
           "Tokens of a model turn: a segment this long ends its turn and calls the environment as a turn stop does "
           "(0: no bound)",
           0, &o->max_turn_tokens);
  RfOptInt("-lag_steps",
           "Engine steps from the end of a model turn to the step that prefills its answer (the schedule of "
           "episodes: fixed in steps, so results do not depend on the environment's latency)",
           2, &o->lag);
  RfOptString("-turn_stop",
              "Token ids that end a model turn and call the environment, ID[,ID...] (default: calc's '=', else the "
              "run's -gen_stop tokens, else its EOS: a chat model's end of turn)",
              o->turn_stop, sizeof o->turn_stop);
  RfOptEnum("-reward_at",
            "Where the environment's step rewards enter the per-token rewards of -algo ppo and reinforce_pp: end (with "
            "the final score, at the episode's last model token) or turn (each at the last model token of the turn "
            "it answered, so that GAE and the returns credit the turn that earned it)",
            EnvRewardAtNames, 2, &o->reward_at);
  PetscOptionsEnd();
  PetscCheck(!strcmp(o->kind, "none") || !strcmp(o->kind, "calc") || !strcmp(o->kind, "command"), PETSC_COMM_WORLD,
             PETSC_ERR_ARG_WRONG, "-env '%s' must be none, calc or command", o->kind);
  PetscCheck(strcmp(o->kind, "command") || o->command[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
             "-env command needs -env_command \"PROGRAM\" (docs/environments.md)");
  { /* a program without -env is a forgotten -env command; -env none given switches it off on purpose (a deck's run
       without its environment) */
    PetscBool named;
    PetscCall(PetscOptionsHasName(NULL, NULL, "-env", &named));
    PetscCheck(!o->command[0] || named, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
               "-env_command is given but not -env; say -env command (or -env none to run without it)");
    PetscCheck(!o->command[0] || strcmp(o->kind, "calc"), PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
               "-env_command is given with -env calc, the built-in calculator; say -env command to run the program");
  }
  PetscCheck(o->procs >= 1 && o->procs <= 1024, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-env_procs %" PetscInt_FMT " must be in [1, 1024]", o->procs);
  PetscCheck(o->timeout > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-env_timeout %g must be positive",
             (double)o->timeout);
  PetscCheck(o->max_turns >= 1 && o->max_turns <= 1000, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-env_max_turns %" PetscInt_FMT " must be in [1, 1000]", o->max_turns);
  PetscCheck(o->max_obs >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-env_max_obs_tokens %" PetscInt_FMT " must be >= 1", o->max_obs);
  PetscCheck(o->max_turn_tokens >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-env_max_turn_tokens %" PetscInt_FMT " must be >= 0 (0: no bound)", o->max_turn_tokens);
  PetscCheck(o->lag >= 1 && o->lag <= 1000, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-env_lag_steps %" PetscInt_FMT " must be in [1, 1000]", o->lag);
  PetscFunctionReturn(PETSC_SUCCESS);
}
