// Lesson 10: exercise.cu compiled a second time, for sm_90a only, for exercise 3 (wgmma and
// setmaxnreg exist only in that architecture-specific target; exercise.cu's own compilation is
// for your GPU's architecture). LESSON10_EXERCISE_SM90A selects exercise.cu's exercise 3 section,
// which ends by including exercise_kernels_sm90.cuh. LESSON10_EXERCISE_FILE is the file the
// exercise build compiles (exercise.cu, or the cache variable LESSON_EXERCISE_SOURCE_10): set by
// CMakeLists.txt. Nothing to edit here.
#define LESSON10_EXERCISE_SM90A 1
#ifdef LESSON10_EXERCISE_FILE
#include LESSON10_EXERCISE_FILE
#else
#include "exercise.cu"
#endif
