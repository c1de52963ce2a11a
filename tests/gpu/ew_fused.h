/* tests/gpu/ew_fused.h - one wide fused program for tests/test_nvrtc.c and
   tests/test_cuda.c (after gpu/ew_programs.h). */
#ifndef TN_TEST_EW_FUSED_H
#define TN_TEST_EW_FUSED_H

/* x*y, exp, a float16 input, a comparison, where, immediates (inf, NaN,
   -0, an overflow to float32 inf), int math, four outputs of four dtypes. */
static void build_fused(prog_buf *b) {
    const tn_dtype in[4] = { TN_F32, TN_F32, TN_F16, TN_I32 };
    pb_init(b, 4, in);
    int xy = pb_op(b, TN_OP_MUL, TN_F32, TN_F32, 0, 1, -1);
    int ex = pb_op(b, TN_OP_EXP, TN_F32, TN_F32, xy, -1, -1);
    int z = pb_as(b, 2, TN_F32);
    int s = pb_op(b, TN_OP_ADD, TN_F32, TN_F32, ex, z, -1);
    int half = pb_imm(b, TN_F32, 0.5);
    int gt = pb_op(b, TN_OP_GT, TN_BOOL, TN_F32, s, half, -1);
    int w = pb_op(b, TN_OP_WHERE, TN_F32, TN_F32, gt, s, xy);
    int inf = pb_imm(b, TN_F32, INFINITY), nan = pb_imm(b, TN_F32, NAN), big = pb_imm(b, TN_F32, 1e300);
    int negz = pb_imm(b, TN_F32, -0.0);
    int c = pb_op(b, TN_OP_CLIP, TN_F32, TN_F32, w, negz, inf);
    int m = pb_op(b, TN_OP_MINIMUM, TN_F32, TN_F32, c, big, -1);
    int mm = pb_op(b, TN_OP_MAXIMUM, TN_F32, TN_F32, m, nan, -1);
    int i64 = pb_as(b, 3, TN_I64);
    int seven = pb_imm(b, TN_I64, 7);
    int md = pb_op(b, TN_OP_MOD, TN_I32, TN_I64, i64, seven, -1);
    pb_out(b, mm, TN_F32);
    pb_out(b, gt, TN_BOOL);
    pb_out(b, s, TN_F16);
    pb_out(b, xy, TN_F64);
    pb_out(b, md, TN_I32);
}

#endif
