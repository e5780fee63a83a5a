/* arch.c: the architecture table. A row names what one model family does
 * differently (norm, positions, MLP, biases, q/k norms, tensor names, head
 * tying, which shape settings it reads); src/model, the checkpoints and the
 * cost model ask these fields rather than which family a model is, so a
 * family that differs only in them is one more row here (and its name in
 * ModelArchNames, in the same place: -<role>_arch and the checkpoints'
 * arch attribute take these names). */
#include "model_impl.h"

const ModelArchRow model_archs[MODEL_ARCH_COUNT] = {
  [MODEL_ARCH_GPT2]  = { "gpt2", MODEL_NORM_LAYER, MODEL_POS_LEARNED, MODEL_MLP_GELU, MODEL_LAYOUT_CONV1D, PETSC_TRUE,
                         PETSC_FALSE, MODEL_TIE_ALWAYS, PETSC_FALSE, "GPT-2" },
  [MODEL_ARCH_LLAMA] = { "llama", MODEL_NORM_RMS, MODEL_POS_ROTARY, MODEL_MLP_SWIGLU, MODEL_LAYOUT_LINEAR, PETSC_FALSE,
                         PETSC_TRUE, MODEL_TIE_OPTION, PETSC_TRUE,
                         "the LLaMA family: Llama, Mistral, Qwen2, Qwen3, SmolLM2" },
};
/* The same names as PETSc's enum list (options and checkpoint attributes);
 * test_model checks they match the rows. */
const char *const ModelArchNames[] = {"gpt2", "llama", "ModelArch", "MODEL_ARCH_", NULL};
_Static_assert(sizeof ModelArchNames / sizeof ModelArchNames[0] == MODEL_ARCH_COUNT + 3,
               "ModelArchNames: one name per row of model_archs");
