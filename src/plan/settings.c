/* plan: the plan's settings as one table. A setting is a value of the whole
 * plan beside its calls' meshes (offload, ZeRO-1, the bucket, the fusion
 * options): its option, its attribute in /plan, its kind, default and range
 * are one row here, and that row drives the preset's default, reading the
 * option, writing and reading the plan file, copying from a file's plan and
 * the range checks of both the option and the file. Adding a setting is
 * adding a row (and its field in Plan). */
#include "plan_impl.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FRACTION: a fraction in [lo, hi] or "auto" (stored as -1); its option is a
 * string so that "auto" can be given. */
typedef enum { PLAN_SET_BOOL, PLAN_SET_INT, PLAN_SET_REAL, PLAN_SET_ENUM, PLAN_SET_FRACTION } PlanSettingKind;

typedef struct {
  const char         *prefix, *option; /* the option is -<prefix><option without its dash> */
  const char         *attr;            /* the attribute of /plan */
  PlanSettingKind     kind;
  size_t              offset;          /* of the field in Plan: PetscBool, int, double, or an enum */
  double              def, lo, hi;     /* default and closed range (REAL: lo excluded) */
  const char *const  *names;           /* ENUM: PETSc's list */
  PetscBool           since_fusion;    /* absent from files written before fusion existed: the default */
  const char         *help;
} PlanSetting;

static const PlanSetting plan_settings[] = {
  { "plan_", "-offload", "offload", PLAN_SET_BOOL, offsetof(Plan, offload), 0, 0, 1, NULL, PETSC_FALSE,
    "Offload frozen models to host memory between calls when their meshes overlap" },
  { "plan_", "-zero1", "zero1", PLAN_SET_BOOL, offsetof(Plan, zero1), 0, 0, 1, NULL, PETSC_FALSE,
    "ZeRO-1: shard the AdamW moments over the dp replicas of the training calls" },
  /* bytes are a size_t: a bucket beyond 2^40 MiB would not convert */
  { "plan_", "-bucket_mb", "bucket_mb", PLAN_SET_REAL, offsetof(Plan, bucket_mb), 16, 0, 1099511627776.0, NULL,
    PETSC_FALSE, "Gradient all-reduce and weight-sync bucket (MiB)" },
  { "fuse_", "-gen_inf", "fuse_gen_inf", PLAN_SET_ENUM, offsetof(Plan, fuse), FUSE_NONE, FUSE_NONE, FUSE_MIGRATE,
    FuseModeNames, PETSC_TRUE,
    "Fuse generation and inference: none, stream (finished samples go to inference at once) or migrate (stream, and "
    "the long tail moves with its KV caches to fewer generation replicas, whose freed ranks run inference)" },
  { "fuse_", "-migrate_at", "fuse_migrate_at", PLAN_SET_FRACTION, offsetof(Plan, migrate_at), 0.2, 0, 1, NULL,
    PETSC_TRUE,
    "Migrate the unfinished samples when they fall to this fraction of the batch (0..1), or auto (from the previous "
    "iterations' lengths)" },
  { "fuse_", "-migrate_replicas", "fuse_migrate_replicas", PLAN_SET_INT, offsetof(Plan, migrate_to), 0, 0,
    PLAN_MAX_RANKS, NULL, PETSC_TRUE,
    "Generation replicas the tail migrates onto (0: the fewest whose slots hold it; never fewer than its running "
    "samples need)" },
  { "fuse_", "-tokens", "fuse_tokens", PLAN_SET_INT, offsetof(Plan, fuse_tokens), 2048, 1, 1 << 30, NULL, PETSC_TRUE,
    "Token budget of a streamed inference micro-batch (runs when full or when generation ends)" },
  { "fuse_", "-hold", "fuse_hold", PLAN_SET_BOOL, offsetof(Plan, fuse_hold), 0, 0, 1, NULL, PETSC_TRUE,
    "Streamed samples wait until generation has ended before inference runs on them, in the same micro-batches "
    "(measures batching without overlap)" },
  { "fuse_", "-train", "fuse_train", PLAN_SET_BOOL, offsetof(Plan, fuse_train), 0, 0, 1, NULL, PETSC_TRUE,
    "PPO: train the critic on the actor_train ranks with the opposite pipeline direction (replicated when "
    "-critic_train_pp is smaller), both models' micro-batches interleaved by a fused schedule" },
};
#define PLAN_NSETTINGS ((int)(sizeof plan_settings / sizeof plan_settings[0]))

static double plan_setting_get(const Plan *plan, const PlanSetting *s)
{
  const char *p = (const char *)plan + s->offset;

  switch (s->kind) {
  case PLAN_SET_BOOL: return *(const PetscBool *)p ? 1 : 0;
  case PLAN_SET_REAL:
  case PLAN_SET_FRACTION: return *(const double *)p;
  default: return *(const int *)p; /* INT and ENUM (an enum is an int) */
  }
}

static void plan_setting_set(Plan *plan, const PlanSetting *s, double v)
{
  char *p = (char *)plan + s->offset;

  switch (s->kind) {
  case PLAN_SET_BOOL: *(PetscBool *)p = v != 0 ? PETSC_TRUE : PETSC_FALSE; break;
  case PLAN_SET_REAL:
  case PLAN_SET_FRACTION: *(double *)p = v; break;
  default: *(int *)p = (int)v; break;
  }
}

/* The setting's range, for the option's and the file's messages alike. */
static PetscBool plan_setting_valid(const PlanSetting *s, double v)
{
  switch (s->kind) {
  case PLAN_SET_REAL: return v > s->lo && v <= s->hi ? PETSC_TRUE : PETSC_FALSE;
  case PLAN_SET_FRACTION: return v == -1 || (v >= s->lo && v <= s->hi) ? PETSC_TRUE : PETSC_FALSE;
  default: return v == (int)v && v >= s->lo && v <= s->hi ? PETSC_TRUE : PETSC_FALSE;
  }
}

static const char *plan_setting_range(const PlanSetting *s, char *buf, size_t len)
{
  if (s->kind == PLAN_SET_REAL) snprintf(buf, len, "a positive number up to %g", s->hi);
  else if (s->kind == PLAN_SET_FRACTION)
    snprintf(buf, len, "a fraction in [%g,%g] or auto (-1 in a file)", s->lo, s->hi);
  else snprintf(buf, len, "a whole number in [%d, %d]", (int)s->lo, (int)s->hi);
  return buf;
}

void plan_settings_default(Plan *plan)
{
  for (int i = 0; i < PLAN_NSETTINGS; i++) plan_setting_set(plan, &plan_settings[i], plan_settings[i].def);
}

void plan_settings_copy(Plan *dst, const Plan *src)
{
  for (int i = 0; i < PLAN_NSETTINGS; i++)
    plan_setting_set(dst, &plan_settings[i], plan_setting_get(src, &plan_settings[i]));
}

/* "auto" or a number in the setting's range; anything else names the option. */
static PetscErrorCode plan_fraction_parse(const PlanSetting *s, const char *str, double *v)
{
  char  *end;
  double x;

  PetscFunctionBegin;
  if (!strcmp(str, "auto")) {
    *v = -1;
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  x = strtod(str, &end);
  PetscCheck(end != str && !*end, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
             "-%s%s %s: expected a fraction in [%g,%g] or auto", s->prefix, s->option + 1, str, s->lo, s->hi);
  *v = x;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One setting's option, inside the PetscOptionsBegin/End of its prefix. */
static PetscErrorCode plan_setting_option(PetscOptionItems *PetscOptionsObject, const PlanSetting *s, double *v)
{
  PetscFunctionBegin;
  if (s->kind == PLAN_SET_BOOL) {
    PetscBool b = *v != 0 ? PETSC_TRUE : PETSC_FALSE;
    RfOptBool(s->option, s->help, b, &b);
    *v = b;
  } else if (s->kind == PLAN_SET_INT) {
    PetscInt i = (PetscInt)*v;
    RfOptInt(s->option, s->help, i, &i);
    *v = (double)i;
  } else if (s->kind == PLAN_SET_REAL) {
    PetscReal r = *v;
    RfOptReal(s->option, s->help, r, &r);
    *v = r;
  } else if (s->kind == PLAN_SET_ENUM) {
    PetscInt e = (PetscInt)*v;
    int      n = 0;
    while (s->names[n + 2]) n++; /* PETSc's list ends with the type name, the prefix and NULL */
    RfOptEnum(s->option, s->help, s->names, n, &e);
    *v = (double)e;
  } else {
    char str[64];
    if (*v < 0) snprintf(str, sizeof str, "auto");
    else snprintf(str, sizeof str, "%g", *v);
    RfOptString(s->option, s->help, str, sizeof str);
    RfOptCall(plan_fraction_parse(s, str, v));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static const char *plan_settings_title(const char *prefix)
{
  return !strcmp(prefix, "plan_") ? "Execution plan settings"
                                  : "Fusion of generation and inference, and of actor and critic training";
}

PetscErrorCode plan_settings_from_options(Plan *plan, PetscBool *any)
{
  static const char *const prefixes[] = {"plan_", "fuse_"};
  double                   v[PLAN_NSETTINGS];

  PetscFunctionBegin;
  for (int k = 0; k < 2; k++) {
    PetscOptionsBegin(PETSC_COMM_WORLD, prefixes[k], plan_settings_title(prefixes[k]), NULL);
    for (int i = 0; i < PLAN_NSETTINGS; i++) {
      const PlanSetting *s = &plan_settings[i];
      PetscBool          given;

      if (strcmp(s->prefix, prefixes[k])) continue;
      RfOptCall(sys_option_given(s->prefix, s->option, &given));
      if (given) *any = PETSC_TRUE;
      v[i] = plan_setting_get(plan, s);
      PetscCall(plan_setting_option(PetscOptionsObject, s, &v[i])); /* it ends the block itself on an error */
    }
    PetscOptionsEnd();
  }
  for (int i = 0; i < PLAN_NSETTINGS; i++) {
    const PlanSetting *s = &plan_settings[i];
    char               range[96], value[32];

    snprintf(value, sizeof value, "%g", v[i]); /* PETSc's %g prints 16 as "16." */
    PetscCheck(plan_setting_valid(s, v[i]), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "-%s%s %s is out of range (expected %s)", s->prefix, s->option + 1, value,
               plan_setting_range(s, range, sizeof range));
    plan_setting_set(plan, s, v[i]);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

int plan_settings_attrs(const Plan *plan, const char **names, double *values)
{
  for (int i = 0; i < PLAN_NSETTINGS; i++) {
    names[i]  = plan_settings[i].attr;
    values[i] = plan_setting_get(plan, &plan_settings[i]);
  }
  return PLAN_NSETTINGS;
}

/* Written as doubles; a hand-made file (h5py) may hold integers. */
static PetscErrorCode plan_attr_number(IoId obj, const char *where, const char *name, double *x)
{
  IoClass cls;

  PetscFunctionBegin;
  PetscCall(io_attr_class(obj, where, name, &cls));
  if (cls == IO_CLASS_INT) {
    int64_t i;

    PetscCall(io_attr_read_int(obj, where, name, INT64_MIN, INT64_MAX, &i));
    *x = (double)i;
  } else PetscCall(io_attr_read_double(obj, where, name, x));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode plan_attr_int(IoId obj, const char *where, const char *name, int lo, int hi, int *v)
{
  double x;

  PetscFunctionBegin;
  PetscCheck(io_attr_exists(obj, name), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s has no attribute %s", where,
             name);
  PetscCall(plan_attr_number(obj, where, name, &x));
  PetscCheck(x == (int)x && x >= lo && x <= hi, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: attribute %s is %g, expected a whole number in [%d, %d]", where, name, x, lo, hi);
  *v = (int)x;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode plan_settings_read(IoId g, const char *where, Plan *plan)
{
  PetscFunctionBegin;
  for (int i = 0; i < PLAN_NSETTINGS; i++) {
    const PlanSetting *s = &plan_settings[i];
    char               range[96];
    double             x = s->def;

    if (io_attr_exists(g, s->attr)) PetscCall(plan_attr_number(g, where, s->attr, &x));
    else
      PetscCheck(s->since_fusion, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s has no attribute %s", where, s->attr);
    PetscCheck(plan_setting_valid(s, x), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "%s: attribute %s is %g, expected %s", where, s->attr, x, plan_setting_range(s, range, sizeof range));
    plan_setting_set(plan, s, x);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
