/* ops_linalg: implementation part of tensor.h (in progress) */

/* >>registry: fills this part's rows of the op table */
static void tn__register_linalg_ops(tn_op_def *t) {
    (void)t;
}
