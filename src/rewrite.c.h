/* >>rewrite: the rewrite engine and its passes (in progress) */
TN_API tn_result tn__optimize(tn_graph *fg, tn_var **roots, int n_roots, tn_mode mode) {
    (void)fg; (void)roots; (void)n_roots; (void)mode;
    return TN_OK;
}
