/* PETSc log stages and events for each phase, so -log_view reports them with
 * min/max/ratio across ranks. */
#include "sys.h"

SysLog sys_log;

PetscErrorCode sys_log_register(void)
{
  PetscClassId cls;

  PetscFunctionBegin;
  PetscCall(PetscClassIdRegister("rlfuse", &cls));
  PetscCall(PetscLogStageRegister("SFT", &sys_log.sft));
  PetscCall(PetscLogStageRegister("Score", &sys_log.score));
  PetscCall(PetscLogStageRegister("RewardModel", &sys_log.rm));
  PetscCall(PetscLogStageRegister("PPO", &sys_log.ppo));
  PetscCall(PetscLogEventRegister("Data", cls, &sys_log.data));
  PetscCall(PetscLogEventRegister("Forward", cls, &sys_log.forward));
  PetscCall(PetscLogEventRegister("Backward", cls, &sys_log.backward));
  PetscCall(PetscLogEventRegister("Optimizer", cls, &sys_log.optimizer));
  PetscCall(PetscLogEventRegister("CkptWrite", cls, &sys_log.ckpt_write));
  PetscCall(PetscLogEventRegister("CkptRead", cls, &sys_log.ckpt_read));
  PetscCall(PetscLogEventRegister("Generate", cls, &sys_log.generate));
  PetscCall(PetscLogEventRegister("Inference", cls, &sys_log.inference));
  PetscCall(PetscLogEventRegister("Advantages", cls, &sys_log.advantages));
  PetscFunctionReturn(PETSC_SUCCESS);
}
