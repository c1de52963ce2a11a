/* ops_shape: implementation part of tensor.h (in progress) */

/* >>registry: fills this part's rows of the op table */
static void tn__register_shape_ops(tn_op_def *t) {
    (void)t;
}
