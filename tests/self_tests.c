/* tests/self_tests.c - the tests that compile the implementation themselves
   (they read its private functions and state), built as one program per
   group so the implementation is compiled once: SELF_GROUP_CPU (tensor.h)
   or SELF_GROUP_CUDA (with tensor_cuda.h). Each test file keeps its own
   main, renamed here; the Makefile links build/test_x to the group's
   program, which runs the test its name (argv[0]) or its first argument
   names. Each file still builds alone: cc -I. tests/test_x.c -lm -lpthread -ldl
   With SELF_OBJECT this file has no main, only th_self_main: the CPU group
   is compiled with -c into build/tensor_cpu.o, the one compiled
   implementation every other test links too, and tests/self_main.c makes
   it a program. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#if defined(SELF_GROUP_CPU)
/* test_function and test_alloc_fail hook the allocator (tests/alloc_hooks.h):
   they come first, before tensor.h. */
#define SELF_TESTS_LIST(X) X(test_alloc_fail) X(test_function) X(test_ew) X(test_linalg) X(test_threads) X(test_random)
#define main th_main_test_alloc_fail
#include "test_alloc_fail.c"
#undef main
#define main th_main_test_function
#include "test_function.c"
#undef main
#define main th_main_test_ew
#include "test_ew.c"
#undef main
#define main th_main_test_linalg
#include "test_linalg.c"
#undef main
#define main th_main_test_threads
#include "test_threads.c"
#undef main
#define main th_main_test_random
#include "test_random.c"
#undef main
#elif defined(SELF_GROUP_CUDA)
/* SELF_NO_GPU_TESTS (make sanitize) leaves out the tests that need a GPU
   or only hand kernels to NVRTC: their build is the group's largest part. */
#ifdef SELF_NO_GPU_TESTS
#define SELF_GPU_TESTS(X)
#else
#define SELF_GPU_TESTS(X) X(test_place_rewire) X(test_nvrtc) X(test_nvrtc_reduce) X(test_cuda) X(test_cuda_func) \
    X(test_cuda_reduce) X(test_cuda_multi) X(test_cuda_ops)
#endif
#define SELF_TESTS_LIST(X) X(test_profile) X(test_kcache) X(test_cuda_fallback) X(test_cuda_place) X(test_multi) SELF_GPU_TESTS(X)
#define main th_main_test_profile
#include "test_profile.c"
#undef main
#define main th_main_test_kcache
#include "test_kcache.c"
#undef main
#define main th_main_test_cuda_fallback
#include "test_cuda_fallback.c"
#undef main
#define main th_main_test_cuda_place
#include "test_cuda_place.c"
#undef main
#define main th_main_test_multi
#include "test_multi.c"
#undef main
#ifndef SELF_NO_GPU_TESTS
#define main th_main_test_place_rewire
#include "test_place_rewire.c"
#undef main
#define main th_main_test_nvrtc
#include "test_nvrtc.c"
#undef main
#define main th_main_test_nvrtc_reduce
#include "test_nvrtc_reduce.c"
#undef main
#define main th_main_test_cuda
#include "test_cuda.c"
#undef main
#define main th_main_test_cuda_func
#include "test_cuda_func.c"
#undef main
#define main th_main_test_cuda_reduce
#include "test_cuda_reduce.c"
#undef main
#define main th_main_test_cuda_multi
#include "test_cuda_multi.c"
#undef main
#define main th_main_test_cuda_ops
#include "test_cuda_ops.c"
#undef main
#endif
#else
#error "tests/self_tests.c: define SELF_GROUP_CPU or SELF_GROUP_CUDA"
#endif

#define SELF_TESTS_ROW(t) { #t, th_main_##t },
static const struct { const char *name; int (*run)(void); } self_tests[] = { SELF_TESTS_LIST(SELF_TESTS_ROW) };

int th_self_main(int argc, char **argv) {
    const char *name = strrchr(argv[0], '/');
    name = name ? name + 1 : argv[0];
    if (argc > 1) name = argv[1];
    for (size_t i = 0; i < sizeof self_tests / sizeof self_tests[0]; i++)
        if (strcmp(name, self_tests[i].name) == 0) return self_tests[i].run();
    fprintf(stderr, "%s: no test named '%s'; this program runs:", argv[0], name);
    for (size_t i = 0; i < sizeof self_tests / sizeof self_tests[0]; i++) fprintf(stderr, " %s", self_tests[i].name);
    fputc('\n', stderr);
    return 2;
}

#ifndef SELF_OBJECT
int main(int argc, char **argv) { return th_self_main(argc, argv); }
#endif
