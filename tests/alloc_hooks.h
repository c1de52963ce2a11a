/* tests/alloc_hooks.h - the library's allocator hooked (TN_MALLOC,
   TN_REALLOC, TN_FREE): every allocation and reallocation is counted in
   th_alloc_count, the blocks still live in th_alloc_live, and the
   th_alloc_fail_at-th call (counted from the last reset of th_alloc_count;
   -1: none) fails. Include before tensor.h where the implementation is
   compiled (tests/self_tests.c includes the tests that use it first). */
#ifndef TN_TEST_ALLOC_HOOKS_H
#define TN_TEST_ALLOC_HOOKS_H
#include <stdatomic.h>
#include <stdlib.h>
static atomic_long th_alloc_count, th_alloc_live;
static long th_alloc_fail_at = -1;
static void *th_malloc(size_t n) {
    if (atomic_fetch_add(&th_alloc_count, 1) + 1 == th_alloc_fail_at) return NULL;
    void *p = malloc(n);
    if (p) atomic_fetch_add(&th_alloc_live, 1);
    return p;
}
static void *th_realloc(void *p, size_t n) {
    if (atomic_fetch_add(&th_alloc_count, 1) + 1 == th_alloc_fail_at) return NULL;
    void *q = realloc(p, n);
    if (q && !p) atomic_fetch_add(&th_alloc_live, 1);
    return q;
}
static void th_free(void *p) {
    if (p) atomic_fetch_sub(&th_alloc_live, 1);
    free(p);
}
#define TN_MALLOC(n) th_malloc(n)
#define TN_REALLOC(p, n) th_realloc(p, n)
#define TN_FREE(p) th_free(p)
#endif
