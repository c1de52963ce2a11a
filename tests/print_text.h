/* tests/print_text.h - what tn_debugprint_function writes, as a string
   (free it); for tests that compare printed graphs. Needs open_memstream
   (_POSIX_C_SOURCE 200809L). */
#ifndef TN_TEST_PRINT_TEXT_H
#define TN_TEST_PRINT_TEXT_H
static inline char *print_fn(const tn_func *f) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return NULL;
    tn_debugprint_function(f, m);
    fclose(m);
    return buf;
}
#endif
